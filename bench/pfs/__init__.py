"""A simulated shared parallel filesystem: a throttled, counting FUSE passthrough.

Public API::

    from bench.pfs import PFSConfig, SimulatedPFS
    with SimulatedPFS("/data", "/mnt/pfs", PFSConfig(bandwidth=400e6, latency=0.002)) as pfs:
        ...                       # read /mnt/pfs from any process
    pfs.counters                  # per-file bytes read, opens, stats; totals; bucket/MDS stats

CLI: ``python -m bench.pfs serve|mount|umount|status ...`` (see ``--help``).
"""
from .mount import (
    PFSConfig,
    PFSError,
    SimulatedPFS,
    force_unmount,
    fuse_mounts_under,
    is_mounted,
    serve,
)
from .throttle import MetadataServer, TokenBucket

__all__ = [
    "MetadataServer",
    "PFSConfig",
    "PFSError",
    "SimulatedPFS",
    "TokenBucket",
    "force_unmount",
    "fuse_mounts_under",
    "is_mounted",
    "serve",
]
