"""``stager stream receive`` end to end: real ``mpirun`` jobs, 2 emulated nodes, real sockets.

Every test starts a receiving job (``mpirun -n 4``: on each emulated node a
receiver and a worker, unless said otherwise), streams a simulated scan from the
detector simulator (4 producers x 4 sectors over loopback) and checks the
files the job leaves: the HDF5 result against the same frames processed offline
from a file by the same flow, and the JSON report against the faults injected.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")

ROOT = Path(__file__).resolve().parents[2]
SLOW = Path(__file__).resolve().parents[1] / "stream_slow_analysis.py"


def _env(**extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", **extra)
    for k in list(env):  # a fresh job even when pytest runs under mpirun
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "OMPI_MCA_ess", "OMPI_MCA_orte")):
            env.pop(k)
    return env


class Job:
    """A receiving job in the background."""

    def __init__(self, tmp: Path, *args: str, np_: int = 4, nodes: int = 2, marker: str = ""):
        self.tmp, self.out, self.rv = tmp, tmp / "out", tmp / "rv.json"
        # as slurm/stream-session.sbatch launches it: mpirun leaves rank 0 time to write the
        # report when a rank dies (it sometimes sent SIGKILL within ms of SIGTERM)
        cmd = ["mpirun", "--mca", "odls_base_sigkill_timeout", "5", "-n", str(np_),
               "--oversubscribe", sys.executable, "-m", "stager",
               "stream", "receive", "--rendezvous", str(self.rv), "--out", str(self.out),
               "--emulate-nodes", str(nodes), "--bind", "127.0.0.1", "--local",
               str(tmp / "local" / "%n"), "--live-interval", "0.2", *args]
        self.p = subprocess.Popen(cmd, cwd=tmp, env=_env(STREAM_TEST_MARKER=marker or str(tmp)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def rendezvous(self, timeout: float = 180.0):
        """The job's rendezvous file, once written. The first job of a CI run starts
        with cold caches beside three other pytest workers: more than 60 s was seen."""
        from streams.protocols.native.rendezvous import wait_for_rendezvous

        try:
            return wait_for_rendezvous(self.rv, timeout=timeout)
        except Exception as e:
            self.p.kill()
            raise AssertionError(f"no rendezvous ({type(e).__name__}: {e}): "
                                 f"{self.p.communicate()}") from None

    def started(self, timeout: float = 180.0) -> dict:
        """Wait for the rendezvous file of any mode (Stream V2 jobs write one too)."""
        end = time.monotonic() + timeout
        while not self.rv.exists():
            if time.monotonic() > end or self.p.poll() is not None:
                self.p.kill()
                raise AssertionError(f"no rendezvous: {self.p.communicate()}")
            time.sleep(0.1)
        return json.loads(self.rv.read_text())

    def wait(self, timeout: float = 120.0):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"the job hung: {out}\n{err}") from None
        return self.p.returncode, out, err

    def report(self, scan: str) -> dict:
        return json.loads((self.out / f"{scan}.json").read_text())


def _scan(name="s1", scan_shape=(8, 8), shape=(64, 64), producers=4, sectors=4, **kw):
    from streams import ScanGeometry, SimulatedScan

    g = ScanGeometry(name, producers, scan_shape[0] * scan_shape[1], sectors, shape, "<u2",
                     scan_shape)
    return SimulatedScan(g, **kw)


def _offline(tmp: Path, scan_shape, shape, scan="s1", k=8) -> Path:
    """The same synthetic frames, written to a file and processed by the same flow."""
    from stem4d.synth import write_scan_file

    src = write_scan_file(str(tmp / "frames.h5"), scan_shape, shape)
    off = tmp / "offline"
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "stem4d/flow.py"),
                        "--executor", "inline", "--out", str(off), "--", "--frames",
                        f"{src}:/frames", "--scan", scan, "--partition-frames", str(k)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return off / f"{scan}.h5"


def _datasets(path):
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset)
                     else None)
    return out


def test_streamed_scan_equals_the_same_frames_processed_offline(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--analysis", "stem4d.flow", "--partition-frames", "3")
    rv = job.rendezvous()
    assert len(rv.receivers) == 2 and rv.live
    run_producers(_scan(scan_shape=(8, 12), encoding="bslz4"), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 96 and rep["messages"]["lost_in_transport"] == 0
    assert len(rep["memory"]["peak_rss_mib"]) == 4 and rep["memory"]["receiver_peak_rss_mib"] > 10
    streamed = _datasets(job.out / "s1.h5")
    offline = _datasets(_offline(tmp_path, (8, 12), (64, 64)))
    assert sorted(streamed) == sorted(offline)
    assert streamed["sum_image"].shape == (8, 12) and streamed["frames_complete"].all()
    for name, a in streamed.items():
        b = offline[name]
        if a.dtype == object:      # the events: one array per frame
            assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b)), name
        else:
            assert np.array_equal(a, b), name
    assert streamed["electron_counts"].sum() > 100     # the comparison compared something
    assert (job.out / "s1.live.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_withheld_frames_and_a_dropped_sector_are_reported_exactly(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path)
    rv = job.rendezvous()
    run_producers(_scan(withhold=frozenset({5, 6, 40}), drop=frozenset({(17, 2)})), rv)
    rc, out, err = job.wait()
    assert rc == 1, out + err
    rep = job.report("s1")
    assert not rep["ok"]
    assert rep["frames_missing"] == 3 and rep["missing"] == [[5, 7], [40, 41]]
    assert rep["incomplete"] == {"17": [2]} and rep["frames_complete"] == 60
    assert rep["messages"]["lost_in_transport"] == 0
    assert (job.out / "s1.h5").exists() and not (tmp_path / "local" / "node0").exists()
    import h5py

    with h5py.File(job.out / "s1.h5") as f:
        fc = f["frames_complete"][()].ravel()
        s = f["sum_image"][()].ravel()
    assert list(np.flatnonzero(~fc)) == [5, 6, 17, 40]
    assert s[5] == s[6] == s[40] == 0 and s[17] > 0


def test_allow_loss_relaxes_the_exit_status(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--allow-loss", "0.05")
    rv = job.rendezvous()
    run_producers(_scan(withhold=frozenset({3})), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    assert job.report("s1")["frames_missing"] == 1


def test_malformed_messages_are_counted_and_skipped(tmp_path):
    from streams.simulate import malformed_messages, run_producers

    bad = ("not_msgpack", "missing_field", "wrong_payload_size", "unknown_encoding",
           "unknown_scan", "corrupt_lz4")
    job = Job(tmp_path)
    rv = job.rendezvous()
    run_producers(_scan(inject=bad), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 64
    m = rep["messages"]
    want = malformed_messages("s1", _scan().geometry)
    rejected = dict(m["rejected"])
    for k, v in m["rejected_unattributed"].items():
        rejected[k] = rejected.get(k, 0) + v
    expected: dict = {}
    for name in bad:
        expected[want[name][1]] = expected.get(want[name][1], 0) + 1
    assert rejected == expected
    assert m["lost_in_transport"] == 0


def test_a_slow_consumer_makes_producers_block_and_nothing_is_lost(tmp_path):
    from streams.simulate import run_producers

    # one rank per node: the receivers run the (slow) analysis themselves
    job = Job(tmp_path, "--analysis", f"{SLOW}:Slow", "--set", "seconds=0.03",
              "--partition-frames", "1", "--hwm", "4", np_=2)
    rv = job.rendezvous()
    frame = np.random.default_rng(0).integers(0, 1000, (512, 512)).astype("<u2")
    t = time.monotonic()
    # 128 MiB: more than ZeroMQ's queues and the kernel's socket buffers hold
    res = run_producers(_scan(scan_shape=(16, 16), shape=(512, 512), source=lambda i: frame),
                        rv, sndhwm=2)
    took = time.monotonic() - t
    rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report("s1")
    assert rep["ok"] and rep["frames_complete"] == 256
    assert rep["messages"]["lost_in_transport"] == 0 and not rep["messages"]["rejected"]
    # 128 partitions per receiver at 30 ms each (3.8 s): the producers waited for them
    assert took > 2.0, took
    assert sum(r["blocked_s"] for r in res) > 2.0, res


def test_stream_v2_from_the_simulator_gives_the_same_result(tmp_path):
    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.simulate import synthetic_frame
    from streams.protocols.stream2.streamv2 import scan_name

    name = scan_name(7, f"SIM{7:023d}")     # the simulator's series_unique_id

    with StreamV2Simulator(send_timeout=30) as sim:
        job = Job(tmp_path, "--stream2", sim.endpoint, "--analysis", "stem4d.flow",
                  "--partition-frames", "4", "--v2-grace", "1")
        info = job.started()
        assert info["protocol"] == "dectris-stream2" and info["live"]
        time.sleep(1.0)     # every client connected: the detector deals round-robin
        sim.send_series(7, lambda i: synthetic_frame(i, (64, 64), (8, 8)), 64, (64, 64),
                        compression="bslz4", scan_shape=(8, 8))
        rc, out, err = job.wait()
    assert rc == 0, out + err
    rep = job.report(name)
    assert rep["ok"] and rep["frames_complete"] == 64 and rep["receivers"] == 2
    streamed = _datasets(job.out / f"{name}.h5")
    offline = _datasets(_offline(tmp_path, (8, 8), (64, 64), scan=name))
    for ds in ("sum_image", "electron_counts", "virtual/bright_field"):
        assert np.array_equal(streamed[ds], offline[ds]), ds


def test_stream_v2_as_a_real_detector_speaks_it(tmp_path):
    """One Stream V2 job (4 receivers: two clients on each of 2 emulated nodes): a start
    with header_detail all (arrays compressed) whose pixel mask is applied; a truncated
    message, a corrupt copy before the good one, an image sent twice, garbage, an
    unknown type, a non-map, a multi-part message and a wrong typed-array tag; a
    series whose start has an undecodable flatfield (never starts); a second series
    with the same series_id and another unique id whose end and images come before
    its start. The job ends by the
    ends (not the 60 s idle timeout), keeps every good frame, and names every rejection
    in the reports, rejections.json, its summary and ``stager stream watch``."""
    import cbor2

    from streams.codecs import bslz4_encode
    from streams.protocols.stream2.simulator import StreamV2Simulator
    from streams.protocols.stream2.streamv2 import (SELF_DESCRIBE, encode_end, encode_image,
                                                    encode_start)

    shape, n_a, n_b = (32, 32), 16, 8
    rng = np.random.default_rng(5)
    mask = (rng.random(shape) < 0.05).astype("<u4")
    flat = rng.random(shape).astype("<f4")
    table = np.arange(1000, dtype="<u4") * 3
    frame = lambda i: (np.arange(32 * 32).reshape(shape) % 7 + i).astype("<u2")  # noqa: E731

    def img(sid, uid, i):
        return encode_image(sid, uid, i, {"threshold_1": frame(i)})

    with StreamV2Simulator(send_timeout=30, sndhwm=1000) as sim:
        job = Job(tmp_path, "--stream2", sim.endpoint, "--scans", "2", "--receivers-per-node",
                  "2", "--v2-pixel-mask", "--v2-grace", "1", "--idle-timeout", "60",
                  "--partition-frames", "4")
        job.started()
        w = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch", str(job.rv),
                              "--final", "--timeout", "90"], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)     # every client connected: the detector deals round-robin
        # a series that never starts: its start's flatfield does not decode
        m = dict(cbor2.loads(encode_start(9, "NEVER", 3, shape, header_detail="all")))
        m["flatfield"] = {"threshold_1": cbor2.CBORTag(40, [[32, 32], cbor2.CBORTag(85,
                                                                                  bytes(13))])}
        sim.send(cbor2.dumps(cbor2.CBORTag(SELF_DESCRIBE, m)))
        for i in range(3):
            sim.send(img(9, "NEVER", i))
        sim.send(encode_end(9, "NEVER"))
        # series 1 "A": everything a detector with header_detail all sends, and hostile copies
        sim.send(encode_start(1, "A", n_a, shape, header_detail="all",
                              pixel_mask={"threshold_1": mask}, flatfield={"threshold_1": flat},
                              countrate_table=table, array_compression="bslz4",
                              user_data={"scan_shape": [4, 4]}))
        for i in range(n_a):
            good = img(1, "A", i)
            if i == 3:
                sim.send(good[: len(good) // 2])                       # truncated
                p = bslz4_encode(frame(3))
                k = good.rindex(p)
                sim.send(good[:k] + p[:-8] + bytes(8) + good[k + len(p):])   # corrupt copy
            sim.send(good)
            if i == 5:
                sim.send(good)                                          # twice
            if i == 7:
                sim.send(b"\xd9\xd9\xf7\xff\xff")                       # garbage
                sim.send(b"\xd9\xd9\xf7\xa1\x64type\x65frame")           # unknown type
                sim.send(b"\xd9\xd9\xf7\x82\x01\x02")                    # not a map
                sim.send_parts([img(1, "A", 0), b"second part"])        # multi-part
                sim.send(cbor2.dumps(cbor2.CBORTag(SELF_DESCRIBE, {     # typed-array tag 76
                    "type": "image", "series_id": 1, "series_unique_id": "A", "image_id": 1,
                    "data": {"threshold_1": cbor2.CBORTag(40, [[32, 32], cbor2.CBORTag(
                        76, bytes(2048))])}})))
        sim.send(encode_end(1, "A"))
        # series 1 "B" (numbering restarted): images and end before the start
        for i in range(n_b):
            sim.send(img(1, "B", i))
        sim.send(encode_end(1, "B"))
        time.sleep(0.5)
        sim.send(encode_start(1, "B", n_b, shape, header_detail="none",
                              user_data={"scan_shape": [2, 4]}))
        rc, out, err = job.wait(timeout=150)
    wout, werr = w.communicate(timeout=90)
    assert rc == 0, out + err
    a, b = job.report("series-1-A"), job.report("series-1-B")
    assert a["ok"] and a["frames_complete"] == n_a and a["ended_by"] == "end", a
    assert b["ok"] and b["frames_complete"] == n_b and b["ended_by"] == "end", b
    assert a["receivers"] == 4
    rej = a["messages"]["rejected"]
    assert rej.get("duplicate", 0) >= 1 and rej.get("corrupt_payload", 0) == 1, a
    ex = " | ".join(a["rejection_examples"])
    assert "series series-1-A image 3: " in ex, ex
    # image 5 twice: at one client ("arrived twice") or at two (counted at the merge)
    assert "series-1-A image 5 arrived twice" in ex or "frame(s) 5 accepted by two" in ex, ex
    import h5py

    with h5py.File(job.out / "series-1-A.h5", "r") as f:
        d = f["detector"]
        assert np.array_equal(d["pixel_mask"][()], mask)
        assert np.array_equal(d["flatfield"][()], flat)
        assert np.array_equal(d["countrate_correction_lookup_table"][()], table)
        assert d.attrs["pixel_mask_applied_by_receiver"]
        sums = f["sum_image"][()].reshape(-1)
    want = [np.where(mask != 0, 0, frame(i)).sum() for i in range(n_a)]
    assert np.array_equal(sums, want)       # every frame, masked, image 3 included
    with h5py.File(job.out / "series-1-B.h5", "r") as f:
        assert "pixel_mask" not in f["detector"]        # header_detail none: no arrays
    job_rej = json.loads((job.out / "rejections.json").read_text())
    by = job_rej["by_reason"]
    assert by["malformed_header"] == 7 and by["unknown_scan"] == 4 and \
        by["corrupt_payload"] == 1 and by["duplicate"] >= 1, job_rej
    assert job_rej["series_never_started"] == {"series-9-NEVER": {"images": 3, "ends": 1}}
    text = " | ".join(job_rej["examples"])
    assert "field flatfield.threshold_1" in text and "2 parts" in text, text
    assert "job: " in out and "series-9-NEVER (3 images, 1 ends)" in out, out
    assert "malformed_header" in wout and "job: " in wout, wout


def test_a_scan_whose_end_never_arrives_ends_after_the_idle_timeout(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--idle-timeout", "2")
    rv = job.rendezvous()
    run_producers(_scan(no_end=frozenset({1}), withhold=frozenset({9})), rv)
    rc, out, err = job.wait()
    assert rc == 1, out + err
    rep = job.report("s1")
    assert rep["ended_by"] == "timeout" and rep["missing"] == [[9, 10]]
    assert rep["messages"]["ends"] == [6, 8] and rep["messages"]["lost_in_transport"] is None


def test_several_scans_in_a_row_and_watch(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--scans", "2")
    rv = job.rendezvous()
    png = tmp_path / "watch.png"
    werr_file = tmp_path / "watch.err"
    with open(werr_file, "w") as werr_fd:
        w = subprocess.Popen([sys.executable, "-m", "stager", "stream", "watch", str(job.rv),
                              "--png", str(png), "--final", "--timeout", "60"],
                             env=_env(), stdout=subprocess.PIPE, stderr=werr_fd, text=True)
    # a1 lasts 0.3 s: start it only once the watcher is subscribed (its start-up is
    # seconds on a loaded machine, and it prints "watching" once connected)
    from tests.stagerun import wait_for
    wait_for(lambda: "watching" in werr_file.read_text() or w.poll() is not None, 60,
             "the watcher to connect")
    time.sleep(0.5)   # the subscription reaches the publisher
    run_producers(_scan("a1", rate=200.0), rv)
    run_producers(_scan("a2"), rv)
    rc, out, err = job.wait()
    assert rc == 0, out + err
    assert job.report("a1")["ok"] and job.report("a2")["ok"]
    wout, _ = w.communicate(timeout=60)
    werr = werr_file.read_text()
    assert w.returncode == 0, wout + werr
    assert "a1: 64/64 complete" in wout and "frames/s" in wout and "GB/s" in wout
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_spilled_partitions_verify_clean_and_rerun_offline(tmp_path):
    from streams.simulate import run_producers

    spill = tmp_path / "spill" / "%n"
    job = Job(tmp_path, "--spill", str(spill), "--analysis", "stem4d.flow",
              "--partition-frames", "4")
    rv = job.rendezvous()
    run_producers(_scan(drop=frozenset({(3, 1)})), rv)
    rc, out, err = job.wait()
    assert rc == 1, out + err          # one incomplete frame
    spec = job.out / "spill.hook"
    assert spec.exists()
    files = sorted((tmp_path / "spill").rglob("part-*.h5"))
    assert len(files) == 16            # 32 frames per receiver in partitions of 4
    r = subprocess.run([sys.executable, "-m", "workflows", "run", str(ROOT / "stem4d/flow.py"),
                        "--executor", "inline", "--out", str(tmp_path / "rerun"), "--",
                        "--spilled", str(spill), "--scan", "s1"],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    live, rerun = _datasets(job.out / "s1.h5"), _datasets(tmp_path / "rerun" / "s1.h5")
    for name in ("sum_image", "electron_counts", "frames_complete", "virtual/bright_field"):
        assert np.array_equal(live[name], rerun[name]), name

    def stager(*args):
        return subprocess.run(["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m",
                               "stager", *args, "--emulate-nodes", "2"], env=_env(),
                              capture_output=True, text=True, timeout=120)

    v = stager("verify", str(spec))
    assert v.returncode == 0 and "verified 16 staged copies" in v.stdout, v.stdout + v.stderr
    files[0].write_bytes(files[0].read_bytes()[:-1] + b"\x01")
    assert stager("verify", str(spec)).returncode == 1
    c = stager("clean", str(spec))
    assert c.returncode == 0, c.stderr
    # clean removes exactly the recorded copies; the one modified since is no longer
    # the recorded copy, and is kept
    assert sorted((tmp_path / "spill").rglob("part-*.h5")) == [files[0]], c.stdout + c.stderr
    assert "removed 15 staged file(s)" in c.stdout, c.stdout


def _rank_pid(marker: str, rank: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if f"STREAM_TEST_MARKER={marker}".encode() in env and \
                    f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(d)
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} not found")


def test_a_receiver_killed_mid_scan_ends_the_job_and_the_report_names_the_loss(tmp_path):
    from streams.simulate import run_producers

    job = Job(tmp_path, "--idle-timeout", "30", "--timeout", "90", marker=f"kill-{tmp_path}")
    rv = job.rendezvous()
    threads, results, errors = run_producers(_scan(scan_shape=(16, 16), rate=100.0),
                                             rv, wait=False, send_timeout=5.0)
    time.sleep(1.0)
    pid = _rank_pid(f"kill-{tmp_path}", 2, time.monotonic() + 10)   # node1's receiver
    os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    rc, out, err = job.wait(timeout=60)
    assert rc != 0
    assert time.monotonic() - t < 30          # ended, not hung
    rep = job.report("s1")
    assert rep["terminated"] and not rep["ok"]
    lost = [d for d in rep["lost_ranks"] if d["rank"] == 2]
    assert lost and lost[0]["role"] == "receiver" and lost[0]["receiver"] == 1
    assert rep["frames_lost_with_ranks"] > 0
    assert rep["frames_complete"] < 256
    for th in threads:
        th.join(timeout=30)


def test_an_analysis_that_cannot_be_loaded_is_one_clear_line(tmp_path):
    """Bad input before any scan: every rank stops with one message naming the analysis
    (the clean-up after it once hid the message behind an UnboundLocalError)."""
    cmd = ["mpirun", "-n", "2", sys.executable, "-m", "stager", "stream", "receive",
           "--rendezvous", str(tmp_path / "rv.json"), "--out", str(tmp_path / "out"),
           "--analysis", "no_such_package.flow", "--emulate-nodes", "1"]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert ("stager stream receive: cannot load analysis 'no_such_package.flow'"
            in r.stderr), r.stderr
    assert "Traceback" not in r.stderr and "UnboundLocalError" not in r.stderr, r.stderr
    assert not (tmp_path / "rv.json").exists()
