"""Node identity and the leader communicator (one rank per node).

A *node* is a set of ranks that share node-local storage; its *leader* is its
lowest rank in ``comm`` (as in Swift/T's leader communicator). Leaders do all
the staging I/O; the other ranks only take part in agreement.

Three ways to decide which ranks form a node:

* default: ``comm.Split_type(MPI.COMM_TYPE_SHARED)``, named by host name;
* ``emulate_nodes=K``: contiguous blocks of ranks become ``node0`` ...
  ``node{K-1}`` (block ``i`` holds ranks ``[i*size//K, (i+1)*size//K)``), for
  one-machine tests and benchmarks;
* ``node_id_env=VAR``: ranks with the same value of environment variable
  ``VAR`` form a node named by that value (e.g. ``SLURMD_NODENAME`` in the
  local four-node Slurm cluster, where every rank has the same host name).

:func:`name_nodes` is the ONE function that turns those inputs into node
names: :func:`node_layout` (MPI) and the workflow runtime (which tells each
task the name of the node it runs on) both use it, so ``%n`` means the same
directory everywhere. Nodes are numbered by their leader's rank. Code does
not call :func:`node_layout` itself: it is made once per job by
:meth:`core.job.Job.from_comm` (``node_id="emulate:2"`` is
``emulate_nodes=2``), and the job is passed down::

    job = Job.from_comm(comm, node_id="emulate:2")
    if job.is_leader:
        job.leader_comm.Barrier()   # one rank per node
    job.free()

The naming and assignment rules are pure functions (:func:`name_nodes`,
:func:`emulated_ids`, :func:`assign_nodes`) tested without MPI.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from core.errors import JobError
from core.options import ENV_PREFIX, Option, parse_int, resolve

__all__ = ["NodeLayout", "node_layout", "name_nodes", "local_node_name", "emulated_ids",
           "assign_nodes", "check_node_name", "check_node_options", "NODE_ID", "parse_node_id",
           "node_id_of", "split_node_id", "resolve_node_id"]


@dataclass(frozen=True)
class NodeLayout:
    """Where this rank sits: its node and, on leaders, the leader communicator.

    Attributes
    ----------
    name : str
        Node name (substituted for ``%n`` in destinations).
    index : int
        Node number, ``0 <= index < n_nodes``, ordered by leader rank.
    n_nodes : int
        Number of nodes in ``comm``.
    names : tuple of str
        Every node's name, by index (the same on every rank).
    node_comm : mpi4py.MPI.Comm
        The ranks of this node (leader is rank 0 in it).
    leader_comm : mpi4py.MPI.Comm or None
        One rank per node, rank ``i`` being node ``i``'s leader; ``None`` on
        non-leaders.
    is_leader : bool
        This rank is its node's leader.
    leader_ranks : tuple of int
        Rank in ``comm`` of each node's leader, by node index.
    node_of : tuple of int
        Node index of every rank of ``comm``, by rank.
    """

    name: str
    index: int
    n_nodes: int
    names: Tuple[str, ...]
    node_comm: Any
    leader_comm: Optional[Any]
    is_leader: bool
    leader_ranks: Tuple[int, ...]
    node_of: Tuple[int, ...] = ()

    def free(self) -> None:
        """Free the communicators this layout created (call once, on every rank)."""
        self.node_comm.Free()
        if self.leader_comm is not None:
            self.leader_comm.Free()


def emulated_ids(size: int, k: int) -> List[str]:
    """Node name of each of ``size`` ranks split into ``k`` contiguous blocks.

    >>> emulated_ids(4, 2)
    ['node0', 'node0', 'node1', 'node1']
    """
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= size:
        raise ValueError(f"emulate_nodes must be an integer in 1..{size} (the number of ranks), "
                         f"got {k!r}")
    # rank r is in block i iff i*size//k <= r < (i+1)*size//k: the largest i whose
    # start i*size//k <= r, i.e. i*size < (r+1)*k
    return [f"node{((r + 1) * k - 1) // size}" for r in range(size)]


def assign_nodes(ids: Sequence[str]) -> Tuple[List[int], List[str], List[int]]:
    """Group ranks by node id.

    Parameters
    ----------
    ids : sequence of str
        Node id of each rank, by rank.

    Returns
    -------
    index_of_rank : list of int
        Node index of each rank (nodes numbered by their lowest rank).
    names : list of str
        Node name of each index.
    leader_ranks : list of int
        Lowest rank of each node.
    """
    first: dict = {}
    for r, i in enumerate(ids):
        first.setdefault(i, r)
    names = sorted(first, key=first.__getitem__)
    index = {n: k for k, n in enumerate(names)}
    return [index[i] for i in ids], names, [first[n] for n in names]


def check_node_name(name: str) -> str:
    """A node name must be usable as one path component (it replaces ``%n``)."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise JobError(
            f"node name {name!r} cannot be used as a directory name (it replaces %n); "
            "use a node id variable whose values are plain names")
    return name


