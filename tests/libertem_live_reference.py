"""LiberTEM-live's own result on a legacy-stream dump: its simulator replays the dump,
its connection arms the simulator and receives, its ``run_udf`` computes.

``python tests/libertem_live_reference.py DUMP NY NX MASKS.npy OUT.npz`` writes
``sum`` (SumUDF), ``sumsig`` (SumSigUDF) and ``masks`` (ApplyMasksUDF) to OUT.npz.
"""
import sys

import numpy as np


def main(dump: str, ny: int, nx: int, masks_path: str, out: str) -> None:
    from libertem.executor.pipelined import PipelinedExecutor
    from libertem.udf.masks import ApplyMasksUDF
    from libertem.udf.sum import SumUDF
    from libertem.udf.sumsigudf import SumSigUDF
    from libertem_live.api import LiveContext
    from libertem_live.detectors.dectris.sim import DectrisSim

    masks = np.load(masks_path)
    sim = DectrisSim(path=dump, port=0, zmqport=0, verbose=False)
    sim.start()
    sim.wait_for_listen()
    try:
        ex = PipelinedExecutor(spec=PipelinedExecutor.make_spec(cpus=range(1), cudas=[]))
        with LiveContext(executor=ex) as ctx:
            with ctx.make_connection("dectris").open(
                    api_host="127.0.0.1", api_port=sim.port, data_host="127.0.0.1",
                    data_port=sim.zmqport) as conn:
                aq = ctx.make_acquisition(conn=conn, nav_shape=(ny, nx))
                r = ctx.run_udf(dataset=aq, udf=[
                    SumUDF(), SumSigUDF(),
                    ApplyMasksUDF(mask_factories=[lambda m=m: m for m in masks])])
    finally:
        sim.stop()
    np.savez(out, sum=r[0]["intensity"].data, sumsig=r[1]["intensity"].data,
             masks=r[2]["intensity"].data)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
