"""Platforms of the twin: TOML files, every number with its source in a comment.

``stager/simulate/platforms/NAME.toml`` are the shipped ones (``here``: this machine as
measured; ``bgq``: a Blue Gene/Q like ALCF's Mira; ``dragonfly``: a Perlmutter-like
cluster with node-local NVMe); any other ``.toml`` path with the same keys is a platform
too. Loading is strict: a missing or unknown key, or a value that is not a positive
number, is a :class:`PlatformError` naming the file and the key.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Tuple

from stager.errors import PlanError

__all__ = ["Platform", "PlatformError", "load_platform", "PLATFORMS", "platform_names"]

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "platforms")


class PlatformError(PlanError):
    """A platform file that cannot be used (bad input: the command exits 2)."""


@dataclass(frozen=True)
class Nodes:
    shared_host: bool          #: every node on one host (the figures are the host's totals)
    cores: int
    hash_bw: float             #: XXH3 bytes/s of one core
    copy_bw: float
    local_write_bw: float      #: node-local storage write, bytes/s
    local_meta: float          #: seconds per node-local metadata operation
    local_fsync: float         #: seconds per fsync
    link_bw: float             #: bytes/s per network link and direction
    latency: float             #: MPI point-to-point latency, s
    message_cpu: float         #: CPU seconds per MPI message sent or received
    startup: float = 0.0       #: fixed cost of starting a stage (processes, imports), s
    links: int = 1             #: links a node injects on
    #: shared_host only: runnable processes of other jobs on the host (its load average),
    #: each taking its fair share of the cores
    background: float = 0.0


@dataclass(frozen=True)
class Network:
    topology: str              #: shared-memory | torus5d | dragonfly | star
    taper: float = 1.0         #: global / injection bandwidth (dragonfly, star)
    shapes: Optional[Dict[str, List[int]]] = None   #: torus5d: partition shapes


@dataclass(frozen=True)
class Forwarding:
    nodes_per_ion: int
    ion_link_bw: float
    ion_storage_bw: float
    ion_cache: bool = False    #: the I/O node reads a block its nodes read at once once


@dataclass(frozen=True)
class Pfs:
    servers: int
    server_bw: float           #: bytes/s one server sends
    cold_bw: float             #: bytes/s one server reads from its disks (data not cached)
    warm: bool                 #: every source is in the servers' cache already
    stripe: int                #: bytes per stripe unit (round-robin over servers)
    meta_ops: float            #: metadata operations/s of the whole file system
    meta_latency: float        #: seconds of one metadata round trip
    client_bw: float           #: bytes/s one node reads from the PFS at most


@dataclass(frozen=True)
class MpiIo:
    dedup: bool                #: identical collective reads read once (ROMIO two-phase)
    aggregators_per_node: float
    align: int = 0             #: file domains in whole multiples of this many bytes (0: even)


@dataclass(frozen=True)
class Platform:
    """A simulated machine (see the module docstring)."""

    name: str
    description: str
    path: str
    nodes: Nodes
    network: Network
    pfs: Pfs
    mpiio: MpiIo
    io_forwarding: Optional[Forwarding] = None

    def injection_bw(self) -> float:
        """Bytes/s one node sends (and receives) at most."""
        return self.nodes.link_bw * self.nodes.links

    def fabric_bw(self, n: int) -> float:
        """Bytes/s the network carries between nodes of an ``n``-node job, for uniform
        all-to-all traffic: a 5-D torus, 4 x its bisection (half the bytes cross it, half
        of those each way); a dragonfly or star, ``taper`` x the nodes' injection; one
        host, its memory bus (``copy_bw``)."""
        net = self.network
        if net.topology == "shared-memory":
            return self.nodes.copy_bw
        if net.topology == "torus5d":
            shape = torus_shape(n, net.shapes or {})
            return 4 * 2 * (n // max(shape)) * self.nodes.link_bw
        return net.taper * n * self.injection_bw()

    def group_nodes(self) -> Optional[int]:
        """Nodes one simulated group naturally stands for (those of one I/O node)."""
        return self.io_forwarding.nodes_per_ion if self.io_forwarding else None


def torus_shape(n: int, shapes: Dict[str, List[int]]) -> Tuple[int, ...]:
    """The 5-D partition shape of ``n`` nodes: the platform's table, else the smallest
    dimension doubled from ``(1, 1, 1, 1, 2)`` until the product reaches ``n``."""
    if str(n) in shapes:
        return tuple(shapes[str(n)])
    dims = [1, 1, 1, 1, 2]
    while math.prod(dims) < n:
        i = min(range(4), key=lambda d: dims[d])
        dims[i] *= 2
    return tuple(dims)


def platform_names() -> List[str]:
    """The shipped platforms' names."""
    return sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".toml"))


