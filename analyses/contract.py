"""The analysis contract: one analysis runs on a stream and on staged files alike.

After LiberTEM's UDFs, an analysis is a few hooks and never sees sockets, nodes
or executors:

``prepare(geometry)``
    once per scan on every rank that processes partitions (masks, dark frames);
``samples(geometry)`` / ``use_samples(frames)``
    offline only: frames to see before any partition (thresholds sampled from
    the scan), read by the library, turned into parameters for every worker;
``process_partition(frames, positions, complete) -> partial``
    K consecutive frames ``(k, rows, cols)``, their scan positions (flat frame
    indices f; the position is ``divmod(f, nx)``) and which of them are complete;
``merge(a, b) -> partial``
    associative: the receiving job merges per node, then in a tree across nodes
    (lower rank first); the staged path merges with ``workflows.reduce_tree``;
``live(partial)`` / ``images(partial, geometry)``
    what is worth publishing while the scan runs (default: the partial without its
    per-frame ragged arrays) and the scan-shaped images made of it;
``write(h5, partial, geometry)``
    the final datasets, written once into the scan's HDF5 file;
``write_files(folder, partial, geometry)``
    files only the application makes (a CSV, a figure, another program's input),
    written beside ``<scan>.h5`` after it (default: none), named as ``files`` says;
``problem(partial, geometry)``
    why that result is of no use ("" if it is): the run then fails, never exit 0.

Partials are usually :class:`PerFrame` values: per-frame columns (a number or a
small vector per frame) and ragged per-frame arrays (electron events), kept as
chunks, so ``merge`` is a concatenation of chunk lists -- associative, cheap, and
order-free once expanded over the scan grid (every frame is in exactly one chunk).

:class:`FrameSum` is the one analysis the library ships: the per-frame pixel sum
(``/sum_image``), the minimum anyone needs to see that data arrived. Application
analyses live in application packages (``stem4d``) and are loaded by name with
:func:`analyses.loading.load_analysis` (``pkg.module:NAME`` or ``path/flow.py[:NAME]``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from analyses.geometry import ScanGeometry

__all__ = ["Analysis", "PerFrame", "Chunk", "FrameSum"]

@dataclass
class Chunk:
    """Per-frame values of some frames (usually one partition)."""

    frames: np.ndarray                      # (k,) int64 flat frame index
    complete: np.ndarray                    # (k,) bool
    columns: Dict[str, np.ndarray] = field(default_factory=dict)       # name -> (k, ...)
    ragged: Dict[str, Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # name -> (counts (k,), flat values): frame i owns flat[sum(counts[:i]):][:counts[i]]


@dataclass
class PerFrame:
    """A mergeable partial made of per-frame chunks (see the module docstring)."""

    chunks: List[Chunk] = field(default_factory=list)

    def merge(self, other: PerFrame) -> PerFrame:
        return PerFrame(self.chunks + other.chunks)

    def without_ragged(self) -> PerFrame:
        return PerFrame([Chunk(c.frames, c.complete, c.columns) for c in self.chunks])

    def compact(self) -> PerFrame:
        """One chunk holding everything (fewer, larger objects to pickle and send)."""
        if len(self.chunks) <= 1:
            return self
        cs = self.chunks
        cols = {n: np.concatenate([c.columns[n] for c in cs]) for n in cs[0].columns}
        rag = {n: (np.concatenate([c.ragged[n][0] for c in cs]),
                   np.concatenate([c.ragged[n][1] for c in cs])) for n in cs[0].ragged}
        return PerFrame([Chunk(np.concatenate([c.frames for c in cs]),
                               np.concatenate([c.complete for c in cs]), cols, rag)])

    def seen(self, frames: int) -> np.ndarray:
        """Bool (frames,): frames present in some chunk."""
        out = np.zeros(frames, bool)
        for c in self.chunks:
            out[c.frames] = True
        return out

    def complete(self, frames: int) -> np.ndarray:
        out = np.zeros(frames, bool)
        for c in self.chunks:
            out[c.frames] = c.complete
        return out

    def column(self, name: str, frames: int, dtype: Any = np.float64) -> np.ndarray:
        """Column ``name`` over all ``frames`` (zeros where a frame is absent)."""
        shape: Tuple[int, ...] = ()
        if self.chunks:
            first = self.chunks[0].columns[name]
            shape, dtype = first.shape[1:], first.dtype
        out = np.zeros((frames, *shape), dtype)
        for c in self.chunks:
            out[c.frames] = c.columns[name]
        return out

    def ragged(self, name: str, frames: int, dtype: Any = np.uint32
               ) -> Tuple[np.ndarray, np.ndarray]:
        """Ragged ``name`` over all frames in frame order: (counts (frames,), flat)."""
        counts = np.zeros(frames, np.int64)
        pieces: Dict[int, np.ndarray] = {}
        for c in self.chunks:
            n, flat = c.ragged[name]
            dtype = flat.dtype
            starts = np.concatenate(([0], np.cumsum(n)[:-1]))
            for f, s, k in zip(c.frames.tolist(), starts.tolist(), n.tolist()):
                counts[f] = k
                pieces[f] = flat[s:s + k]
        flat_all = (np.concatenate([pieces[f] for f in sorted(pieces)]) if pieces
                    else np.zeros(0, dtype))
        return counts, flat_all.astype(dtype, copy=False)


class Analysis:
    """Base class of analyses (see the module docstring). Override the hooks.

    The defaults make a :class:`PerFrame` analysis: ``merge`` concatenates,
    ``live`` drops ragged arrays, ``images`` turns every scalar column into a
    scan-shaped image named ``<column>_image`` and ``write`` writes those images
    at the root of the file.
    """

    #: Short name (reports, live messages).
    name = "analysis"

    #: What :meth:`write_files` adds to the scan's name (``.csv`` for ``<scan>.csv``):
    #: the commands settle those files with ``<scan>.h5`` before any task
    #: (:func:`core.outputs.check_outputs`).
    files: Tuple[str, ...] = ()

    #: Whether a frame analysed twice leaves the result as it is. A detector that sends
    #: an image twice can reach two Stream V2 clients, and both analyse it: per-frame
    #: values (:class:`PerFrame`: the last copy wins) are unchanged, a sum over frames
    #: is not. The receiving job refuses to call such a scan served when it is False.
    duplicates_safe = True

    #: Whether :meth:`process_partition` takes a sparse partition as it is
    #: (:class:`analyses.sparse.CSRFrames`); False: it gets dense frames.
    sparse = False

    #: Whether :meth:`use_detector` must see each scan's pixel mask before its first
    #: partition (a receiving job then hands it from the scan's start to the workers).
    needs_detector = False

    def use_detector(self, scan: str, pixel_mask: Optional[np.ndarray]) -> None:
        """The pixel mask the detector sent at ``scan``'s start (None: none was sent)."""

    def prepare(self, geometry: ScanGeometry) -> None:
        """Called once per scan on every rank that processes its partitions."""

    def samples(self, geometry: ScanGeometry) -> Optional[np.ndarray]:
        """Flat frame indices this analysis must see before any partition, or None.

        Offline, the library reads those frames from the source before any task and
        gives them to :meth:`use_samples` (stem4d's thresholds sampled from the scan,
        as stempy does); the parameters it returns travel to every worker with the
        others. A stream has no such first pass: there the analysis takes what it
        needs from its parameters, and ``prepare`` says what to give.
        """
        return None

    def use_samples(self, frames: np.ndarray) -> Dict[str, Any]:
        """Learn from the frames :meth:`samples` asked for; return the parameters to add."""
        return {}

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        return a.merge(b)

    def problem(self, partial: Any, geometry: ScanGeometry) -> str:
        """Why the merged result, written as it is, is of no use (e.g. no spot at all), or "".

        A receiving job then marks the scan's result invalid (not served, exit 1); the
        offline flow fails after writing. The file is kept for inspection either way.
        """
        return ""

    def empty(self) -> Any:
        return PerFrame()

    def live(self, partial: Any) -> Any:
        return partial.without_ragged()

    def images(self, partial: Any, geometry: ScanGeometry) -> Dict[str, np.ndarray]:
        out = {}
        F, shape = geometry.frames, geometry.scan_shape
        names = partial.chunks[0].columns if partial.chunks else self.columns()
        for n in names:
            col = partial.column(n, F)
            if col.ndim == 1:
                out[f"{n}_image"] = col.reshape(shape)
        return out

    def live_images(self, partial: Any, geometry: ScanGeometry
                    ) -> Tuple[Dict[str, np.ndarray], Optional[Dict[str, Any]]]:
        """What a live message carries for viewers (not the file): the images, and a
        description for the header or None. Default: :meth:`images`, None. An
        application adds what only a viewer needs (NF: spot pixels per distance; a
        LiberTEM UDF: every buffer, described)."""
        return self.images(partial, geometry), None

    def columns(self) -> Tuple[str, ...]:
        """Names of the scalar columns (for empty results)."""
        return ()

    def scan_bytes(self, geometry: ScanGeometry) -> int:
        """Bytes of this analysis's state of a whole scan (checked at ``begin`` against
        ``--memory``, :func:`streams.bounds.scan_cost`). Default: a :class:`PerFrame`
        of the scalar :meth:`columns` -- per frame its index (8), ``complete`` (1) and
        8 per column. Override when the state holds more (vectors, ragged arrays,
        images of the detector's size)."""
        return geometry.frames * (9 + 8 * max(1, len(self.columns())))

    def write(self, h5: Any, partial: Any, geometry: ScanGeometry) -> None:
        for n, img in self.images(partial, geometry).items():
            h5.create_dataset(n, data=img)

    def write_files(self, folder: str, partial: Any, geometry: ScanGeometry) -> List[str]:
        """Write the files only this application makes into ``folder``, beside
        ``<scan>.h5`` (named after ``geometry.scan``, atomically); return their paths."""
        return []


class FrameSum(Analysis):
    """The per-frame pixel sum: ``/sum_image`` (scan_shape, float64, 0 where missing)."""

    name = "sum"

    def columns(self) -> Tuple[str, ...]:
        return ("sum",)

    sparse = True

    def process_partition(self, frames: Any, positions: np.ndarray,
                          complete: np.ndarray) -> PerFrame:
        from analyses.sparse import CSRFrames, row_sums

        sums = (row_sums(frames)[:, 0] if isinstance(frames, CSRFrames)
                else frames.reshape(len(frames), -1).sum(axis=1, dtype=np.float64))
        return PerFrame([Chunk(np.asarray(positions, np.int64).copy(),
                               np.asarray(complete, bool).copy(), {"sum": sums})])
