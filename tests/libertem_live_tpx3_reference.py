"""LiberTEM-live's own result on an ASI TPX3 stream file: its simulator (``TpxCameraSim``)
replays the file, its connection receives the first acquisition, its ``run_udf`` computes.

``python tests/libertem_live_tpx3_reference.py STREAM MASKS.npy OUT.npz`` writes ``sum``
(SumUDF), ``sumsig`` (SumSigUDF), ``masks`` (ApplyMasksUDF) and ``nav_shape`` to OUT.npz.
"""
import sys

import numpy as np


def main(stream: str, masks_path: str, out: str) -> None:
    from libertem.executor.pipelined import PipelinedExecutor
    from libertem.udf.masks import ApplyMasksUDF
    from libertem.udf.sum import SumUDF
    from libertem.udf.sumsigudf import SumSigUDF
    from libertem_live.api import LiveContext
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    masks = np.load(masks_path)
    sim = TpxCameraSim(cached="mem", port=0, sleep=0.5, paths=[stream])
    sim.start()
    sim.wait_for_listen()
    try:
        ex = PipelinedExecutor(spec=PipelinedExecutor.make_spec(cpus=range(1), cudas=[]))
        with LiveContext(executor=ex) as ctx:
            with ctx.make_connection("asi_tpx3").open(data_host="127.0.0.1",
                                                      data_port=sim.server_t.port) as conn:
                pending = conn.wait_for_acquisition(30.0)
                assert pending is not None, "no acquisition from TpxCameraSim in 30 s"
                aq = ctx.make_acquisition(conn=conn, pending_aq=pending)
                r = ctx.run_udf(dataset=aq, udf=[
                    SumUDF(), SumSigUDF(),
                    ApplyMasksUDF(mask_factories=[lambda m=m: m for m in masks])])
    finally:
        sim.stop()
    np.savez(out, sum=r[0]["intensity"].data, sumsig=r[1]["intensity"].data,
             masks=r[2]["intensity"].data, nav_shape=np.array(pending.nav_shape))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
