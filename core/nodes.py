"""Node identity and the leader communicator (one rank per node).

A *node* is a set of ranks that share node-local storage; its *leader* is its
lowest rank in ``comm`` (as in Swift/T's leader communicator). Leaders do all
the staging I/O; the other ranks only take part in agreement.

How ranks form nodes is one value, ``node_id`` (:func:`parse_node_id`):

* ``host`` (default): ``comm.Split_type(MPI.COMM_TYPE_SHARED)``, named by host name;
* ``emulate:K``: contiguous blocks of ranks become ``node0`` .. ``node{K-1}``
  (block ``i`` holds ranks ``[i*size//K, (i+1)*size//K)``), for one-machine
  tests and benchmarks;
* ``env:VAR``: ranks with the same value of environment variable ``VAR`` form
  a node named by that value (e.g. ``SLURMD_NODENAME`` in the local four-node
  Slurm cluster, where every rank has the same host name).

:func:`name_nodes` is the ONE function that turns those inputs into node
names: :func:`node_layout` (MPI) and a process alone (:func:`local_node_name`)
both use it, so ``%n`` means the same directory everywhere. Nodes are numbered
by their leader's rank. Code does not call :func:`node_layout` itself: it is
made once per job by :meth:`core.job.Job.from_comm`, and the job is passed down::

    with Job.from_comm(comm, "emulate:2") as job:
        if job.is_leader:
            job.leader_comm.Barrier()   # one rank per node

The naming and assignment rules are pure functions (:func:`name_nodes`,
:func:`assign_nodes`) tested without MPI; the command-line spellings of ``node_id`` are
:func:`add_node_id_flags` and :func:`node_id_of`.
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
           "expand_node",
           "assign_nodes", "check_node_name", "NODE_ID", "parse_node_id", "node_id_of",
           "resolve_node_id", "SPELLINGS", "add_node_id_flags"]


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
    leaders_share_host : bool
        Every leader is in one shared-memory domain (one host).
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
    leaders_share_host: bool = False

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
        raise ValueError(f"emulate:{k}: the number of emulated nodes must be an integer in "
                         f"1..{size} (the number of ranks)")
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


def expand_node(template: str, node: str) -> str:
    """Replace the ``%n`` placeholder of a destination template with a node name.

    ``%j`` and ``%u`` were already expanded when the spec was read; ``%%``
    became a literal ``%`` there too, and is kept as ``\\x00`` until here so a
    literal ``%n`` written as ``%%n`` survives.
    """
    return template.replace("%n", node).replace("\x00", "%")


def name_nodes(size: int, node_id: str, values: Optional[Sequence[Any]] = None) -> List[str]:
    """The node name of each of ``size`` ranks: the one naming rule of mpistage. Pure.

    Parameters
    ----------
    size : int
    node_id : str
        ``emulate:K``: ``node0`` .. ``node{K-1}``, contiguous blocks of ranks;
        ``env:VAR``: ``values`` holds each rank's value of ``VAR``;
        ``host``: ``values`` holds each rank's ``(host name, rank of its shared-memory
        leader)``; a host name that belongs to several shared-memory groups (odd
        set-ups) becomes ``host-LEADERRANK``, so names stay unique and readable.
    values : sequence, optional
        One per rank, by rank (not for ``emulate:K``).

    Raises
    ------
    ValueError
        ``node_id`` that does not parse or fit ``size``, or ``values`` of another length.
    JobError
        An ``env:VAR`` value missing on some rank, or a name that cannot be a
        directory name (it replaces ``%n``); the same on every rank.
    """
    kind, _, arg = parse_node_id(node_id).partition(":")
    if kind == "emulate":
        ids = emulated_ids(size, int(arg))
    elif values is None or len(values) != size:
        raise ValueError(f"node id {node_id}: expected {size} values, got "
                         f"{None if values is None else len(values)}")
    elif kind == "env":
        unset = [r for r, v in enumerate(values) if not v]
        if unset:
            raise JobError(
                f"environment variable {arg} is unset or empty on rank(s) "
                f"{', '.join(map(str, unset[:8]))}{' ...' if len(unset) > 8 else ''}; "
                "set it on every rank or use another --node-id")
        ids = [str(v) for v in values]
    else:
        groups: dict = {}
        for h, _leader in dict.fromkeys(values):
            groups[h] = groups.get(h, 0) + 1
        ids = [h if groups[h] == 1 else f"{h}-{leader}" for h, leader in values]
    for name in dict.fromkeys(ids):
        check_node_name(name)
    return ids


def _own_value(node_id: str, rank: int = 0, env: Optional[Mapping[str, str]] = None) -> Any:
    """What this process contributes to :func:`name_nodes` for ``node_id``."""
    kind, _, arg = node_id.partition(":")
    if kind == "env":
        return (os.environ if env is None else env).get(arg)
    return (socket.gethostname(), rank) if kind == "host" else None


def local_node_name(node_id: str, env: Optional[Mapping[str, str]] = None) -> str:
    """The node name of a process that runs alone (no MPI job): ``name_nodes`` for one rank."""
    return name_nodes(1, node_id, [_own_value(node_id, 0, env)])[0]


def node_layout(comm: Any, node_id: str) -> NodeLayout:
    """Collective over `comm`: every rank must call. Decide nodes and leaders.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    node_id : str
        How ranks form nodes (:func:`parse_node_id`), the same on every rank.

    Returns
    -------
    NodeLayout

    Raises
    ------
    ValueError
        Bad arguments (raised before any collective, identically on all ranks).
    JobError
        ``env:VAR`` unset on some rank, or a node name unusable as a path
        component (raised on every rank).
    """
    from mpi4py import MPI

    node_id = parse_node_id(node_id)
    ids = name_nodes(comm.size, node_id) if node_id.startswith("emulate:") else None
    # each rank's shared-memory domain, named by its lowest rank
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    domain = shared.bcast(comm.rank, root=0)
    shared.Free()
    gathered = comm.allgather((domain, _own_value(node_id, domain)))
    if ids is None:
        ids = name_nodes(comm.size, node_id, [v for _, v in gathered])

    idx, names, leaders = assign_nodes(ids)
    my = idx[comm.rank]
    node_comm = comm.Split(my, key=comm.rank)
    is_leader = leaders[my] == comm.rank
    lc = comm.Split(0 if is_leader else MPI.UNDEFINED, key=comm.rank)
    leader_comm = None if lc == MPI.COMM_NULL else lc
    return NodeLayout(name=names[my], index=my, n_nodes=len(names), names=tuple(names),
                      node_comm=node_comm, leader_comm=leader_comm, is_leader=is_leader,
                      leader_ranks=tuple(leaders), node_of=tuple(idx),
                      leaders_share_host=len({gathered[r][0] for r in leaders}) == 1)


# -- how ranks form nodes: one value ----------------------------------------------------------
def parse_node_id(value: Any, name: str = "node_id") -> str:
    """``host`` | ``env:VAR`` | ``emulate:N`` (canonical text, meanings in the module
    docstring); strict."""
    text = str(value).strip()
    kind, _, arg = text.partition(":")
    if text == "host":
        return text
    if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
        return text
    if kind == "emulate":
        return f"emulate:{parse_int(1)(arg, name)}"
    raise ValueError(f"{name} must be 'host', 'env:VAR' or 'emulate:N', got {value!r}")


#: The spellings of ``node_id`` (:func:`add_node_id_flags`; the ``STAGER_*`` variables of the
#: older two): each one's prefix in the canonical value.
SPELLINGS = {"node_id": "", "emulate_nodes": "emulate:", "node_id_env": "env:"}


def node_id_of(given: Any) -> Optional[str]:
    """The one ``node_id`` of an argument namespace (or mapping) holding it or one of its
    other :data:`SPELLINGS`; None if none is given. Pure.

    Raises
    ------
    ValueError
        More than one given, or a value that does not parse.
    """
    get = given.get if isinstance(given, Mapping) else lambda k: getattr(given, k, None)
    spelled = [(k, get(k)) for k in SPELLINGS if get(k) not in (None, "")]
    if len(spelled) > 1:
        raise ValueError(f"use either {' or '.join(k for k, _ in spelled)}, not both")
    if not spelled:
        return None
    key, value = spelled[0]
    return parse_node_id(f"{SPELLINGS[key]}{value}", key)


def add_node_id_flags(parser: Any) -> None:
    """Add ``--node-id HOW`` and its two older spellings (one of them) to an argparse parser;
    :func:`node_id_of` reads the parsed namespace back as one ``node_id``."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--node-id", metavar="HOW", default=None,
                   help="host (default, or $STAGER_NODE_ID), env:VAR (ranks with the same "
                        "value of VAR form a node) or emulate:K (K blocks of ranks)")
    g.add_argument("--emulate-nodes", type=int, metavar="K", default=None,
                   help="treat contiguous blocks of ranks as K nodes named node0..node{K-1}")
    g.add_argument("--node-id-env", metavar="VAR", default=None,
                   help="ranks with the same value of environment variable VAR form a node "
                        "(e.g. SLURMD_NODENAME)")