PLATFORMS = platform_names()


def _section(cls: Any, data: Dict[str, Any], where: str) -> Any:
    names = {f.name: f for f in fields(cls)}
    extra = set(data) - set(names)
    if extra:
        raise PlatformError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; known: "
                            f"{', '.join(names)}")
    out = {}
    for name, f in names.items():
        if name not in data:
            if f.default is f.default_factory:  # type: ignore[misc]  # no default
                raise PlatformError(f"{where}: missing key '{name}'")
            continue
        v = data[name]
        want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if want in ("float", "int"):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0 or (want == "int" and v != int(v)):
                raise PlatformError(f"{where}.{name}: {v!r} is not a non-negative "
                                    f"{'integer' if want == 'int' else 'number'}")
            v = int(v) if want == "int" else float(v)
        elif want == "bool" and not isinstance(v, bool):
            raise PlatformError(f"{where}.{name}: {v!r} is not true or false")
        out[name] = v
    return cls(**out)


def load_platform(name_or_path: str) -> Platform:
    """A shipped platform by name, or a platform file by path.

    Raises
    ------
    PlatformError
        Not a shipped name nor a readable file; a file that is not TOML or lacks keys.
    """
    path = name_or_path
    if os.sep not in path and not path.endswith(".toml"):
        if path not in PLATFORMS:
            raise PlatformError(f"no platform '{path}': use one of {', '.join(PLATFORMS)} "
                                "or the path of a platform file (.toml)")
        path = os.path.join(HERE, path + ".toml")
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise PlatformError(f"cannot read platform file {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise PlatformError(f"{path}: not TOML: {e}") from e
    top = {"name", "description", "nodes", "network", "pfs", "mpiio", "io_forwarding"}
    extra = set(doc) - top
    if extra:
        raise PlatformError(f"{path}: unknown section(s) {', '.join(sorted(extra))}")
    for key in ("nodes", "network", "pfs", "mpiio"):
        if not isinstance(doc.get(key), dict):
            raise PlatformError(f"{path}: missing section [{key}]")
    net = _section(Network, doc["network"], f"{path}: [network]")
    if net.topology not in ("shared-memory", "torus5d", "dragonfly", "star"):
        raise PlatformError(f"{path}: [network] topology {net.topology!r}: use "
                            "shared-memory, torus5d, dragonfly or star")
    fwd = doc.get("io_forwarding")
    p = Platform(name=str(doc.get("name", os.path.basename(path)[:-5])),
                 description=str(doc.get("description", "")), path=path,
                 nodes=_section(Nodes, doc["nodes"], f"{path}: [nodes]"), network=net,
                 pfs=_section(Pfs, doc["pfs"], f"{path}: [pfs]"),
                 mpiio=_section(MpiIo, doc["mpiio"], f"{path}: [mpiio]"),
                 io_forwarding=None if fwd is None else
                 _section(Forwarding, fwd, f"{path}: [io_forwarding]"))
    if p.pfs.servers < 1 or p.pfs.stripe < 1 or p.nodes.cores < 1:
        raise PlatformError(f"{path}: [pfs] servers and stripe, [nodes] cores must be 1 or more")
    return p
