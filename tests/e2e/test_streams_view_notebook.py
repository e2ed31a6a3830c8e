"""``LiveJob.plot`` in a real Jupyter kernel (nbclient + ipykernel), as a notebook runs it:
a live ``mpirun -n 4`` job fed by the simulator, one figure updated in place."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]

CELLS = [
    """import os, sys, threading
sys.path.insert(0, {root!r})
from tests.e2e.test_streams_receive import _env, _scan
from streams.protocols.native.rendezvous import read_rendezvous
from streams.simulate import run_producers
from streams.view import launch
job = launch("rv.json", "out", ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
             os.path.abspath("local/%n"), "--live-interval", "0.2", "--analysis", "stem4d.flow",
             "--partition-frames", "2"], env=_env())
job.wait_connected()
feed = threading.Thread(target=run_producers,
                        args=(_scan(scan_shape=(8, 8), rate=12.0), read_rendezvous(job.rendezvous)))
feed.start()""",
    """plot = job.plot("s1", timeout=120)""",
    """import json, h5py, numpy as np
feed.join(60)
status = job.wait(120)
job.close()
with h5py.File("out/s1.h5", "r") as f:
    same = {n: bool(np.array_equal(plot.image(n), f[n][()])) for n in plot.names}
print(json.dumps({"status": status, "updates": plot.updates, "final": plot.partial.final,
                  "same": same, "handle": plot.handle is not None}))""",
]


def test_the_plot_updates_in_place_in_a_jupyter_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="needs nbformat (the 'view-test' extra)")
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient (the 'view-test' extra)")
    pytest.importorskip("ipykernel", reason="needs ipykernel (the 'view-test' extra)")
    pytest.importorskip("matplotlib", reason="needs matplotlib (the 'plot' extra)")
    from PIL import Image

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.replace("{root!r}", repr(str(ROOT))))
                for c in CELLS]
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    plot_out = nb.cells[1].outputs
    # one picture, replaced as partials arrived (update_display_data), not one per partial
    shown = [o for o in plot_out if o.output_type == "display_data"]
    assert len(shown) == 1 and "image/png" in shown[0].data, plot_out
    assert shown[0].metadata is not None
    png = Image.open(io.BytesIO(base64.b64decode(shown[0].data["image/png"])))
    assert png.size[0] > 300
    text = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    got = json.loads(text.strip().splitlines()[-1])
    assert got["status"] == 0 and got["final"] and got["handle"], got
    assert got["updates"] >= 3, got               # drawn again as partials arrived
    assert got["same"] and all(got["same"].values()), got    # the final figure = the file
