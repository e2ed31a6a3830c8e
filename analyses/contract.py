"""The analysis contract: one analysis runs on a stream and on staged files alike.

After LiberTEM's UDFs, an analysis is a few hooks and never sees sockets, nodes
or executors:

``prepare(geometry)``
    once per scan on every rank that processes partitions;
``samples(geometry)`` / ``use_samples(frames)``
    offline only: frames to see before any partition, turned into parameters;
``process_partition(frames, positions, complete) -> partial``
    K consecutive frames, their flat scan positions and which are complete;
``merge(a, b) -> partial``
    associative: per node, then in a tree across nodes (lower rank first);
``live(partial)`` / ``images(partial, geometry)``
    what to publish while the scan runs, and the scan-shaped images of it;
``write(h5, partial, geometry)`` / ``write_files(folder, partial, geometry)``
    the final datasets, and files beside ``<scan>.h5`` (named by ``files``);
``problem(partial, geometry)``
    why the result is of no use ("" if it is): the run then fails.

Partials are usually :class:`PerFrame`: per-frame columns and ragged per-frame
arrays kept as chunks, so ``merge`` concatenates chunk lists. :class:`FrameSum`
(``/sum_image``) is the one analysis shipped here; applications' are loaded by
name (:func:`analyses.loading.load_analysis`).
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
    """Base class of analyses (see the module docstring); the defaults make a
    :class:`PerFrame` analysis whose scalar columns become ``<column>_image``."""

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
        """Flat frame indices to see before any partition, or None.

        Offline, the library reads them and gives them to :meth:`use_samples` (stem4d's
        sampled thresholds, as stempy does); a stream has no first pass, so there the
        analysis takes what it needs from its parameters.
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
        """Why the merged result is of no use (e.g. no spot at all), or "": a receiving job
        then marks the scan invalid (exit 1), the offline flow fails after writing."""
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
        """What a live message carries for viewers: the images and a header description
        (default :meth:`images`, None); an application adds what only a viewer needs."""
        return self.images(partial, geometry), None

    def columns(self) -> Tuple[str, ...]:
        """Names of the scalar columns (for empty results)."""
        return ()

    def scan_bytes(self, geometry: ScanGeometry) -> int:
        """Bytes of this analysis's state of a whole scan, checked at ``begin`` against
        ``--memory`` (:func:`streams.bounds.scan_cost`); default a :class:`PerFrame` of the
        scalar :meth:`columns` (17 bytes a frame and 8 a column). Override for more."""
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
