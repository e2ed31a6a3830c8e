"""LiberTEM UDFs as the analysis: run unchanged per partition, merged in our tree.

``--analysis udf:MODULE:CLASS`` (or ``udf:path/file.py:CLASS``; several UDFs
separated by commas run in one pass over the frames, as LiberTEM's
``run_udf(udf=[...])`` does) wraps LiberTEM user-defined functions in the
:class:`analyses.contract.Analysis` contract, so the receiving job and the
offline flow run them where the frames are. How a partition reaches the UDF:

1. ``process_partition(frames, positions, complete)``: the complete frames
   become a LiberTEM :class:`~libertem.io.dataset.base.Partition`
   (:class:`FramesPartition`, in-memory, like LiberTEM-live's partitions over
   received frames) spanning the scan positions ``min..max`` in flat scan
   coordinates, with a ROI that selects exactly the frames present (a stream's
   partition is strided and may have holes). LiberTEM's own
   :class:`~libertem.udf.base.UDFPartRunner` runs it: ``new_for_partition``,
   ``get_task_data``, ``preprocess``, ``process_frame`` / ``process_tile`` /
   ``process_partition`` over full-frame tiles, ``postprocess``, with
   ``self.meta`` (slice, coordinates, ROI, dtypes) as LiberTEM sets it.
2. The partition result becomes a :class:`UDFPartial`: its ``nav`` buffers as
   values at their scan positions, its ``sig`` and ``single`` buffers as they
   are. ``merge(a, b)`` concatenates the nav values (placed by position, so
   order-free) and combines the sig/single buffers with the UDF's own
   ``merge(dest, src)``: associative, so the per-node and cross-node trees may
   merge pairs in any grouping as soon as they are ready. Inputs are never
   modified.
3. The result (:meth:`UDFAnalysis.results`): a main-node UDF as LiberTEM's
   ``UDFRunner`` prepares it (``allocate_for_full`` with the scan's valid mask
   as ROI, ``preprocess``), nav values placed, the merged sig/single buffers
   merged in with ``merge``, then ``get_results`` -- nav buffers shaped as the
   scan (NaN / 0 where no frame came, as LiberTEM does outside a ROI).

Frames that are missing or incomplete are outside the ROI: the result equals
LiberTEM's ``run_udf(..., roi=valid)`` on the same data, and ``/udf/valid``
says which positions are in. A user ROI (``roi=``: a boolean scan mask, or a
``.npy`` file of one) narrows it further: frames outside it never reach the
UDF, so nav buffers hold values only at ROI positions and sig/single buffers
sum over ROI frames only, as ``run_udf(..., roi=roi)``.

Corrections (``corrections=``) are LiberTEM's own
:class:`~libertem.corrections.CorrectionSet`, applied to every tile by the
partition as LiberTEM's datasets do (excluded pixels *patched* with the mean
of their good neighbours, not zeroed; the input dtype becomes at least
float32): ``"detector"`` takes the excluded pixels from the pixel mask the
detector sent at the scan's start (nonzero = excluded, as LiberTEM-live's
``get_correction_data`` reads it; :meth:`UDFAnalysis.use_detector`), a file
or array gives them, a ``CorrectionSet`` is used as it is. What is not supported is refused with
:class:`UDFError` naming the UDF and the feature (see :func:`check_udf`).
LiberTEM is imported only where a UDF runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.contract import Analysis
from analyses.errors import UDFError
from analyses.geometry import ScanGeometry
from analyses.udfinputs import UDFInputs, read_array
from core.table import load_object

__all__ = ["UDFError", "UDFAnalysis", "UDFPartial", "load_udf_analysis", "parse_udf_spec",
           "check_udf", "MaskFactory", "PREFIX"]

#: ``--analysis`` prefix that names LiberTEM UDFs.
PREFIX = "udf:"
_KINDS = ("nav", "sig", "single")


# ---------------------------------------------------------------- loading ----

def parse_udf_spec(spec: str) -> List[Tuple[str, str]]:
    """``udf:MOD:CLS[,MOD2:CLS2]`` -> [(module or file, class name), ...]."""
    body = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    out = []
    for item in body.split(","):
        where, sep, name = item.strip().rpartition(":")
        if not sep or not where or not name.isidentifier():
            raise UDFError(f"--analysis {spec!r}: expected udf:MODULE:CLASS or "
                           "udf:FILE.py:CLASS (comma-separated for several UDFs)")
        out.append((where, name))
    return out


class MaskFactory:
    """A picklable mask factory of :class:`~libertem.udf.masks.ApplyMasksUDF`: one array."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = np.asarray(mask)

    def __call__(self) -> np.ndarray:
        return self.mask


