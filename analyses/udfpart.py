"""LiberTEM's part runner over frames in memory: how a partition reaches a UDF.

The complete frames of ``process_partition`` become a LiberTEM
:class:`~libertem.io.dataset.base.Partition` (``FramesPartition``, in-memory, like
LiberTEM-live's partitions over received frames) spanning the scan positions
``min..max`` in flat scan coordinates, with a ROI that selects exactly the frames
present (a stream's partition is strided and may have holes). LiberTEM's own
:class:`~libertem.udf.base.UDFPartRunner` runs it (:func:`run_partition`):
``new_for_partition``, ``get_task_data``, ``preprocess``, ``process_frame`` /
``process_tile`` / ``process_partition`` over the tiles of LiberTEM's Negotiator
(:func:`tiling_scheme`), ``postprocess``, with ``self.meta`` (slice, coordinates, ROI,
dtypes) as LiberTEM sets it; corrections applied to every tile, as LiberTEM's datasets do.

A sparse partition (:class:`analyses.sparse.CSRFrames`) stays sparse when a UDF says it
takes sparse input (:func:`takes_sparse`: its ``get_backends``, no corrections): the
partition is then a dataset of backend ``scipy.sparse.csr_matrix``, as LiberTEM's raw
CSR dataset and LiberTEM-live's TPX3 are, its tiles whole frames ``(depth, pixels)``, and
LiberTEM's runner converts them with ``sparseconverter`` for any UDF of the pass that
takes only dense tiles.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from analyses.errors import UDFError
from analyses.geometry import ScanGeometry

__all__ = ["takes_sparse", "as_scipy", "lt_shape", "udf_meta", "run_partition", "tiling_scheme"]


def _partition_class() -> Any:
    from libertem.io.dataset.base import DataTile, Partition
    from libertem.common import Shape, Slice

    class FramesPartition(Partition):
        """Frames held in memory (already in position order, ROI frames only)."""

        def __init__(self, meta: Any, partition_slice: Any, data: np.ndarray,
                     roi_origin: int) -> None:
            super().__init__(meta=meta, partition_slice=partition_slice, io_backend=None,
                             decoder=None)
            self._data = data          # (k, rows, cols), or scipy CSR (k, pixels)
            self._roi_origin = roi_origin
            self._corrections = None

        @property
        def dtype(self) -> Any:
            return self.meta.raw_dtype

        def shape_for_roi(self, roi: Any) -> Any:
            return self.slice.adjust_for_roi(roi).shape

        def set_corrections(self, corrections: Any) -> None:
            self._corrections = corrections

        def set_worker_context(self, worker_context: Any) -> None:
            pass

        def get_locations(self) -> Any:
            return None

        def get_tiles(self, tiling_scheme: Any, dest_dtype: Any = "float32", roi: Any = None,
                      array_backend: Any = None) -> Any:
            # tiles as the negotiated scheme cuts them (depth x sig slices), each converted
            # to the UDFs' dtype on its own (small enough to stay in cache) into one buffer
            # per tile shape, reused as LiberTEM's readers reuse theirs (a UDF keeps no
            # tile): a new array per tile took twice as long (bench/README.md, issue 42)
            depth = max(1, int(tiling_scheme.depth))
            if not isinstance(self._data, np.ndarray):   # CSR: whole frames (no sig cut)
                sig = tuple(self.slice.shape.sig)
                for s in range(0, self._data.shape[0], depth):
                    tile = self._data[s:s + depth].astype(dest_dtype)
                    yield DataTile(tile, scheme_idx=0, tile_slice=Slice(
                        origin=(self._roi_origin + s, 0, 0),
                        shape=Shape((tile.shape[0], *sig), sig_dims=2)))
                return
            bufs: Dict[Tuple[int, int], np.ndarray] = {}
            for s in range(0, len(self._data), depth):
                block = self._data[s:s + depth]
                for idx in range(len(tiling_scheme)):
                    sl = tiling_scheme[idx]
                    (y0, x0), (h, w) = tuple(sl.origin), tuple(sl.shape)
                    if (h, w) not in bufs:
                        bufs[h, w] = np.empty((depth, h, w), dest_dtype)
                    tile = bufs[h, w][:len(block)]
                    np.copyto(tile, block[:, y0:y0 + h, x0:x0 + w], casting="unsafe")
                    tslice = Slice(origin=(self._roi_origin + s, y0, x0),
                                   shape=Shape((len(tile), h, w), sig_dims=2))
                    if self._corrections is not None:
                        self._corrections.apply(tile, tslice)
                    yield DataTile(tile, tile_slice=tslice, scheme_idx=idx)

        def __repr__(self) -> str:
            return f"<FramesPartition {self.slice}>"

    return FramesPartition


_PARTITION_CLS: Any = None


class _NegotiationView:
    """What LiberTEM's tile-shape Negotiator asks of a dataset (in-memory frames)."""

    def __init__(self, shape: Any, raw_dtype: np.dtype, sparse: bool) -> None:
        self.shape, self.raw_dtype, self.sparse = shape, raw_dtype, sparse

    def get_min_sig_size(self) -> int:
        return 4 * 4096 // self.raw_dtype.itemsize

    def need_decode(self, read_dtype: Any, roi: Any, corrections: Any) -> bool:
        return True

    def adjust_tileshape(self, tileshape: Any, roi: Any) -> Any:
        return tileshape

    def get_max_io_size(self) -> Optional[int]:
        return 20 << 20 if self.sparse else None     # LiberTEM's raw CSR dataset's

    def get_base_shape(self, roi: Any) -> Tuple[int, ...]:
        return (1, *self.shape.sig) if self.sparse else (1, 1, int(self.shape.sig[-1]))


