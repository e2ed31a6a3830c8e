"""Where the outputs of ``scatter`` blocks land: a pure function of the plan and the node count.

The outputs are whole files and frame ranges of HDF5 selections (split by
:mod:`stager.kinds.h5.frames`). Every rank computes the placement identically from the
broadcast plan and the node count, so no message carries it, and a re-run on as many
nodes (resume) finds everything where it was. The rule (docs/hook-spec.md, "Scatter
blocks") is greedy, largest first (the LPT rule of scheduling): each output goes to the
``replicas`` distinct nodes with the fewest bytes so far; the frame ranges of one HDF5
output go together, to the least loaded nodes in turn. Loads then differ by at most the
largest output (``tests/unit/test_stager_scatter.py``, on random sizes).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from stager.errors import PlanError

__all__ = ["place", "placement", "node_bytes"]


def place(sizes: Sequence[int], replicas: Sequence[int], nodes: int,
          groups: Sequence[Sequence[int]] = ()) -> List[Tuple[int, ...]]:
    """Holders of each output: ``result[i]`` is a sorted tuple of ``replicas[i]`` node indices.

    Pure. ``sizes[i]`` is output ``i``'s size in bytes. ``groups`` lists outputs placed
    together -- the frame ranges of one HDF5 output (same replicas): the group's
    ranges go, largest first, to the least loaded nodes in turn, so ranges of one
    output land on distinct nodes while there are nodes enough (each node then holds
    one contiguous range per output and replica). Items -- single outputs and groups
    -- are taken largest first (a group by its total). Raises ``ValueError`` when an
    output asks for more replicas than there are nodes (callers name the block).
    """
    if nodes < 1:
        raise ValueError("no nodes to place outputs on")
    for r in replicas:
        if r > nodes:
            raise ValueError(f"{r} replicas asked for, but the job has {nodes} node(s)")
    grouped = {i for g in groups for i in g}
    items: List[List[int]] = [sorted(g, key=lambda i: (-sizes[i], i)) for g in groups if g]
    items += [[i] for i in range(len(sizes)) if i not in grouped]
    items.sort(key=lambda it: (-sum(sizes[i] for i in it), it[0]))
    load = [0] * nodes
    out: List[Tuple[int, ...]] = [()] * len(sizes)
    for it in items:
        order = sorted(range(nodes), key=lambda n: (load[n], n))  # least loaded first
        turn = 0
        for i in it:
            taken = [order[(turn + r) % nodes] for r in range(replicas[i])]
            turn += replicas[i]
            out[i] = tuple(sorted(taken))
            for n in taken:
                load[n] += sizes[i]
    return out


def placement(plan, nodes: int) -> Dict[Tuple[str, int], Tuple[int, ...]]:
    """Holders of every output of the plan's scatter blocks: ``(kind, index) -> nodes``.

    ``kind`` is the block kind's name, ``index`` the output's index in
    ``plan.units(kind)``. Pure; every rank computes the same result from the broadcast
    plan. Outputs of broadcast blocks are absent (every node holds them). HDF5
    outputs are placed as given: split the plan into frame ranges first
    (:func:`stager.kinds.h5.frames.split`).

    Raises
    ------
    PlanError
        A block asks for more replicas than the job has nodes (names the block).
    """
    for b in plan.blocks:
        if b.mode == "scatter" and b.replicas > nodes:
            raise PlanError(f"{b.location}: 'scatter ... replicas {b.replicas}' needs at least "
                            f"{b.replicas} nodes, and this job has {nodes}: lower replicas or "
                            "run on more nodes")
    keys = [(k, i) for k in plan.outputs for i, u in enumerate(plan.units(k))
            if plan.blocks[u.block].mode == "scatter"]
    units = [plan.units(k)[i] for k, i in keys]
    ranges: Dict[Tuple[str, int], List[int]] = {}  # the frame ranges of one HDF5 output
    for j, u in enumerate(units):
        if getattr(u, "frames", ()):
            ranges.setdefault((u.source, u.block), []).append(j)
    holders = place([u.out_bytes for u in units],
                    [plan.blocks[u.block].replicas for u in units], nodes,
                    list(ranges.values()))
    return dict(zip(keys, holders))


def node_bytes(plan, nodes: int) -> List[int]:
    """Bytes each node receives from the whole plan (broadcast blocks count on every node)."""
    held = placement(plan, nodes)
    per = [sum(b.bytes for b in plan.blocks if b.mode != "scatter")] * nodes
    for (kind, i), hs in held.items():
        for n in hs:
            per[n] += plan.units(kind)[i].out_bytes
    return per
