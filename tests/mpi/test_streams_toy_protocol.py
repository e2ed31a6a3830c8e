"""The toy ``lines`` protocol (tests/toyprotocol.py) through the real receiving job:
a protocol registered by one row runs through the one MPI job (``receive_scans``)
and its scan is written like any other. One emulated node, so one receiver; every
other rank is a worker: works at any rank count."""
from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest

import tests.toyprotocol as toy  # registers the protocol: its one row
from tests.mpiutil import assert_all, emulated, shared_tmpdir

pytestmark = pytest.mark.mpi


def test_a_scan_over_a_plugged_in_protocol_is_received_and_written():
    from mpi4py import MPI

    import h5py

    from streams.job.session import SessionOptions, receive_scans

    comm = MPI.COMM_WORLD
    tmp = shared_tmpdir(comm, "mpistage-toyproto-")
    scan_shape, shape = (4, 6), (16, 8)
    frames = (np.arange(24 * 16 * 8) % 1009).astype("<u2").reshape(24, *shape)
    opts = SessionOptions(rendezvous=os.path.join(tmp, "rv.json"), out=os.path.join(tmp, "out"),
                          local=os.path.join(tmp, "local", "%n"), bind_host="127.0.0.1",
                          protocol="lines", insecure=True, partition_frames=5,
                          idle_timeout=20.0, close_wait=20.0, timeout=60.0)
    sent, errors, threads = [], [], []

    def produce(endpoint):
        try:
            sent.append(toy.send_scan(endpoint, "toy1", frames, scan_shape))
        except Exception as e:   # reported by the test
            errors.append(e)

    seen = []

    def ready(info):
        import json

        with open(opts.rendezvous) as f:     # removed when the job ends
            seen.append(json.load(f)["protocol"])
        assert len(info["receivers"]) == 1
        t = threading.Thread(target=produce, args=(info["receivers"][0],), daemon=True)
        t.start()
        threads.append(t)

    def drain(c, scan, local_template, written):
        import stager

        stager.drain(local_template, opts.out, emulated(c, 1), merge=True, written=written)

    outcomes = receive_scans(emulated(comm, 1), opts, on_ready=ready, on_written=drain)
    for t in threads:
        t.join(30)
    bad = [f"producer: {e!r}" for e in errors]
    if comm.rank == 0:
        if seen != ["lines"]:
            bad.append(f"the rendezvous file is not the protocol's: {seen}")
        if os.path.exists(opts.rendezvous):
            bad.append("the rendezvous file outlived the job")
        if sent != [24] or [o.scan for o in outcomes] != ["toy1"] or not outcomes[0].ok:
            bad.append(f"sent {sent}, outcomes {outcomes}")
        else:
            with h5py.File(os.path.join(opts.out, "toy1.h5"), "r") as f:
                got = f["sum_image"][()]
                done = f["frames_complete"][()]
            want = frames.reshape(24, -1).astype(np.int64).sum(axis=1).reshape(scan_shape)
            if not done.all() or not np.array_equal(got, want):
                bad.append(f"sum_image {got} != {want}")
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    assert_all(comm, not bad, "; ".join(bad))
