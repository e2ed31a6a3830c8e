"""The operations of a real plan, as the stager would perform them on N nodes. Pure.

:func:`replay` takes the :class:`~stager.planning.plan.Plan` that ``stager plan`` and
``stager stage`` compute, a node count and the staging options, and lists what every
node does, in rounds: which source bytes it reads from the parallel filesystem (PFS),
which bytes it sends to which nodes, what it hashes, writes and commits, and the
metadata operations on the PFS and on the node-local filesystem. Nothing is re-typed:
the tasks are :func:`stager.staging.transfer.tasks.make_tasks`'s, the chunk size and
small-file threshold the resolved :class:`~stager.staging.options.StageOptions`', the
pipeline depth the engine's, the scatter placement
:func:`stager.planning.scatter.placement`'s.

Aggregation: node ``i`` belongs to group ``i // k`` (``k = nodes // groups``); a
round lists each *group*'s sums. For ``stripe``, calling ``make_tasks`` with
``groups`` leaders instead of ``nodes`` gives exactly those sums (the stripes of
``split_even(L, n)`` of ``k`` consecutive leaders add up to ``split_even(L, n/k)``'s,
and ``owners_by_bytes`` keeps that property), so the replay of 8,192 nodes costs what
64 groups cost. When a plan has more tasks than :data:`MAX_ROUNDS`, consecutive tasks
are merged into one round (bytes summed, per-task latencies counted ``tasks`` times).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from stager.planning.kinds import kinds, split
from stager.planning.plan import Plan
from stager.planning.scatter import node_bytes, placement
from stager.staging.options import StageOptions
from stager.staging.transfer.engine import _DEPTH
from stager.staging.transfer.tasks import chunk_ranges, make_tasks

__all__ = ["MAX_ROUNDS", "MAX_GROUPS", "METHODS", "Group", "Round", "Scenario", "replay",
           "groups_for", "LOCAL_OPS"]

#: Rounds a simulation replays at most (more tasks are merged, see the module docstring).
MAX_ROUNDS = 64
#: Simulated actors at most (each stands for ``nodes // groups`` nodes).
MAX_GROUPS = 64
#: The transfer methods replayed (``stager.staging.transfer.METHODS``' built-in rows).
METHODS = ("stripe", "bcast", "readall", "naive")

#: Node-local metadata operations the stager makes, counted from its code:
#: ``root``: per destination root while locking and resuming (``stager.staging.commits``:
#: make the root and its ``.stager`` directory, the lock file, the journal, the record
#: read); ``dir``: per destination directory (journal line + ``mkdir``); ``copy``: per
#: committed copy (temporary create, ``utime``, journal line, ``rename``: ``core.commit``);
#: ``record``: per root at the end (record written, renamed, journal removed, unlocked).
LOCAL_OPS = {"root": 6, "dir": 2, "copy": 4, "record": 4}
#: fsyncs per committed copy and per record with ``--fsync`` (the file, its journal line).
FSYNCS = {"copy": 2, "record": 1}
#: PFS metadata operations per file a node opens (open, and the identity stat at close:
#: ``stager.staging.transfer.source``); ``readall`` adds the collective ``MPI_File_open``.
OPEN_OPS = 2
#: Bytes a planned output takes in the pickled plan broadcast to every rank (measured:
#: ``len(pickle.dumps(plan)) / files`` is 250-350 B for paths of ~60 characters).
PLAN_BYTES_PER_OUTPUT = 320


@dataclass
class Group:
    """One group's part of a round (sums over the group's nodes)."""

    #: (file, offset, length, copies): source bytes read; ``copies`` nodes each read them
    reads: List[Tuple[int, int, int, int]] = field(default_factory=list)
    opens: int = 0             #: PFS files opened (each OPEN_OPS metadata operations)
    sends: Dict[int, int] = field(default_factory=dict)   #: bytes sent to each group
    messages: int = 0          #: MPI messages sent and received (CPU per message)
    hash_read: int = 0         #: bytes hashed after reading (each piece's digest)
    hash_write: int = 0        #: bytes hashed while writing (checks, whole-file sums)
    write: int = 0             #: bytes written to node-local storage
    commits: int = 0           #: copies committed (LOCAL_OPS["copy"] each)
    senders: int = 0           #: nodes that send ``sends`` (0: all the group's)


@dataclass
class Round:
    """What every group does in one round; ``sync``: the round ends with the
    collective status exchange (every leader waits for all), ``steps`` its latency
    steps (tree depth x tasks merged)."""

    groups: Dict[int, Group]
    tasks: int = 1
    sync: bool = True
    steps: int = 0


@dataclass
class Scenario:
    """Everything a simulation replays: plain data, pickled to the simulating process."""

    method: str
    nodes: int
    groups: int
    chunk_size: int
    depth: int
    fsync: bool
    files: int                 #: planned outputs
    blocks: int
    roots: int                 #: destination roots per node
    dirs: int                  #: destination directories per node
    sizes: Tuple[int, ...]     #: bytes read from the source of each output
    collective: List[Round]    #: pipelined rounds (stripe, bcast), or readall's steps
    #: rounds without a job-wide collective (naive; scatter outputs, among their holders)
    solo: List[Round]
    plan_ops: int              #: PFS metadata operations of planning (rank 0, serial)
    plan_bytes: int            #: size of the plan broadcast to every rank
    bytes_per_node: int
    pfs_bytes: int             #: source bytes read from the PFS in the whole job
    pfs_meta_ops: int          #: PFS metadata operations in the whole job (plan + opens)
    written: int               #: bytes written to node-local storage in the whole job
    two_phase: bool = False    #: readall with an MPI-IO layer that de-duplicates

    @property
    def k(self) -> int:
        return self.nodes // self.groups


def groups_for(nodes: int, per: Optional[int] = None, most: int = MAX_GROUPS) -> int:
    """How many simulated groups stand for ``nodes`` nodes: ``nodes // per`` when ``per``
    (e.g. the nodes of one I/O node) divides ``nodes`` and leaves at most ``most`` groups,
    else the largest divisor of ``nodes`` not above ``most``."""
    if per and nodes % per == 0 and nodes // per <= most:
        return nodes // per
    return max(g for g in range(1, min(nodes, most) + 1) if nodes % g == 0)


def _tree(n: int) -> int:
    return max(1, math.ceil(math.log2(n))) if n > 1 else 0


def _read_size(k: Any, u: Any) -> int:
    """Source bytes of a unit: a whole file's size; for other kinds (HDF5 selections), the
    bytes of its copy (stored chunks are read as stored)."""
    return int(u.size if k.whole_files else u.out_bytes)


def replay(plan: Plan, nodes: int, opts: StageOptions, *, groups: Optional[int] = None,
           dedup: bool = False, aggregators_per_node: float = 1.0, align: int = 0
           ) -> Scenario:
    """The operations of staging ``plan`` to ``nodes`` nodes with ``opts``. Pure.

    Parameters
    ----------
    plan : Plan
        The real plan (``stager.plan(spec)``); scatter outputs are split and placed for
        ``nodes`` here, as ``stage`` does.
    nodes : int
    opts : StageOptions
        ``method``, ``chunk_size``, ``small_file_threshold`` and ``fsync`` are used.
    groups : int, optional
        Simulated groups (a divisor of ``nodes``; default :func:`groups_for`).
    dedup, aggregators_per_node, align : bool, float, int
        ``readall`` only: whether the platform's MPI-IO de-duplicates identical collective
        reads (two-phase I/O by ``aggregators_per_node * nodes`` aggregators, their file
        domains whole multiples of ``align`` bytes if not 0) or every node
        reads the whole chunk.

    Raises
    ------
    ValueError
        A method that is not replayed, or ``groups`` that does not divide ``nodes``.
    """
    if opts.method not in METHODS:
        raise ValueError(f"method {opts.method!r} cannot be simulated; use one of "
                         f"{', '.join(METHODS)}")
    if nodes < 1:
        raise ValueError("nodes must be 1 or more")
    g_count = groups or groups_for(nodes)
    if nodes % g_count:
        raise ValueError(f"{g_count} groups do not divide {nodes} nodes")
    plan = split(plan, nodes)
    held = placement(plan, nodes) if plan.scatters else {}
    units = [(k, i, u) for k in kinds() for i, u in enumerate(plan.units(k.name))]
    sizes = tuple(_read_size(k, u) for k, _, u in units)
    everyone = [g for g, (k, i, _) in enumerate(units) if (k.name, i) not in held]
    shared = [g for g, (k, i, _) in enumerate(units) if len(held.get((k.name, i), ())) > 1]
    alone = [g for g, (k, i, _) in enumerate(units) if len(held.get((k.name, i), ())) == 1]
    b = _Builder(sizes, nodes, g_count, opts)
    if opts.method == "naive":
        b.naive(everyone)
    elif opts.method == "readall":
        b.readall(everyone, dedup, aggregators_per_node, align)
    else:
        b.pipelined(everyone, bcast=opts.method == "bcast")
    for g in shared:  # among their holders only, one holder set after another
        hs = held[(units[g][0].name, units[g][1])]
        if opts.method == "naive":
            for node in hs:
                b.naive([g], node)
        else:
            b.among(g, hs)
    for g in alone:
        b.naive([g], held[(units[g][0].name, units[g][1])][0])
    dests = {os.path.dirname(u.dest) for _, _, u in units}
    roots = {plan.blocks[u.block].dest for _, _, u in units}
    per_node = node_bytes(plan, nodes) if plan.scatters else [plan.total_bytes] * nodes
    return Scenario(
        method=opts.method, nodes=nodes, groups=g_count, chunk_size=opts.chunk_size,
        depth=_DEPTH, fsync=opts.fsync, files=len(units), blocks=len(plan.blocks),
        roots=len(roots), dirs=len(dests), sizes=sizes,
        collective=_merge(b.collective), solo=_merge(b.solo),
        plan_ops=len(units) + len(plan.blocks), plan_bytes=len(units) * PLAN_BYTES_PER_OUTPUT,
        bytes_per_node=max(per_node), pfs_bytes=b.pfs_bytes,
        pfs_meta_ops=len(units) + len(plan.blocks) + b.opens * OPEN_OPS
        + b.mpi_opens, written=sum(gr.write for r in b.collective + b.solo
                                   for gr in r.groups.values()),
        two_phase=opts.method == "readall" and dedup)


class _Builder:
    """Rounds of one replay, built method by method (see :func:`replay`)."""

    def __init__(self, sizes: Sequence[int], n: int, groups: int, opts: StageOptions):
        self.sizes, self.n, self.G, self.opts = sizes, n, groups, opts
        self.k = n // groups
        self.collective: List[Round] = []
        self.solo: List[Round] = []
        self.pfs_bytes = 0
        self.opens = 0
        self.mpi_opens = 0

    def _group(self, r: Round, g: int) -> Group:
        return r.groups.setdefault(g, Group())

    def pipelined(self, files: Sequence[int], bcast: bool) -> None:
        """``stripe`` / ``bcast``: make_tasks at group granularity, one round per task."""
        if not files:
            return
        sizes = [self.sizes[f] for f in files]
        n, G, k = self.n, self.G, self.k
        tasks = make_tasks(sizes, G, self.opts.chunk_size, self.opts.small_file_threshold,
                           single_reader=bcast)
        # which leaders open each file: stripe owners at node granularity (pure arithmetic
        # on the first chunk: leaders with a non-empty stripe), one for batched small files
        first_piece = set()
        for t in tasks:
            r = Round(groups={}, steps=_tree(n))
            batched = len({p.file for p in t.pieces}) > 1 or (
                sizes[t.pieces[0].file] < self.opts.small_file_threshold)
            for p in t.pieces:
                f = files[p.file]
                if p.length or p.file not in first_piece:
                    self._group(r, p.owner).reads.append((f, p.offset, p.length, 1))
                    self.pfs_bytes += p.length
                if p.file not in first_piece:
                    first_piece.add(p.file)
                    length = min(self.opts.chunk_size, sizes[p.file])
                    if batched or bcast:
                        self._group(r, p.owner).opens += 1
                        self.opens += 1
                    else:
                        for g in range(G):  # leaders of group g with a non-empty stripe
                            # (a stripe of a chunk shorter than n leaders is 0 or 1 byte)
                            c = min(k, length * (g + 1) * k // n - length * g * k // n)
                            self._group(r, g).opens += c
                            self.opens += c
            for g in range(G):
                gr = self._group(r, g)
                own = t.counts[g]
                gr.hash_read += own
                if bcast:
                    # a pipelined tree: every node receives the chunk once and sends it on
                    # once on average (chain/binary tree of Open MPI's Ibcast)
                    if g + 1 < G:
                        gr.sends[g + 1] = gr.sends.get(g + 1, 0) + t.nbytes
                    if k > 1:
                        gr.sends[g] = gr.sends.get(g, 0) + t.nbytes * (k - 1)
                    gr.messages += 2 * k
                else:
                    # Open MPI's Iallgatherv (libnbc) is linear: every leader sends its
                    # stripe to every other leader, and receives one from each
                    for h in range(G):
                        nb = own * (k - 1) if h == g else own * k
                        if nb:
                            gr.sends[h] = gr.sends.get(h, 0) + nb
                    gr.messages += k * 2 * (n - 1)
            ends = sum(1 for p in t.pieces if p.offset + p.length == sizes[p.file])
            for g in range(G):
                gr = self._group(r, g)
                gr.write += k * t.nbytes          # every node writes the whole buffer
                # each writer checks every piece it did not read itself (Sink.write)
                gr.hash_write += k * t.nbytes - t.counts[g]
                gr.commits += k * ends
            for p in t.pieces:
                if not (p.offset == 0 and p.length == sizes[p.file]):
                    # a file in several pieces: its reference leader (file % n) also
                    # hashes it whole (Sink.share_checksums)
                    self._group(r, (p.file % n) // k).hash_write += p.length
            self.collective.append(r)

    def readall(self, files: Sequence[int], dedup: bool, per_node: float, align: int) -> None:
        """The paper's method: every node ``Read_at_all``-s every chunk of each file."""
        n, G, k = self.n, self.G, self.k
        small = [f for f in files if self.sizes[f] < self.opts.small_file_threshold
                 and self.sizes[f] <= self.opts.chunk_size]
        self.pipelined(small, bcast=False)  # small files: stripe's batches
        aggs = max(1, min(n, round(per_node * n)))
        for f in (f for f in files if f not in small):
            for i, (off, length) in enumerate(chunk_ranges(self.sizes[f], self.opts.chunk_size)):
                r = Round(groups={}, steps=2 * _tree(n))  # Read_at_all + digest allgather
                for g in range(G):
                    gr = self._group(r, g)
                    if i == 0:
                        gr.opens += k
                        self.opens += k
                        self.mpi_opens += k
                    if dedup:
                        # two-phase I/O: aggregator a reads its file domain (whole ``align``
                        # units if not 0) and sends it to every node (each asked for it all)
                        units = -(-length // align) if align else length
                        used = min(aggs, units)
                        a0, a1 = used * g // G, used * (g + 1) // G
                        lo = min(length, units * a0 // used * (align or 1))
                        hi = min(length, units * a1 // used * (align or 1))
                        if hi > lo:
                            gr.reads.append((f, off + lo, hi - lo, 1))
                            self.pfs_bytes += hi - lo
                            for h in range(G):
                                nb = (hi - lo) * (k - 1 if h == g else k)
                                if nb:
                                    gr.sends[h] = gr.sends.get(h, 0) + nb
                            gr.senders = a1 - a0  # only they inject: each its own links
                        gr.messages += (a1 - a0) * n + k * used
                    else:
                        gr.reads.append((f, off, length, k))
                        self.pfs_bytes += length * k
                    gr.hash_read += k * length
                    gr.write += k * length
                    gr.hash_write += k * length  # every leader hashes its own copy
                    gr.commits += k if off + length == self.sizes[f] else 0
                self.collective.append(r)

    def naive(self, files: Sequence[int], holder: Optional[int] = None) -> None:
        """Every node reads every file itself, chunk by chunk, POSIX reads, no collective
        (``holder``: a scatter output's one holder reads, hashes and writes it alone)."""
        who = [(holder // self.k, 1)] if holder is not None else [(g, self.k) for g in
                                                                  range(self.G)]
        for f in files:
            for off, length in chunk_ranges(self.sizes[f], self.opts.chunk_size):
                r = Round(groups={}, sync=False)
                for g, copies in who:
                    gr = self._group(r, g)
                    gr.opens += copies if off == 0 else 0
                    self.opens += copies if off == 0 else 0
                    gr.reads.append((f, off, length, copies))
                    self.pfs_bytes += length * copies
                    gr.write += copies * length
                    gr.hash_write += copies * length  # the whole-file checksum, one pass
                    gr.commits += copies if off + length == self.sizes[f] else 0
                self.solo.append(r)

    def among(self, f: int, holders: Sequence[int]) -> None:
        """A scatter output with several holders: their stripes, exchanged among them."""
        h = len(holders)
        for off, length in chunk_ranges(self.sizes[f], self.opts.chunk_size):
            # holder sets do not wait for the whole job: a round of their own (no barrier)
            r = Round(groups={}, sync=False, steps=_tree(h))
            for j, node in enumerate(holders):
                lo, hi = length * j // h, length * (j + 1) // h
                gr = self._group(r, node // self.k)
                gr.reads.append((f, off + lo, hi - lo, 1))
                gr.opens += 1 if off == 0 else 0
                self.opens += 1 if off == 0 else 0
                self.pfs_bytes += hi - lo
                gr.hash_read += hi - lo
                for other in holders:
                    if other != node:
                        gr.sends[other // self.k] = gr.sends.get(other // self.k, 0) + hi - lo
                gr.messages += 2 * (h - 1)
                gr.write += length
                gr.hash_write += length - (hi - lo) + (length if j == f % h else 0)
                gr.commits += 1 if off + length == self.sizes[f] else 0
            self.solo.append(r)


def _merge(rounds: List[Round]) -> List[Round]:
    """At most MAX_ROUNDS rounds: consecutive rounds of the same kind summed."""
    if len(rounds) <= MAX_ROUNDS:
        return rounds
    per = math.ceil(len(rounds) / MAX_ROUNDS)
    out: List[Round] = []
    for s in range(0, len(rounds), per):
        part = rounds[s:s + per]
        m = Round(groups={}, tasks=sum(r.tasks for r in part), sync=part[0].sync,
                  steps=sum(r.steps for r in part))
        for r in part:
            for g, gr in r.groups.items():
                t = m.groups.setdefault(g, Group())
                for h, nb in gr.sends.items():
                    t.sends[h] = t.sends.get(h, 0) + nb
                for name in ("reads", "opens", "messages", "hash_read", "hash_write", "write",
                             "commits"):
                    setattr(t, name, getattr(t, name) + getattr(gr, name))
                t.senders = max(t.senders, gr.senders)
        out.append(m)
    return out
