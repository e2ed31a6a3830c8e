"""LiberTEM UDFs on a live stream, across the nodes of one MPI job (``mpirun -n 4``).

One receiving job per node count (1, 2 and 4 emulated nodes) serves two scans
from the detector simulator (2 producers x 2 sectors over loopback, 8x8 frames
of 32x32): one whole, one with frames withheld. The analysis is six UDFs in
one pass -- LiberTEM's SumUDF, SumSigUDF, StdDevUDF, ApplyMasksUDF and the
tests' PosUDF (process_frame) and PartUDF (process_partition) -- and
``OUT/<scan>.h5`` must equal LiberTEM's own inline run on the same frames
(``roi`` = the frames that arrived), the valid mask must name the withheld
positions, and the live snapshot must carry the merged buffers.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytest.importorskip("libertem")

from tests import udf_cases as uc
from tests.mpiutil import assert_all, emulated, shared_tmpdir

WITHHELD = (0, 3, 10, 11, 40, 63)


def _serve(comm, tmp, nodes, specs, data):
    import stager
    from streams.protocol import ScanGeometry
    from streams.job.session import SessionOptions, receive_scans
    from streams.simulate import SimulatedScan, array_source, run_producers

    out = os.path.join(tmp, f"out{nodes}")
    opts = SessionOptions(rendezvous=os.path.join(tmp, f"rv{nodes}.json"), out=out,
                          local=os.path.join(tmp, f"local{nodes}", "%n"), scans=2,
                          bind_host="127.0.0.1", partition_frames=8, live_interval=0.5,
                          idle_timeout=20.0, close_wait=20.0, timeout=90.0,
                          analysis="udf:" + ",".join(s for s, _ in specs),
                          analysis_options=[p for _, p in specs])
    F = uc.SCAN[0] * uc.SCAN[1]
    errors = []

    def produce(endpoints):
        try:
            for name, withhold in (("whole", ()), ("withheld", WITHHELD)):
                g = ScanGeometry(name, 2, F, 2, uc.FRAME, "<u2", uc.SCAN)
                run_producers(SimulatedScan(g, source=array_source(data),
                                            withhold=frozenset(withhold)), endpoints)
        except Exception as e:   # reported by the test
            errors.append(e)

    threads = []

    def ready(info):
        from streams.protocols.native.rendezvous import read_rendezvous

        # the rendezvous carries the job's CURVE server key and client certificate
        rv = read_rendezvous(opts.rendezvous)
        assert list(rv.receivers) == list(info["receivers"])
        t = threading.Thread(target=produce, args=(rv,), daemon=True)
        t.start()
        threads.append(t)

    def drain(c, scan, local_template, written):
        stager.drain(local_template, out, emulated(c, nodes), merge=True, written=written)

    outcomes = receive_scans(emulated(comm, nodes), opts, on_ready=ready, on_written=drain)
    for t in threads:
        t.join(30)
    return out, outcomes, errors


@pytest.mark.mpi
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_udfs_live_equal_libertem_inline(nodes):
    from mpi4py import MPI

    import h5py

    comm = MPI.COMM_WORLD
    if comm.size % nodes:
        pytest.skip(f"{comm.size} ranks do not split into {nodes} nodes")
    tmp = shared_tmpdir(comm)
    if comm.rank == 0:
        np.save(os.path.join(tmp, "masks.npy"), uc.masks())
    comm.Barrier()
    specs = [(s, {k: (os.path.join(tmp, "masks.npy") if v == "MASKS" else v)
                  for k, v in p.items()}) for s, p in uc.SPECS]
    data = uc.frames()
    out, outcomes, errors = _serve(comm, tmp, nodes, specs, data)
    bad = [f"producer: {e!r}" for e in errors]
    if comm.rank == 0:
        F = uc.SCAN[0] * uc.SCAN[1]
        for name, withheld in (("whole", ()), ("withheld", WITHHELD)):
            valid = np.ones(F, bool)
            valid[list(withheld)] = False
            ref = uc.reference(specs, data, valid)
            with h5py.File(os.path.join(out, f"{name}.h5"), "r") as f:
                if not (f["udf/valid"][()].reshape(-1) == valid).all():
                    bad.append(f"{name}: valid mask {f['udf/valid'][()]}")
                for (spec, _), r in zip(specs, ref):
                    label = spec.rpartition(":")[2]
                    got = {k: f[f"udf/{label}/{k}"][()] for k in r if f"udf/{label}/{k}" in f}
                    bad += uc.compare(r, got, f"{name} {nodes} nodes {label}")
            with h5py.File(os.path.join(out, f"{name}.live.h5"), "r") as f:
                if "SumSigUDF_intensity" not in f or "SumUDF_intensity" not in f:
                    bad.append(f"{name}: live snapshot holds {sorted(f)}")
                elif not np.allclose(f["SumSigUDF_intensity"][()], np.asarray(
                        ref[1]["intensity"]), equal_nan=True):
                    bad.append(f"{name}: final live image differs from LiberTEM")
        if sorted(o.scan for o in outcomes) != ["whole", "withheld"]:
            bad.append(f"outcomes {[o.scan for o in outcomes]}")
    assert_all(comm, not bad, "; ".join(bad))