def _load_masks(value: Any, udf_name: str) -> np.ndarray:
    arr = read_array(value, f"{udf_name} masks")
    if arr.ndim == 2:
        arr = arr[np.newaxis]
    if arr.ndim != 3:
        raise UDFError(f"{udf_name}: masks must be (n, rows, cols) or one (rows, cols) mask, "
                       f"got shape {arr.shape}")
    return arr


def _kwargs_for(cls: Any, params: Dict[str, Any]) -> Dict[str, Any]:
    """JSON parameters -> the UDF's keyword arguments (``masks`` for ApplyMasksUDF)."""
    from libertem.udf.masks import ApplyMasksUDF

    kw = dict(params)
    if issubclass(cls, ApplyMasksUDF) and "masks" in kw:
        if "mask_factories" in kw:
            raise UDFError(f"{cls.__name__}: give masks or mask_factories, not both")
        arr = _load_masks(kw.pop("masks"), cls.__name__)
        kw["mask_factories"] = [MaskFactory(m) for m in arr]
    return kw


def check_udf(cls: Any, name: str) -> None:
    """Refuse, naming the UDF and the feature, what this adapter does not run.

    Raises
    ------
    UDFError
        Not a LiberTEM UDF; no ``process_*`` method; no CPU backend.
    """
    from libertem.udf.base import UDF

    if not (isinstance(cls, type) and issubclass(cls, UDF)):
        raise UDFError(f"{name} is not a LiberTEM UDF class (libertem.udf.base.UDF)")
    if not any(callable(getattr(cls, m, None))
               for m in ("process_frame", "process_tile", "process_partition")):
        raise UDFError(f"UDF {name}: no process_frame, process_tile or process_partition")


def _check_instance(udf: Any, name: str) -> None:
    from libertem.udf.base import UDF, _get_canonical_backends
    from sparseconverter import CPU_BACKENDS

    backends = set(_get_canonical_backends(udf.get_backends()))
    if not backends & set(CPU_BACKENDS):
        raise UDFError(f"UDF {name}: backends {sorted(backends)} include no CPU backend "
                       "(GPU-only UDFs are not supported)")
    for k, v in udf._kwargs.items():
        if hasattr(v, "new_for_partition"):
            raise UDFError(f"UDF {name}: parameter {k!r} is aux data (UDF.aux_data); "
                           "per-frame aux data is not supported")
    decls = udf.get_result_buffers()
    for k, b in decls.items():
        if b.kind not in _KINDS:
            raise UDFError(f"UDF {name}: buffer {k!r} has kind {b.kind!r}; "
                           f"supported: {', '.join(_KINDS)}")
    if udf.requires_custom_merge and type(udf).merge is UDF.merge:
        raise UDFError(f"UDF {name}: sig/single buffers but no merge(dest, src)")


def load_udf_analysis(spec: str, params: Any = None, roi: Any = None,
                      corrections: Any = None) -> UDFAnalysis:
    """The :class:`UDFAnalysis` of ``udf:MODULE:CLASS[,...]``.

    Parameters
    ----------
    spec : str
    params : dict or list of dict, optional
        Keyword arguments of the UDF (a list: one dict per UDF). For
        ``ApplyMasksUDF``, ``masks`` may be a ``FILE.npy``, ``FILE.h5:/dataset``
        or nested lists ``(n, rows, cols)``.
    roi : array or str, optional
        A user ROI (:func:`analyses.udfinputs.load_roi`): only frames where it is True
        reach the UDFs.
    corrections : str, array or CorrectionSet, optional
        ``"none"`` (default), ``"detector"`` (the scan's pixel mask, from the
        detector), a pixel-mask file (``FILE.npy``, ``FILE.h5:/dataset``) or array
        (nonzero = excluded), or a LiberTEM ``CorrectionSet``.

    Raises
    ------
    UDFError
        The module or class cannot be loaded, the parameters do not fit, the
        UDF uses a feature that is not supported, or the ROI or mask does not load.
    """
    try:
        import libertem.udf.base  # noqa: F401
    except ImportError as e:
        raise UDFError("--analysis udf:... needs LiberTEM: pip install 'mpistage[libertem]'"
                       ) from e
    names = parse_udf_spec(spec)
    if params is None:
        plist: List[Dict[str, Any]] = [{} for _ in names]
    elif isinstance(params, dict):
        plist = [params] if len(names) == 1 else [dict(params) for _ in names]
    else:
        plist = [dict(p) for p in params]
    if len(plist) != len(names):
        raise UDFError(f"{spec}: {len(names)} UDFs but {len(plist)} parameter sets")
    classes, kwargs = [], []
    for (where, name), p in zip(names, plist):
        try:
            cls = load_object(f"{where}:{name}")
        except Exception as e:
            raise UDFError(f"cannot import the UDF {where}:{name}: {e}") from e
        check_udf(cls, name)
        kw = _kwargs_for(cls, p)
        try:
            cls(**kw)
        except Exception as e:
            raise UDFError(f"UDF {name}({', '.join(sorted(kw))}): {e!r}") from e
        classes.append(cls)
        kwargs.append(kw)
    return UDFAnalysis(classes, kwargs, spec=spec, params=params if params is not None else {},
                       roi=roi, corrections=corrections)