def check_node_options(size: int, emulate_nodes: Optional[int],
                       node_id_env: Optional[str]) -> None:
    """Reject node options that ``size`` ranks cannot use. Pure; raises ``ValueError``.

    Called before any collective, with values every rank shares (broadcast
    from rank 0), so all ranks fail alike.
    """
    if emulate_nodes is not None and node_id_env is not None:
        raise ValueError("use either emulate_nodes or node_id_env, not both")
    if emulate_nodes is not None:
        emulated_ids(size, emulate_nodes)  # raises with the allowed range
    if node_id_env is not None and (not node_id_env or "=" in node_id_env):
        raise ValueError(f"node_id_env must be an environment variable name, got {node_id_env!r}")


def name_nodes(size: int, *, emulate_nodes: Optional[int] = None,
               env_values: Optional[Sequence[Optional[str]]] = None,
               hosts: Optional[Sequence[Tuple[str, int]]] = None,
               env_name: str = "the node id variable") -> List[str]:
    """The node name of each of ``size`` ranks: the one naming rule of mpistage. Pure.

    Exactly one source of identity is used, in this order:

    * ``emulate_nodes=K``: ``node0`` .. ``node{K-1}``, contiguous blocks of ranks;
    * ``env_values``: each rank's value of the ``node_id_env`` variable;
    * ``hosts``: each rank's ``(host name, rank of its shared-memory leader)``;
      a host name that belongs to several shared-memory groups (odd set-ups)
      becomes ``host-LEADERRANK``, so names stay unique and readable.

    Raises
    ------
    ValueError
        ``emulate_nodes`` outside ``1..size``, or lengths that do not match ``size``.
    JobError
        A ``node_id_env`` value missing on some rank, or a name that cannot be a
        directory name (it replaces ``%n``); the same on every rank.
    """
    if emulate_nodes is not None:
        ids = emulated_ids(size, emulate_nodes)
    elif env_values is not None:
        if len(env_values) != size:
            raise ValueError(f"expected {size} node ids, got {len(env_values)}")
        unset = [r for r, v in enumerate(env_values) if not v]
        if unset:
            raise JobError(
                f"environment variable {env_name} is unset or empty on rank(s) "
                f"{', '.join(map(str, unset[:8]))}{' ...' if len(unset) > 8 else ''}; "
                "set it on every rank or drop --node-id-env")
        ids = [str(v) for v in env_values]
    elif hosts is not None:
        if len(hosts) != size:
            raise ValueError(f"expected {size} hosts, got {len(hosts)}")
        groups: dict = {}
        for h, _leader in dict.fromkeys(hosts):
            groups[h] = groups.get(h, 0) + 1
        ids = [h if groups[h] == 1 else f"{h}-{leader}" for h, leader in hosts]
    else:
        raise ValueError("name_nodes needs emulate_nodes, env_values or hosts")
    for name in dict.fromkeys(ids):
        check_node_name(name)
    return ids


def local_node_name(emulate_nodes: Optional[int] = None, node_id_env: Optional[str] = None,
                    env: Optional[Any] = None) -> str:
    """The node name of a process that runs alone (no MPI job): ``name_nodes`` for one rank."""
    env = os.environ if env is None else env
    check_node_options(1, emulate_nodes, node_id_env)
    if emulate_nodes is not None:
        return name_nodes(1, emulate_nodes=emulate_nodes)[0]
    if node_id_env is not None:
        return name_nodes(1, env_values=[env.get(node_id_env)], env_name=node_id_env)[0]
    return name_nodes(1, hosts=[(socket.gethostname(), 0)])[0]


