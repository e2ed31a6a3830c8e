"""A leader hook for tests/e2e/test_hedm_ff_scatter.py: after staging, frame 3's copy vanishes."""
import os


def remove_frame_3(ctx):
    path = os.path.join(os.environ["HEDM_STAGE"], ctx.node, "ff", "ff_000003.tif")
    if os.path.exists(path):
        os.unlink(path)
