"""Per-node numba cache: one process compiles into a directory, a fresh one only loads."""
import json
import os
import subprocess
import sys

import pytest

from kernels import CacheError, warm_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = """
import json, sys
import kernels                                  # kernels imported first ...
from kernels.numba_cache import cache_counts, exercise_kernels, use_cache_dir
use_cache_dir(sys.argv[1])                      # ... then re-pointed
exercise_kernels()
print(json.dumps(cache_counts()))
"""

# FF-HEDM stage 2 as the flow calls it (indexing on exact spots of one grain, its
# refinement, the uniform search's scoring): every kernel call must load, not compile
PROBE_FF = """
import json, sys
import numpy as np
from kernels.numba_cache import cache_counts, use_cache_dir
use_cache_dir(sys.argv[1])
from hedm.ffindex import index_spots, _uniform
from hedm.ffparams import GRAINS_SCHEMA, ff_arrays, grains_params
from hedm.ffrefine import refine_grain
from hedm.ffspots import SPOT_DTYPE
from hedm.params import parse_params
from kernels.crystal import rotation_vector_matrix
from kernels.ffmodel import ff_spots, pixel_to_lab_kernel
text = ("LatticeConstant 4.08 4.08 4.08 90 90 90\\nWavelength 0.172979\\nLsd 120000\\n"
        "BC 96.3 95.7\\npx 200\\nOmegaStart 180\\nOmegaStep -1\\nMinEta 6\\nRsample 1\\n"
        "Hbeam 1\\nStepSizePos 100\\nStepSizeOrient 2\\nWidth 400\\nMarginOme 1.5\\n"
        "MarginEta 400\\nMarginRadial 300\\n")
p = grains_params(parse_params(text, GRAINS_SCHEMA))
p["MergeDistance"] = 200.0
a = ff_arrays(p, 360, (192, 192))
rows = ff_spots(rotation_vector_matrix(np.array([0.1, 0.2, 0.3])), p["LatticeConstant"],
                np.zeros(3), a)
sp = np.zeros(len(rows), SPOT_DTYPE)
sp["id"] = np.arange(len(rows))
sp["omega"], sp["eta"], sp["two_theta"], sp["y"], sp["z"] = rows[:, :5].T
sp["ring"], sp["intensity"] = rows[:, 6], 1.0
lab = np.empty((len(rows), 3))
pixel_to_lab_kernel(np.ascontiguousarray(sp["y"]), np.ascontiguousarray(sp["z"]), a, lab)
sp["lab_x"], sp["lab_y"], sp["lab_z"] = lab.T
sp["radius"] = p["Lsd"] * np.hypot(lab[:, 1], lab[:, 2]) / lab[:, 0]
res = index_spots(sp, a, p)
assert len(res["grains"]) == 1, res["grains"]
assert refine_grain(res["grains"][0], res["observed"], a, p)["converged"]
_uniform(res["observed"], a, dict(p, StepSizeOrient=15.0), p["LatticeConstant"],
         np.zeros(len(res["observed"]), bool))
print(json.dumps(cache_counts()))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)      # compiles every kernel: minutes on a loaded machine
def test_warm_cache_then_fresh_process_only_loads(tmp_path):
    cache = tmp_path / "numba-node0"
    report = warm_cache(str(cache))
    assert report.index_files >= 10 and report.functions >= 10
    nbi = [f for _, _, fs in os.walk(cache) for f in fs if f.endswith(".nbi")]
    assert len(nbi) == report.index_files
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", PROBE, str(cache)], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=300, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    misses = {k: v[1] for k, v in counts.items() if v[1]}
    assert not misses, f"compiled again instead of loading: {misses}"
    assert sum(v[0] for v in counts.values()) >= 15
    # FF stage 2's kernels are warmed with the types the flow passes: it only loads them
    out = subprocess.run([sys.executable, "-c", PROBE_FF, str(cache)], env=env,
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    ff = {k: v for k, v in counts.items() if k.startswith(("ffmodel.", "ffindex."))}
    assert {k for k, v in ff.items() if v[0]} >= {
        "ffmodel.ff_spots_kernel", "ffmodel.residuals_kernel", "ffmodel.pixel_to_lab_kernel",
        "ffmodel.b_matrix_kernel", "ffindex.fibre_search_kernel", "ffindex.match_kernel",
        "ffindex.score_orientations_kernel"}, ff
    misses = {k: v[1] for k, v in counts.items() if v[1]}
    assert not misses, f"FF stage 2 compiled instead of loading: {misses}"
    # a second warm-up of a warm directory compiles nothing new
    assert warm_cache(str(cache)).index_files == report.index_files


def test_warm_cache_unusable_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CacheError, match="cannot be created"):
        warm_cache(str(blocker / "sub"))


def test_leader_hook_needs_a_node_local_cache_dir(monkeypatch):
    from kernels.numba_cache import leader_hook
    from workflows.leader import resolve_hook

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    with pytest.raises(CacheError, match="NUMBA_CACHE_DIR is not set"):
        leader_hook(None)
    # the runner's --leader-hook-startup accepts it by name
    assert resolve_hook("kernels.numba_cache:leader_hook") is not None