# -------------------------------------------------------------- partition ----

def _partition_class() -> Any:
    from libertem.io.dataset.base import DataTile, Partition
    from libertem.common import Shape, Slice

    class FramesPartition(Partition):
        """Frames held in memory (already in position order, ROI frames only)."""

        def __init__(self, meta: Any, partition_slice: Any, data: np.ndarray,
                     roi_origin: int) -> None:
            super().__init__(meta=meta, partition_slice=partition_slice, io_backend=None,
                             decoder=None)
            self._data = data
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


class _DataSetShape:
    """What ``allocate_for_full`` / ``set_views_for_dataset`` read of a dataset."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape

    def get_partitions(self) -> Any:
        return iter(())


class _NegotiationView:
    """What LiberTEM's tile-shape Negotiator asks of a dataset (in-memory frames)."""

    def __init__(self, shape: Any, raw_dtype: np.dtype) -> None:
        self.shape, self.raw_dtype = shape, raw_dtype

    def get_min_sig_size(self) -> int:
        return 4 * 4096 // self.raw_dtype.itemsize

    def need_decode(self, read_dtype: Any, roi: Any, corrections: Any) -> bool:
        return True

    def adjust_tileshape(self, tileshape: Any, roi: Any) -> Any:
        return tileshape

    def get_max_io_size(self) -> Optional[int]:
        return None

    def get_base_shape(self, roi: Any) -> Tuple[int, ...]:
        return (1, 1, int(self.shape.sig[-1]))


# ---------------------------------------------------------------- partial ----

@dataclass
class UDFPartial:
    """Merged-so-far results of one scan (plain data, picklable, small).

    ``nav`` holds (positions, per-UDF {buffer: values}) chunks; ``agg`` the
    per-UDF {buffer: array} of sig/single buffers merged so far (None: nothing
    yet); ``delivered`` / ``delivered_complete`` which frames reached the
    analysis and whether whole (the accounting of the offline path).
    """

    geometry: Optional[ScanGeometry] = None
    nav: List[Tuple[np.ndarray, List[Dict[str, np.ndarray]]]] = field(default_factory=list)
    agg: Optional[List[Dict[str, np.ndarray]]] = None
    delivered: List[np.ndarray] = field(default_factory=list)
    delivered_complete: List[np.ndarray] = field(default_factory=list)

    def seen(self, frames: int) -> np.ndarray:
        """Bool (frames,): positions whose result is in (the valid mask)."""
        out = np.zeros(frames, bool)
        for p, _ in self.nav:
            out[p] = True
        return out

    def received(self, frames: int) -> np.ndarray:
        """Bool (frames,): frames that reached the analysis, complete or not."""
        out = np.zeros(frames, bool)
        for f in self.delivered:
            out[f] = True
        return out

    def complete(self, frames: int) -> np.ndarray:
        """Bool (frames,): frames that reached the analysis complete."""
        out = np.zeros(frames, bool)
        for f, c in zip(self.delivered, self.delivered_complete):
            out[f[c]] = True
        return out

    def compact(self) -> UDFPartial:
        """One nav chunk and one delivered chunk (fewer objects to pickle and send)."""
        if len(self.nav) <= 1 and len(self.delivered) <= 1:
            return self
        nav = self.nav
        if len(nav) > 1:
            pos = np.concatenate([p for p, _ in nav])
            vals = [{k: np.concatenate([c[1][i][k] for c in nav]) for k in nav[0][1][i]}
                    for i in range(len(nav[0][1]))]
            nav = [(pos, vals)]
        fr = [np.concatenate(self.delivered)] if self.delivered else []
        co = [np.concatenate(self.delivered_complete)] if self.delivered_complete else []
        return UDFPartial(self.geometry, nav, self.agg, fr, co)