def takes_sparse(mains: List[Any], corr: Any) -> bool:
    """Whether a UDF of ``mains`` takes sparse tiles on a CPU (LiberTEM's backends) and no
    correction patches pixels (LiberTEM corrects dense tiles only)."""
    from libertem.udf.base import _get_canonical_backends
    from sparseconverter import CPU_BACKENDS, SPARSE_BACKENDS

    if corr is not None and corr.have_corrections():
        return False
    return any(set(_get_canonical_backends(m.get_backends())) & SPARSE_BACKENDS & CPU_BACKENDS
               for m in mains)


def as_scipy(frames: Any) -> Any:
    """:class:`~analyses.sparse.CSRFrames` as a ``scipy.sparse.csr_matrix`` (k, pixels)."""
    import scipy.sparse

    k, rows, cols = frames.shape
    return scipy.sparse.csr_matrix((frames.values, frames.indices, frames.indptr),
                                   shape=(k, rows * cols))


def lt_shape(g: ScanGeometry) -> Any:
    """LiberTEM's ``Shape`` of scan ``g`` (nav, then the 2-D signal)."""
    from libertem.common import Shape

    return Shape((*g.scan_shape, *g.shape), sig_dims=2)


def udf_meta(udf: Any, g: ScanGeometry, roi: Optional[np.ndarray], corr: Any) -> Any:
    """The ``UDFMeta`` of ``udf`` on scan ``g`` (input dtype as LiberTEM chooses it)."""
    from libertem.udf.base import UDFMeta, _get_dtype

    dtype = _get_dtype([udf], np.dtype(g.dtype), corr, ("numpy",))
    return UDFMeta(partition_slice=None, dataset_shape=lt_shape(g), roi=roi,
                   dataset_dtype=np.dtype(g.dtype), input_dtype=dtype, corrections=corr)


def run_partition(spec: str, mains: List[Any], g: ScanGeometry, data: np.ndarray,
                  pos: np.ndarray, corr: Any, scheme: Any) -> Any:
    """LiberTEM's part runner over one ``FramesPartition`` of ``data`` (dense frames or
    :func:`as_scipy`) at the increasing flat positions ``pos``: per UDF, its result
    buffers."""
    global _PARTITION_CLS
    from libertem.common import Shape, Slice
    from libertem.common.executor import Environment
    from libertem.io.dataset.base import DataSetMeta
    from libertem.udf.base import UDFParams, UDFPartRunner

    if _PARTITION_CLS is None:
        _PARTITION_CLS = _partition_class()
    lo, hi = int(pos[0]), int(pos[-1]) + 1
    roi = np.zeros(g.frames, bool)
    roi[pos] = True
    pslice = Slice(origin=(lo, 0, 0), shape=Shape((hi - lo, *g.shape), sig_dims=2))
    from sparseconverter import NUMPY, SCIPY_CSR

    sparse = not isinstance(data, np.ndarray)
    meta = DataSetMeta(shape=lt_shape(g), array_backends=(SCIPY_CSR if sparse else NUMPY,),
                       image_count=g.frames, raw_dtype=np.dtype(g.dtype))
    part = _PARTITION_CLS(meta, pslice, data, int(np.count_nonzero(roi[:lo])))
    udfs = [type(m).new_for_partition(m._kwargs, part, roi) for m in mains]
    params = UDFParams.from_udfs(udfs=udfs, roi=roi, corrections=corr, tiling_scheme=scheme)
    env = Environment(threads_per_worker=1, threaded_executor=False)
    try:
        return UDFPartRunner(udfs).run_for_partition(part, params, env, None)
    except Exception as e:
        raise UDFError(f"{spec}: processing frames {lo}..{hi - 1} failed: {e!r}") from e


def tiling_scheme(g: ScanGeometry, k: int, mains: List[Any], corr: Any = None,
                  sparse: bool = False) -> Any:
    """The tiling scheme of a partition of ``k`` frames: LiberTEM's Negotiator (UDF
    preferences, cache sizes; tile edges kept off excluded pixels, as for any LiberTEM
    dataset; whole frames for ``sparse``) unless a UDF processes whole partitions."""
    from libertem.common import Shape
    from libertem.io.dataset.base import Negotiator, TilingScheme
    from libertem.udf.base import UDFMethod

    if any(m.get_method() == UDFMethod.PARTITION for m in mains):
        return TilingScheme.make_for_shape(Shape((k, *g.shape), sig_dims=2),
                                           lt_shape(g).flatten_nav(), intent="partition")
    return Negotiator().get_scheme(
        udfs=mains, approx_partition_shape=Shape((k, *g.shape), sig_dims=2),
        dataset=_NegotiationView(lt_shape(g), np.dtype(g.dtype), sparse),
        read_dtype=mains[0].meta.input_dtype, roi=None, corrections=corr)
