"""FF-HEDM live, in one command: the synthetic sweep's raw frames streamed by the detector
simulator into ``stager stream receive --analysis hedm.ffpeaks`` (stage 1 as frames
arrive), whose ``--then`` runs stage 2 (``hedm/ffgrains.py``: indexing and refinement) on
the scan's drained ``<scan>.h5`` at the end of the scan: the same Grains.csv, byte for
byte, as the file flow's on the same frames, at tens of grains (the sweep and its file
flow: the HEDM guide's commands, tests/conftest.py's ``ff_sweep``, shared with
test_hedm_ff_grains.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job

pytestmark = [pytest.mark.slow,    # 360 frames streamed and read from files, stage 2 twice
              pytest.mark.timeout(900)]  # may build ``ff_sweep``

GRAINS = 20


def guide_command():
    """The live FF command of docs/guide/hedm.md ("**Live.**"), split as sh splits it."""
    from tests.docexamples import examples

    found = [e for e in examples("docs/guide/hedm.md") if "--then" in e.text]
    assert len(found) == 1, [e.id for e in found]
    # bash itself splits it (a backslash-newline inside quotes stays in the argument)
    r = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + found[0].text.strip()],
                       capture_output=True, text=True, check=True)
    return r.stdout.split("\0")[:-1]


def test_streamed_sweep_gives_the_file_flows_grains(tmp_path, monkeypatch, ff_sweep):
    from kernels import open_frames
    from streams import ScanGeometry, SimulatedScan
    from streams.simulate import array_source, run_producers

    assert f"--grains {GRAINS} " in ff_sweep["text"]
    params = str(ff_sweep["params"])
    files = ff_sweep["out"]      # the file flow's stage 1 and stage 2 on the same frames

    reader = open_frames(str(ff_sweep["sweep"] / "ff_000001.ge3"), shape=(192, 192))
    stack = np.stack([reader.read(i) for i in range(reader.n_frames)])
    # the HEDM guide's command as printed: its receive options and its --then template,
    # SWEEP filled in ({out}, {scan} and {h5} the job fills in per scan); `python` on
    # PATH is this interpreter, as in the user's activated venv
    argv = guide_command()
    assert argv[:6] == ["mpirun", "-n", "4", "stager", "stream", "receive"], argv
    opts = dict(zip(argv[6::2], argv[7::2]))
    sweep = str(ff_sweep["sweep"])
    assert opts["--set"] == "params=SWEEP/ff.params" and params == sweep + "/ff.params"
    then = opts["--then"].replace("SWEEP", sweep)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep
                       + os.environ.get("PATH", ""))
    job = Job(tmp_path, "--analysis", opts["--analysis"], "--set", f"params={params}",
              "--partition-frames", "8", "--then", then)
    rv = job.rendezvous()
    g = ScanGeometry("ff1", 2, len(stack), 2, stack.shape[1:], "<u2", (1, len(stack)))
    run_producers(SimulatedScan(g, source=array_source(stack), encoding="bslz4"), rv)
    rc, out, err = job.wait(timeout=900)
    assert rc == 0, out + err
    assert "scan ff1: --then exited 0" in err, err
    want = (files / "Grains.csv").read_text()
    assert want.startswith(f"%NumGrains {GRAINS}\n")
    assert (job.out / "ff1-grains" / "Grains.csv").read_text() == want, \
        (job.out / "ff1.then.log").read_text()[-3000:]