# --------------------------------------------------------------- analysis ----

class UDFAnalysis(Analysis):
    """LiberTEM UDFs behind the analysis contract (see the module docstring).

    Parameters
    ----------
    classes : list of UDF classes
    kwargs : list of dict
        Keyword arguments of each class.
    spec, params
        What the user gave (recorded in the output file).
    roi : array or str, optional
        User ROI (:func:`analyses.udfinputs.load_roi`).
    corrections : str, array or CorrectionSet, optional
        See :func:`load_udf_analysis`.
    """

    name = "udf"

    def __init__(self, classes: Sequence[Any], kwargs: Sequence[Dict[str, Any]],
                 spec: str = "", params: Any = None, roi: Any = None,
                 corrections: Any = None) -> None:
        self.classes = list(classes)
        self.kwargs = [dict(k) for k in kwargs]
        self.spec, self.params = spec, params
        self.labels = _labels(self.classes)
        self._main: Dict[Tuple[Any, ...], List[Any]] = {}
        self._schemes: Dict[Tuple[Any, ...], Any] = {}
        self._geometry: Optional[ScanGeometry] = None
        self.inputs = UDFInputs(spec, roi, corrections)

    # ---- ROI and corrections (analyses.udfinputs) ----
    @property
    def needs_detector(self) -> bool:  # type: ignore[override]
        """``corrections="detector"``: the job hands each scan's pixel mask to
        :meth:`use_detector` before its first partition."""
        return self.inputs.needs_detector

    def use_detector(self, scan: str, pixel_mask: Optional[np.ndarray]) -> None:
        """The pixel mask the detector sent at ``scan``'s start (None: it sent none)."""
        self.inputs.use_detector(scan, pixel_mask)

    def corrections(self, g: ScanGeometry, strict: bool = True) -> Any:
        """LiberTEM's ``CorrectionSet`` of scan ``g`` (:meth:`UDFInputs.corrections`)."""
        return self.inputs.corrections(g, strict)[1]

    # ---- LiberTEM objects ----
    def _shape(self, g: ScanGeometry) -> Any:
        from libertem.common import Shape

        return Shape((*g.scan_shape, *g.shape), sig_dims=2)

    def _meta(self, g: ScanGeometry) -> Any:
        from libertem.io.dataset.base import DataSetMeta

        return DataSetMeta(shape=self._shape(g), array_backends=("numpy",),
                           image_count=g.frames, raw_dtype=np.dtype(g.dtype))

    def _udf_meta(self, udf: Any, g: ScanGeometry, roi: Optional[np.ndarray]) -> Any:
        from libertem.udf.base import UDFMeta, _get_dtype

        corr = self.corrections(g, strict=False)
        dtype = _get_dtype([udf], np.dtype(g.dtype), corr, ("numpy",))
        return UDFMeta(partition_slice=None, dataset_shape=self._shape(g), roi=roi,
                       dataset_dtype=np.dtype(g.dtype), input_dtype=dtype, corrections=corr)

    def mains(self, g: ScanGeometry) -> List[Any]:
        """Main-node instances for ``g`` (``merge`` runs on them), checked once."""
        key = (tuple(g.scan_shape), tuple(g.shape), g.dtype)
        m = self._main.get(key)
        if m is None:
            m = []
            for cls, kw, label in zip(self.classes, self.kwargs, self.labels):
                udf = cls(**kw)
                udf.set_meta(self._udf_meta(udf, g, None))
                _check_instance(udf, label)
                m.append(udf)
            self._main[key] = m
        return m

    @property
    def duplicates_safe(self) -> bool:  # type: ignore[override]
        """Only ``nav`` buffers: a frame analysed twice is placed twice at its position."""
        if self._geometry is None:
            return False
        return all(b.kind == "nav" for udf in self.mains(self._geometry)
                   for b in udf.get_result_buffers().values())

    # ---- the hooks ----
    def prepare(self, geometry: ScanGeometry) -> None:
        if len(geometry.shape) != 2:
            raise UDFError(f"{self.spec}: frames of shape {geometry.shape}; only 2-D frames")
        self.inputs.roi_flat(geometry)
        self.corrections(geometry)            # the mask fits the frames, patches
        self.mains(geometry)
        self._geometry = geometry

    def empty(self) -> UDFPartial:
        return UDFPartial()

    def live(self, partial: UDFPartial) -> UDFPartial:
        return partial

    def process_partition(self, frames: np.ndarray, positions: np.ndarray,
                          complete: np.ndarray) -> UDFPartial:
        g = self._geometry
        if g is None:
            raise UDFError(f"{self.spec}: process_partition before prepare(geometry)")
        positions = np.asarray(positions, np.int64)
        complete = np.asarray(complete, bool)
        out = UDFPartial(g, delivered=[positions.copy()], delivered_complete=[complete.copy()])
        roi = self.inputs.roi_flat(g)
        take = complete if roi is None else complete & roi[positions]
        if take.all() and (len(positions) < 2 or (np.diff(positions) > 0).all()):
            # the usual case: the frames are not copied (the positions are: kept)
            pos, data = positions.copy(), np.asarray(frames)
        else:
            complete = take
            pos = positions[complete]
            order = np.argsort(pos, kind="stable")
            pos, data = pos[order], np.asarray(frames)[complete][order]
        if not len(pos):
            return out
        results = self._run(g, data, pos)
        mains = self.mains(g)
        nav_vals: List[Dict[str, np.ndarray]] = []
        agg: List[Dict[str, np.ndarray]] = []
        for udf, res in zip(mains, results):
            decls = udf.get_result_buffers()
            nv: Dict[str, np.ndarray] = {}
            ag: Dict[str, np.ndarray] = {}
            for k, buf in res.items():
                if not buf.has_data():
                    continue
                arr = np.array(buf.raw_data)     # a copy: the runner's memory is reused
                (nv if decls[k].kind == "nav" else ag)[k] = arr
            nav_vals.append(nv)
            agg.append(ag)
        out.nav = [(pos, nav_vals)]
        out.agg = agg
        return out

    def _run(self, g: ScanGeometry, data: np.ndarray, pos: np.ndarray) -> Any:
        """LiberTEM's part runner over one :class:`FramesPartition`."""
        global _PARTITION_CLS
        from libertem.common import Shape, Slice
        from libertem.common.executor import Environment
        from libertem.udf.base import UDFParams, UDFPartRunner

        if _PARTITION_CLS is None:
            _PARTITION_CLS = _partition_class()
        lo, hi = int(pos[0]), int(pos[-1]) + 1
        roi = np.zeros(g.frames, bool)
        roi[pos] = True
        pslice = Slice(origin=(lo, 0, 0), shape=Shape((hi - lo, *g.shape), sig_dims=2))
        part = _PARTITION_CLS(self._meta(g), pslice, data, int(np.count_nonzero(roi[:lo])))
        mains = self.mains(g)
        udfs = [type(m).new_for_partition(m._kwargs, part, roi) for m in mains]
        ckey, corr = self.inputs.corrections(g)
        scheme = self._scheme(g, len(data), mains, ckey, corr)
        params = UDFParams.from_udfs(udfs=udfs, roi=roi, corrections=corr,
                                     tiling_scheme=scheme)
        env = Environment(threads_per_worker=1, threaded_executor=False)
        try:
            return UDFPartRunner(udfs).run_for_partition(part, params, env, None)
        except Exception as e:
            raise UDFError(f"{self.spec}: processing frames {lo}..{hi - 1} failed: {e!r}") from e

    def _scheme(self, g: ScanGeometry, k: int, mains: List[Any], ckey: Any = None,
                corr: Any = None) -> Any:
        """The tiling scheme of a partition of ``k`` frames: LiberTEM's Negotiator (UDF
        preferences, cache sizes; tile edges kept off excluded pixels, as for any
        LiberTEM dataset) unless a UDF processes whole partitions."""
        from libertem.common import Shape
        from libertem.io.dataset.base import Negotiator, TilingScheme
        from libertem.udf.base import UDFMethod

        key = (tuple(g.shape), g.dtype, k, ckey)
        scheme = self._schemes.get(key)
        if scheme is not None:
            return scheme
        if any(m.get_method() == UDFMethod.PARTITION for m in mains):
            scheme = TilingScheme.make_for_shape(Shape((k, *g.shape), sig_dims=2),
                                                 self._shape(g).flatten_nav(),
                                                 intent="partition")
        else:
            scheme = Negotiator().get_scheme(
                udfs=mains, approx_partition_shape=Shape((k, *g.shape), sig_dims=2),
                dataset=_NegotiationView(self._shape(g), np.dtype(g.dtype)),
                read_dtype=mains[0].meta.input_dtype, roi=None, corrections=corr)
        self._schemes[key] = scheme
        return scheme

    def merge(self, a: UDFPartial, b: UDFPartial) -> UDFPartial:
        g = a.geometry or b.geometry
        out = UDFPartial(g, a.nav + b.nav, None, a.delivered + b.delivered,
                         a.delivered_complete + b.delivered_complete)
        if a.agg is None or b.agg is None:
            out.agg = a.agg if b.agg is None else b.agg
            return out
        assert g is not None
        merged = []
        for udf, da, db in zip(self.mains(g), a.agg, b.agg):
            dest = {k: v.copy() for k, v in da.items()}
            self._merge(udf, dest, db)
            merged.append(dest)
        out.agg = merged
        return out

    def _merge(self, udf: Any, dest: Dict[str, np.ndarray], src: Dict[str, np.ndarray]) -> None:
        """``udf.merge`` on the sig/single buffers ``dest`` <- ``src`` (nav: empty views)."""
        from libertem.udf.base import MergeAttrMapping

        decls = udf.get_result_buffers()
        d, s = dict(dest), dict(src)
        for k, b in decls.items():
            if b.kind == "nav" and b.use != "result_only":
                empty = np.zeros((0, *b.extra_shape), b.dtype)
                d.setdefault(k, empty)
                s.setdefault(k, empty.copy())
        udf.meta.set_valid_nav_mask(None)
        udf.merge(dest=MergeAttrMapping(d), src=MergeAttrMapping(s))

    # ---- results ----
    def results(self, partial: UDFPartial, geometry: Optional[ScanGeometry] = None
                ) -> List[Dict[str, Any]]:
        """Per UDF, ``{buffer: LiberTEM result buffer}`` as ``get_results`` makes them."""
        from libertem.common.buffers import BufferWrapper
        from libertem.common.math import flat_nonzero

        g = partial.geometry or geometry
        if g is None:
            raise UDFError(f"{self.spec}: no geometry (no partition was processed)")
        valid = partial.seen(g.frames)
        roi = None if valid.all() else valid
        ds = _DataSetShape(self._shape(g))
        index = None if roi is None else np.full(g.frames, -1, np.int64)
        if index is not None:
            index[flat_nonzero(roi)] = np.arange(int(valid.sum()))
        out = []
        for i, (cls, main) in enumerate(zip(self.classes, self.mains(g))):
            udf = cls(**main._kwargs)
            udf.set_meta(self._udf_meta(udf, g, roi))
            udf.init_result_buffers()
            udf.allocate_for_full(ds, roi)
            if hasattr(udf, "preprocess"):
                udf.set_views_for_dataset(ds)
                udf.preprocess()
                udf.clear_views()
            for pos, vals in partial.nav:
                where = pos if index is None else index[pos]
                for k, v in vals[i].items():
                    udf.results.get_buffer(k).raw_data[where] = v
            if partial.agg is not None:
                dest = {k: udf.results.get_buffer(k).raw_data for k in partial.agg[i]}
                self._merge(udf, dest, partial.agg[i])
            damage = BufferWrapper(kind="nav", dtype=bool)
            damage.set_shape_ds(self._shape(g), roi)
            damage.allocate()
            damage.raw_data[:] = True
            udf.meta.set_valid_nav_mask(damage.raw_data)
            udf.clear_views()
            try:
                res = dict(udf._do_get_results())
            except Exception as e:
                raise UDFError(f"UDF {self.labels[i]}: get_results failed: {e!r}") from e
            out.append(res)
        return out

    def arrays(self, partial: UDFPartial, geometry: Optional[ScanGeometry] = None
               ) -> Dict[str, Tuple[str, np.ndarray]]:
        """``{name: (kind, array)}``: every result buffer (``LABEL/name`` for several UDFs)."""
        res = self.results(partial, geometry)
        out: Dict[str, Tuple[str, np.ndarray]] = {}
        for label, r in zip(self.labels, res):
            for k, buf in r.items():
                name = k if len(self.labels) == 1 else f"{label}/{k}"
                out[name] = (buf.kind, np.asarray(buf.data))
        return out

    def images(self, partial: Any, geometry: ScanGeometry) -> Dict[str, np.ndarray]:
        """The 2-D result buffers, scan-shaped ones first (live PUB, snapshot, PNG)."""
        if partial is None or partial.geometry is None:
            return {}
        return _images(self.arrays(partial, geometry), geometry)

    def live_images(self, partial: Any, geometry: ScanGeometry
                    ) -> Tuple[Dict[str, np.ndarray], Optional[Dict[str, Any]]]:
        """What a live message carries for viewers: :meth:`images`, then every other
        result buffer as ``udf:<name>``; and which buffer of which UDF each one is
        (``{"sig_shape", "udfs": [{"label", "buffers": {name: {"kind", "extra_shape",
        "image"}}}]}``, the header's ``udf``), from which a viewer rebuilds LiberTEM's
        ``UDFResults`` (:meth:`streams.view.Partial.udf_results`)."""
        if partial is None or partial.geometry is None:
            return {}, None
        arrs = self.arrays(partial, geometry)
        out = _images(arrs, geometry)
        udfs: List[Dict[str, Any]] = [{"label": lb, "buffers": {}} for lb in self.labels]
        nav, sig = len(geometry.scan_shape), len(geometry.shape)
        for name, (kind, a) in arrs.items():
            key = name.replace("/", "_")
            if key not in out or out[key] is not a:
                key = f"udf:{name}"
                out[key] = a
            label, buf = name.split("/", 1) if len(self.labels) > 1 else (self.labels[0], name)
            dims = {"nav": nav, "sig": sig}.get(kind, 0)
            udfs[self.labels.index(label)]["buffers"][buf] = {
                "kind": kind, "image": key, "extra_shape": list(a.shape[dims:])}
        return out, {"sig_shape": list(geometry.shape), "udfs": udfs}

    def write(self, h5: Any, partial: Any, geometry: ScanGeometry) -> None:
        """``/udf/<buffer>`` (or ``/udf/<UDF>/<buffer>``), dtype kept, and ``/udf/valid``."""
        grp = h5.create_group("udf")
        grp.attrs["spec"] = self.spec
        grp.attrs["params"] = json.dumps(self.params, default=_plain)
        grp.attrs["classes"] = [f"{c.__module__}.{c.__qualname__}" for c in self.classes]
        grp.attrs["corrections"] = str(self.inputs.corrections_source or "none")
        roi = self.inputs.roi_flat(geometry)
        if roi is not None:
            grp.attrs["roi"] = str(self.inputs.roi_source)
            grp.create_dataset("roi", data=roi.reshape(geometry.scan_shape))
        if partial is None or partial.geometry is None:
            grp.attrs["empty"] = True
            grp.create_dataset("valid", data=np.zeros(geometry.scan_shape, bool))
            return
        for name, (kind, arr) in self.arrays(partial, geometry).items():
            d = grp.create_dataset(name, data=arr)
            d.attrs["kind"] = kind
        grp.create_dataset("valid", data=partial.seen(geometry.frames).reshape(
            geometry.scan_shape))


def _images(arrs: Dict[str, Tuple[str, np.ndarray]], geometry: ScanGeometry
            ) -> Dict[str, np.ndarray]:
    """The 2-D ones of ``arrs``, scan-shaped first, ``/`` in names as ``_``."""
    scan = {n.replace("/", "_"): a for n, (k, a) in arrs.items()
            if a.ndim == 2 and tuple(a.shape) == tuple(geometry.scan_shape)}
    other = {n.replace("/", "_"): a for n, (k, a) in arrs.items()
             if a.ndim == 2 and n.replace("/", "_") not in scan}
    return {**scan, **other}


def _labels(classes: Sequence[Any]) -> List[str]:
    out: List[str] = []
    for c in classes:
        base, n = c.__name__, 2
        name = base
        while name in out:
            name, n = f"{base}_{n}", n + 1
        out.append(name)
    return out


def _plain(x: Any) -> Any:
    return f"<array {x.shape} {x.dtype}>" if isinstance(x, np.ndarray) else repr(x)