#: How ranks form nodes: keyword > ``$STAGER_NODE_ID`` > ``host``.
NODE_ID = Option("node_id", "host", parse_node_id, ENV_PREFIX + "NODE_ID")
#: The variable the workflows once read (the name of a variable naming the node): still
#: accepted, with a DeprecationWarning, as ``STAGER_NODE_ID=env:VAR``.
DEPRECATED_ENV = "WORKFLOWS_NODE_ID_ENV"


def resolve_node_id(env: Optional[Mapping[str, str]] = None, node_id: Any = None) -> str:
    """``node_id`` if given, else ``$STAGER_NODE_ID`` (or one of its other spellings,
    ``$STAGER_EMULATE_NODES``, ``$STAGER_NODE_ID_ENV``), else ``host``. Local; collective
    callers run it on rank 0."""
    env = os.environ if env is None else env
    given = node_id_of({"node_id": node_id})
    if given is None and not env.get(NODE_ID.env or ""):
        given = node_id_of({k: env.get(ENV_PREFIX + k.upper()) for k in list(SPELLINGS)[1:]})
        if given is None and env.get(DEPRECATED_ENV):
            import warnings

            warnings.warn(f"{DEPRECATED_ENV} is deprecated: set {NODE_ID.env}=env:"
                          f"{env[DEPRECATED_ENV]} instead", DeprecationWarning, stacklevel=2)
            given = parse_node_id(f"env:{env[DEPRECATED_ENV]}", DEPRECATED_ENV)
    return str(resolve([NODE_ID], {"node_id": given}, env)["node_id"])
