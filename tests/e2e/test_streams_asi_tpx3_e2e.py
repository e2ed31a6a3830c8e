"""ASI TPX3 end to end: ``mpirun -n 4 stager stream receive --protocol asi-tpx3`` (2 emulated
nodes, 2 receivers: one connects, the other opens and closes each scan as it is shared).

A sparse scan written by our simulator (``python -m streams.simulate --protocol asi-tpx3
--dump``, several array chunks) is the one stream of every test: LiberTEM-live's own
``run_udf`` on it, replayed by its ``TpxCameraSim``, is the reference (it equals
LiberTEM's ``run_udf`` on the same scan dense); the job fed by that same
``TpxCameraSim`` (LiberTEM's SumUDF, SumSigUDF, ApplyMasksUDF) and the job fed by our
simulator (the 4D-STEM flow's sum image and virtual images) equal it bit for bit. Then
hostile streams from our simulator: each fault refused and counted by reason, and the
scan that follows exact.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job, _env

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
TESTS = Path(__file__).resolve().parents[1]
UDFS = ("udf:libertem.udf.sum:SumUDF,libertem.udf.sumsigudf:SumSigUDF,"
        "libertem.udf.masks:ApplyMasksUDF")
NAV, SIG = (8, 8), (128, 128)


def _peers():
    for mod in ("libertem_live", "libertem_asi_tpx3", "libertem", "sparse"):
        pytest.importorskip(mod, reason=f"{mod} is not installed (pip install "
                            "'mpistage[livepeers]'): LiberTEM-live's TPX3 simulator is the peer")


def _stream(tmp: Path) -> Path:
    path = tmp / "scan.tpx3"
    r = subprocess.run([sys.executable, "-m", "streams.simulate", "--protocol", "asi-tpx3",
                        "--dump", str(path), "--scan-shape", *map(str, NAV), "--shape",
                        *map(str, SIG), "--events", "300", "--chunk-frames", "10"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return path


def _masks(tmp: Path) -> Path:
    yy, xx = np.mgrid[:SIG[0], :SIG[1]]
    d2 = (yy - SIG[0] / 2) ** 2 + (xx - SIG[1] / 2) ** 2
    path = tmp / "masks.npy"
    np.save(path, np.stack([d2 < 16 ** 2, (d2 >= 20 ** 2) & (d2 < 50 ** 2)]).astype("<f4"))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The stream, its masks and LiberTEM-live's results on it."""
    _peers()
    tmp = tmp_path_factory.mktemp("tpx3ref")
    stream, masks = _stream(tmp), _masks(tmp)
    out = tmp / "ref.npz"
    r = subprocess.run([sys.executable, str(TESTS / "libertem_live_tpx3_reference.py"),
                        str(stream), str(masks), str(out)], env=_env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    want = dict(np.load(out))
    assert tuple(want["nav_shape"]) == NAV and want["sum"].sum() > 1000
    _libertem_on_the_dense_equivalent_agrees(masks, want)
    return stream, masks, want


def _libertem_on_the_dense_equivalent_agrees(masks: Path, want: dict) -> None:
    """LiberTEM's run_udf on the same scan dense (the simulator's CSR, densified by
    scipy) gives LiberTEM-live's results: the reference is the scan's, not a sparse
    path's."""
    import scipy.sparse as sp
    from libertem.api import Context
    from libertem.executor.inline import InlineJobExecutor
    from libertem.udf.masks import ApplyMasksUDF
    from libertem.udf.sum import SumUDF
    from libertem.udf.sumsigudf import SumSigUDF

    from streams.protocols.asi_tpx3.simulator import sparse_scan

    ip, ix, v = sparse_scan(NAV, SIG, 300.0, seed=0)     # what _stream dumped
    n = NAV[0] * NAV[1]
    dense = sp.csr_matrix((v, ix, ip), shape=(n, SIG[0] * SIG[1])).toarray()
    ctx = Context(executor=InlineJobExecutor())
    ds = ctx.load("memory", data=dense.reshape(*NAV, *SIG).astype(np.uint32), sig_dims=2)
    m = np.load(masks)
    r = ctx.run_udf(ds, [SumUDF(), SumSigUDF(),
                         ApplyMasksUDF(mask_factories=[lambda a=a: a for a in m])])
    for k, res in zip(("sum", "sumsig", "masks"), r):
        assert np.array_equal(res["intensity"].data, want[k]), k


def _served(job: Job) -> Path:
    (h5,) = [p for p in job.out.glob("tpx3-*.h5") if ".live" not in p.name]
    rep = json.loads(h5.with_suffix(".json").read_text())
    assert rep["ok"] and rep["frames_complete"] == 64 and rep["receivers"] == 2, rep
    assert rep["geometry"]["scan_shape"] == list(NAV) and rep["geometry"]["shape"] == list(SIG)
    return h5


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_libertem_live_tpx3_simulator_into_two_receivers_equals_libertem_live(tmp_path,
                                                                              reference):
    import h5py
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    stream, masks, want = reference
    sim = TpxCameraSim(cached="mem", port=0, sleep=0.5, paths=[str(stream)])
    sim.start()
    sim.wait_for_listen()
    try:     # it repeats the stream while connected: the job serves its first scan
        job = Job(tmp_path, "--protocol", "asi-tpx3", "--tpx3-endpoint",
                  f"127.0.0.1:{sim.server_t.port}", "--tpx3-scan-shape=-1,8",
                  "--analysis", UDFS, "--analysis-params",
                  json.dumps([{}, {}, {"masks": str(masks)}]), "--partition-frames", "8")
        assert job.started()["protocol"] == "asi-tpx3"
        rc, out, err = job.wait(240)
    finally:
        sim.stop()
    assert rc == 0, out + err
    with h5py.File(_served(job), "r") as f:
        got = {k: f[f"udf/{u}/intensity"][()] for k, u in
               (("sum", "SumUDF"), ("sumsig", "SumSigUDF"), ("masks", "ApplyMasksUDF"))}
        assert "ASI CheeTah TPX3" in f["detector/description"][()].decode()
    for k in ("sum", "sumsig", "masks"):
        assert got[k].shape == want[k].shape, k
        assert np.array_equal(got[k], want[k]), k          # integer counts: exact


@pytest.mark.timeout(300)
def test_our_simulator_into_the_4d_stem_flow_equals_libertem_live(tmp_path, reference):
    """The flow's sums, virtual images and the detector's events (stempy's layout, read
    by stempy) take the partitions as CSR; spilled, they are dense frames, which the
    offline flow reads back to the same result, events included."""
    import h5py
    import scipy.sparse as sp

    sio = pytest.importorskip("stempy.io")

    from streams.protocols.asi_tpx3.simulator import Tpx3Simulator

    stream, masks, want = reference
    params = json.dumps({"mode": "both", "events": "detector", "mask_file": str(masks)})
    spill = tmp_path / "spill" / "%n"
    with Tpx3Simulator() as sim:
        sim.send(stream.read_bytes())
        job = Job(tmp_path, "--protocol", "asi-tpx3", "--tpx3-endpoint", sim.endpoint,
                  "--analysis", "stem4d.flow", "--analysis-params", params,
                  "--partition-frames", "16", "--spill", str(spill))
        job.started()
        rc, out, err = job.wait(240)
    assert rc == 0, out + err
    h5 = _served(job)
    with h5py.File(h5, "r") as f:
        assert np.array_equal(f["sum_image"][()], want["sumsig"])
        for m in range(2):
            assert np.array_equal(f[f"virtual/masks_{m}"][()], want["masks"][..., m]), m
        assert np.array_equal(f["electron_counts"][()], want["sumsig"])
        live_events = f["electron_events/frames"][()]
    from streams.protocols.asi_tpx3.simulator import sparse_scan

    ip, ix, v = sparse_scan(NAV, SIG, 300.0, seed=0)     # what _stream dumped
    dense = sp.csr_matrix((v, ix, ip), shape=(64, SIG[0] * SIG[1])).toarray()
    sa = sio.load_electron_counts(str(h5))
    assert np.array_equal(sa.to_dense().reshape(64, -1), dense)
    parts = sorted((tmp_path / "spill").rglob("part-*.h5"))
    assert len(parts) == 4
    with h5py.File(parts[0], "r") as f:
        assert f["frames"].shape == (16, *SIG) and f["frames"].dtype == np.uint32
    r = subprocess.run([sys.executable, "-m", "workflows", "run", "stem4d/flow.py",
                        "--executor", "inline", "--out", str(tmp_path / "rerun"), "--",
                        "--spilled", str(spill), "--scan", h5.stem, "--analysis-params",
                        params], cwd=TESTS.parent, env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(tmp_path / "rerun" / h5.name, "r") as f:
        assert np.array_equal(f["sum_image"][()], want["sumsig"])
        assert np.array_equal(f["virtual/masks_1"][()], want["masks"][..., 1])
        again = f["electron_events/frames"][()]
        assert len(again) == len(live_events)
        assert all(np.array_equal(x, y) for x, y in zip(again, live_events))


@pytest.mark.timeout(300)
def test_hostile_tpx3_streams_are_refused_counted_and_the_next_scan_is_exact(tmp_path,
                                                                            reference):
    """Over four connections: a header cut short by the connection's end; then a chunk
    outside any scan, a chunk announcing more than the receiver's bound (skipped unread,
    framing kept), a chunk whose index pointers run past its events and one with a
    pixel past the frame (both taken, refused), a chunk cut mid-frame; an unknown tag
    (the framing lost: connection dropped); then the good scan whole."""
    import h5py

    from streams.protocols.asi_tpx3 import wire
    from streams.protocols.asi_tpx3.simulator import Tpx3Simulator

    stream, masks, want = reference
    ip = np.array([0, 2, 3], np.uint32)
    ix, v = np.array([1, 5, 7], np.uint32), np.array([1, 2, 3], np.uint32)
    chunk = wire.encode_chunk(ip, ix, v)
    start = wire.encode_acquisition_start((2, 4), SIG, 9) + wire.encode_scan_start(9)
    events = 1 << 21          # 16 MiB + 12 bytes: past the bound of --memory 64 / 4
    big = bytearray(chunk[:wire.HEADER])
    big[6:18] = np.array([events, 12, 12 + 4 * events], "<u4").tobytes()
    bad_ptr = wire.encode_chunk(np.array([0, 2, 9], np.uint32), ix, v)
    bad_pix = wire.encode_chunk(ip, np.array([1, 5, SIG[0] * SIG[1]], np.uint32), v)
    with Tpx3Simulator() as sim:
        sim.send(wire.encode_acquisition_start((2, 4), SIG)[:20])
        sim.cut()
        sim.send(chunk + start + bytes(big) + bytes(12 + 8 * events))
        sim.send(bad_ptr + bad_pix + chunk[:-6])
        sim.cut()
        sim.send(b"\x09" + bytes(31))
        sim.cut()
        sim.send(stream.read_bytes())
        job = Job(tmp_path, "--protocol", "asi-tpx3", "--tpx3-endpoint", sim.endpoint,
                  "--analysis", "stem4d.flow", "--analysis-params",
                  json.dumps({"mode": "virtual", "mask_file": str(masks)}),
                  "--partition-frames", "16", "--memory", "64", "--scans", "2",
                  "--idle-timeout", "60")
        job.started()
        rc, out, err = job.wait(240)
    assert rc == 1, out + err          # the hostile scan was not whole: said, not hidden
    assert "8 missing" in out and "[NOT SERVED]" in out and "64/64 frames complete" in out
    rej = json.loads((job.out / "rejections.json").read_text())
    by = rej["by_reason"]
    assert by.get("too_large") == 1 and by.get("unknown_scan") == 1, rej
    assert by.get("out_of_range") == 2, rej                 # index pointers, pixel index
    assert by.get("wrong_payload_size") == 2, rej           # header cut, chunk cut
    assert by.get("malformed_header") == 1, rej             # the unknown tag
    assert any(str(12 + 8 * events) in e for e in rej["examples"]), rej["examples"]
    reps = sorted(job.out.glob("tpx3-*.json"))
    assert len(reps) == 2
    hostile, good = (json.loads(p.read_text()) for p in reps)
    assert not hostile["ok"] and hostile["frames_complete"] == 0
    assert good["ok"] and good["frames_complete"] == 64
    with h5py.File(job.out / (reps[1].stem + ".h5"), "r") as f:
        assert np.array_equal(f["sum_image"][()], want["sumsig"])
        assert np.array_equal(f["virtual/masks_1"][()], want["masks"][..., 1])


def _offline(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workflows", "run", "analyses.runner",
                           "--executor", "inline", "--out", str(tmp_path / "offline"), "--",
                           *args], cwd=TESTS.parent, env=_env(), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.timeout(300)
def test_the_recorded_stream_through_the_offline_runner_equals_libertem_live(tmp_path,
                                                                            reference):
    """The file the live tests stream (``--dump``), read by ``analyses.runner --tpx3`` as
    CSR partitions: LiberTEM's UDFs and the 4D-STEM flow give LiberTEM-live's results
    (which LiberTEM's on the dense scan equals), bit for bit; shapes from its headers."""
    import h5py

    stream, masks, want = reference
    r = _offline(tmp_path, "--tpx3", str(stream), "--scan-shape", *map(str, NAV),
                 "--partition-frames", "12", "--analysis", UDFS, "--analysis-params",
                 json.dumps([{}, {}, {"masks": str(masks)}]))
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(tmp_path / "offline" / "scan.h5", "r") as f:
        for k, u in (("sum", "SumUDF"), ("sumsig", "SumSigUDF"), ("masks", "ApplyMasksUDF")):
            got = f[f"udf/{u}/intensity"][()]
            assert got.shape == want[k].shape and np.array_equal(got, want[k]), k
    params = json.dumps({"mode": "both", "mask_file": str(masks)})
    r = _offline(tmp_path, "--tpx3", str(stream), "--scan", "flow", "--analysis",
                 "stem4d.flow", "--analysis-params", params)
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(tmp_path / "offline" / "flow.h5", "r") as f:
        assert np.array_equal(f["sum_image"][()], want["sumsig"])
        for m in range(2):
            assert np.array_equal(f[f"virtual/masks_{m}"][()], want["masks"][..., m]), m


def test_a_truncated_or_mismatched_tpx3_file_fails_naming_file_offset_and_remedy(tmp_path):
    whole = _stream(tmp_path)
    blob = whole.read_bytes()
    cut = tmp_path / "cut.tpx3"
    cut.write_bytes(blob[:len(blob) // 2])
    r = _offline(tmp_path, "--tpx3", str(cut))
    assert r.returncode != 0
    assert f"{cut}: byte " in r.stderr and "frame " in r.stderr, r.stderr
    assert "truncated" in r.stderr and "record the whole acquisition again" in r.stderr
    assert not (tmp_path / "offline" / "cut.h5").exists()
    r = _offline(tmp_path, "--tpx3", str(whole), "--scan-shape", "4", "16")
    assert r.returncode != 0 and "acquisition start says 8 8" in r.stderr, r.stderr
