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


@pytest.mark.slow
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
