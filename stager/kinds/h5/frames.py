"""``scatter ... h5`` blocks: each HDF5 output split into contiguous frame ranges. Pure.

Each output is split along the first axis (the frames of a detector stack) into one
range per node; each range becomes an output of its own (a node-local HDF5 file) that
:mod:`stager.planning.scatter` places like a file. The split depends only on the plan
and the node count, so every rank computes it from the broadcast plan without a message.

The rules -- which dataset is the frame dataset, what is split with it and what copied
whole, range bounds on whole stored chunks (``align``: the least common multiple of the
first chunk dimension of the split datasets that move as stored chunks), the
``scan.frames{a}-{b}.h5`` names, what is refused -- are docs/hook-spec.md, "Scatter blocks".
"""
from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from stager.errors import PlanError
from stager.planning.plan import FrameRange, Plan

if TYPE_CHECKING:  # h5types needs numpy: not imported where no HDF5 is scattered
    from stager.kinds.h5.types import DatasetPlan, H5FilePlan

__all__ = ["frame_dataset", "split_rows", "range_dest", "split_file", "split"]


def _splittable(d: DatasetPlan) -> bool:
    return bool(d.shape) and d.space == "simple" and d.values in ("raw", "vlen")


def frame_dataset(fp: H5FilePlan) -> Optional[DatasetPlan]:
    """The dataset whose first axis is split (see the module docstring), or None."""
    best: Optional[DatasetPlan] = None
    for d in fp.datasets:
        if _splittable(d) and (best is None or
                               (len(d.shape), d.nbytes) > (len(best.shape), best.nbytes)):
            best = d
    return best


def _align(split: Sequence[DatasetPlan]) -> int:
    """Frames per range must be a multiple of this: stored chunks stay whole."""
    return math.lcm(1, *(d.chunks[0] for d in split if d.layout == "chunked" and d.chunks
                          and d.step == 1 and d.start % d.chunks[0] == 0))


def split_rows(frames: int, parts: int, align: int = 1) -> List[Tuple[int, int]]:
    """Contiguous row ranges ``[lo, hi)`` of ``0..frames``: at most ``parts``, bounds on
    multiples of ``align`` (except the end), sizes differing by at most ``align``. Pure."""
    if frames < 1 or parts < 1:
        return []
    units = math.ceil(frames / align)
    parts = max(1, min(parts, units))
    bounds = [min(frames, (units * k // parts) * align) for k in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def range_dest(dest: str, fr: FrameRange) -> str:
    """``DIR/scan.h5`` → ``DIR/scan.frames{first}-{last + 1}.h5`` (see the module docstring)."""
    root, ext = os.path.splitext(dest)
    last = fr.first + (len(fr) - 1) * fr.step
    return f"{root}.frames{fr.first}-{last + 1}{ext}"


def _slice(d: DatasetPlan, lo: int, hi: int) -> DatasetPlan:
    """``d`` restricted to its selected rows ``lo .. hi - 1``."""
    inline = None if d.inline is None else d.inline[lo:hi]
    start = d.start + lo * d.step
    stop = d.start + (hi - 1) * d.step + 1
    from stager.kinds.h5.types import OBJECT_OVERHEAD

    # the whole selection's estimate, shared by rows, plus one more object's overhead
    est = math.ceil(d.est_bytes * (hi - lo) / d.rows) + OBJECT_OVERHEAD + 64
    return replace(d, start=start, stop=stop, sliced=True, inline=inline, est_bytes=est)


def _has_region_refs(fp: H5FilePlan) -> bool:
    for d in fp.datasets:
        if d.values == "refs" and d.inline is not None and \
                any(getattr(t, "region", None) is not None for t in d.inline):
            return True
    for attrs in [g.attrs for g in fp.groups] + [d.attrs for d in fp.datasets]:
        for a in attrs:
            if a.values == "refs" and any(t.region is not None for t in a.value or ()):
                return True
    return False


def split_file(fp: H5FilePlan, parts: int,
               location: str = "") -> List[Tuple[Optional[FrameRange], H5FilePlan]]:
    """One HDF5 output → its range outputs ``(frames, plan)``. Pure.

    ``frames`` is ``None`` for an output placed whole (fewer than two frames).

    Raises
    ------
    PlanError
        The output holds region references and would be split (names the file).
    """
    main = frame_dataset(fp)
    if main is None or main.rows < 2:
        return [(None, fp)]
    if _has_region_refs(fp):
        raise PlanError(f"{location}: {fp.source} holds region references, which select "
                        "rows of the source that no single frame range holds: broadcast "
                        "this selection, or scatter the whole file with a 'files' block")
    frames = main.rows
    split = [d for d in fp.datasets if _splittable(d) and d.rows == frames]
    other = [d for d in fp.datasets if _splittable(d) and d.rows != frames
             and len(d.shape) == len(main.shape) >= 3]
    if other:
        raise PlanError(f"{location}: {fp.source}: {other[0].path} ({other[0].rows} frames) "
                        f"and {main.path} ({frames} frames) are two frame stacks, and a "
                        "scatter block splits one per output file (the other would be "
                        "copied whole to every node): select one stack per entry, e.g. "
                        "each data file's /entry/data/data, or an NXmx virtual dataset "
                        "over them")
    out: List[Tuple[Optional[FrameRange], H5FilePlan]] = []
    for lo, hi in split_rows(frames, parts, _align(split)):
        fr = FrameRange(main.start + lo * main.step, main.start + (hi - 1) * main.step + 1,
                        main.step)
        datasets = tuple(_slice(d, lo, hi) if d in split else d for d in fp.datasets)
        out.append((fr, replace(fp, dest=range_dest(fp.dest, fr), datasets=datasets,
                                 frames=(fr.first, fr.stop, fr.step))))
    return out


def split(plan: Plan, nodes: int) -> Plan:
    """The plan with each ``scatter ... h5`` output replaced by its frame ranges. Pure.

    Every rank computes the same result from the broadcast plan and the node count.
    A plan without scatter h5 blocks is returned as it is.

    Raises
    ------
    PlanError
        Region references in an output that would be split; a range's name taken by
        another output of the plan.
    """
    scattered = [b.kind == "h5" and b.mode == "scatter" for b in plan.blocks]
    if not any(scattered) or nodes < 1:
        return plan
    taken = {u.dest for us in plan.outputs.values() for u in us}
    h5: List[H5FilePlan] = []
    for fp in plan.units("h5"):
        if not scattered[fp.block] or fp.frames:  # a range already: a split plan again
            h5.append(fp)
            continue
        loc = plan.blocks[fp.block].location
        for fr, part in split_file(fp, nodes, loc):
            if fr is not None and part.dest in taken:
                raise PlanError(f"{loc}: frames {fr.first}..{fr.stop - 1} of {fp.source} "
                                f"would land at {part.dest.replace(chr(0), '%')}, where "
                                "another output of the spec lands; rename one")
            h5.append(part)
    blocks = list(plan.blocks)
    for i, b in enumerate(blocks):
        if scattered[i]:
            mine = [h for h in h5 if h.block == i]
            blocks[i] = replace(b, files=len(mine), bytes=sum(h.est_bytes for h in mine))
    return replace(plan, blocks=tuple(blocks), outputs={**plan.outputs, "h5": tuple(h5)})