def node_layout(comm: Any, emulate_nodes: Optional[int] = None,
                node_id_env: Optional[str] = None) -> NodeLayout:
    """Collective over `comm`: every rank must call. Decide nodes and leaders.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    emulate_nodes : int, optional
        Split ranks into this many contiguous blocks (``1 <= K <= comm.size``).
    node_id_env : str, optional
        Name of an environment variable whose value identifies the node.
        Mutually exclusive with ``emulate_nodes``.

    Returns
    -------
    NodeLayout

    Raises
    ------
    ValueError
        Bad arguments (raised before any collective, identically on all ranks).
    JobError
        ``node_id_env`` unset on some rank, or a node name unusable as a path
        component (raised on every rank).
    """
    from mpi4py import MPI

    check_node_options(comm.size, emulate_nodes, node_id_env)
    if emulate_nodes is not None:
        ids = name_nodes(comm.size, emulate_nodes=emulate_nodes)
    elif node_id_env is not None:
        ids = name_nodes(comm.size, env_values=comm.allgather(os.environ.get(node_id_env)),
                         env_name=node_id_env)
    else:
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        leader_rank = shared.bcast(comm.rank, root=0)
        shared.Free()
        ids = name_nodes(comm.size, hosts=comm.allgather((socket.gethostname(), leader_rank)))

    idx, names, leaders = assign_nodes(ids)
    my = idx[comm.rank]
    node_comm = comm.Split(my, key=comm.rank)
    is_leader = leaders[my] == comm.rank
    lc = comm.Split(0 if is_leader else MPI.UNDEFINED, key=comm.rank)
    leader_comm = None if lc == MPI.COMM_NULL else lc
    return NodeLayout(name=names[my], index=my, n_nodes=len(names), names=tuple(names),
                      node_comm=node_comm, leader_comm=leader_comm, is_leader=is_leader,
                      leader_ranks=tuple(leaders), node_of=tuple(idx))


# -- how ranks form nodes: one value ----------------------------------------------------------
def parse_node_id(value: Any, name: str = "node_id") -> str:
    """``host`` | ``env:VAR`` | ``emulate:N`` (canonical text); strict.

    * ``host``: ranks sharing memory form a node, named by host name;
    * ``env:VAR``: ranks with the same value of environment variable ``VAR``;
    * ``emulate:N``: ``N`` contiguous blocks of ranks, ``node0`` .. (one-machine tests).
    """
    text = str(value).strip()
    kind, _, arg = text.partition(":")
    if text == "host":
        return text
    if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
        return text
    if kind == "emulate":
        return f"emulate:{parse_int(1)(arg, name)}"
    raise ValueError(f"{name} must be 'host', 'env:VAR' or 'emulate:N', got {value!r}")


def node_id_of(node_id: Any = None, emulate_nodes: Any = None,
               node_id_env: Any = None) -> Optional[str]:
    """The one ``node_id`` value from it or the older keywords (None if none is given). Pure.

    ``emulate_nodes=K`` is ``emulate:K`` and ``node_id_env=VAR`` is ``env:VAR``.

    Raises
    ------
    ValueError
        More than one given, or a value that does not parse.
    """
    given = [(k, v) for k, v in (("node_id", node_id), ("emulate_nodes", emulate_nodes),
                                 ("node_id_env", node_id_env)) if v not in (None, "")]
    if len(given) > 1:
        raise ValueError(f"use either {' or '.join(k for k, _ in given)}, not both")
    if not given:
        return None
    key, value = given[0]
    if key == "emulate_nodes":
        return f"emulate:{parse_int(1)(value, 'emulate_nodes')}"
    if key == "node_id_env":
        return parse_node_id(f"env:{value}", "node_id_env")
    return parse_node_id(value)


def split_node_id(node_id: str) -> Tuple[Optional[int], Optional[str]]:
    """``(N, None)`` for ``emulate:N``, ``(None, VAR)`` for ``env:VAR``, else ``(None, None)``."""
    kind, _, arg = node_id.partition(":")
    return (int(arg) if kind == "emulate" else None), (arg if kind == "env" else None)


#: How ranks form nodes: keyword > ``$STAGER_NODE_ID`` > ``host``.
NODE_ID = Option("node_id", "host", parse_node_id, ENV_PREFIX + "NODE_ID")


def resolve_node_id(env: Optional[Mapping[str, str]] = None, node_id: Any = None,
                    emulate_nodes: Any = None, node_id_env: Any = None) -> str:
    """``node_id`` from keywords, ``$STAGER_NODE_ID`` (or the older ``$STAGER_EMULATE_NODES``,
    ``$STAGER_NODE_ID_ENV``), else ``host``. Local; collective callers run it on rank 0."""
    env = os.environ if env is None else env
    given = node_id_of(node_id, emulate_nodes, node_id_env)
    if given is None and not env.get(NODE_ID.env or ""):
        given = node_id_of(None, env.get(ENV_PREFIX + "EMULATE_NODES"),
                           env.get(ENV_PREFIX + "NODE_ID_ENV"))
    return str(resolve([NODE_ID], {"node_id": given}, env)["node_id"])
