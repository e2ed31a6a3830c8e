"""LiberTEM UDFs as the analysis: run unchanged per partition, merged in our tree.

``--analysis udf:MODULE:CLASS`` (or ``udf:path/file.py:CLASS``; several UDFs
separated by commas run in one pass over the frames, as LiberTEM's
``run_udf(udf=[...])`` does) wraps LiberTEM user-defined functions in the
:class:`analyses.contract.Analysis` contract, so the receiving job and the
offline flow run them where the frames are: loading and checking the UDFs here,
``process_partition`` through LiberTEM's own part runner (:mod:`analyses.udfpart`),
partials, merge and results as LiberTEM makes them (:mod:`analyses.udfresults`).

Missing or incomplete frames are outside the ROI: the result equals LiberTEM's
``run_udf(..., roi=valid)``, ``/udf/valid`` says which positions are in; a user ROI
(``roi=``, a boolean scan mask or a ``.npy`` of one) narrows it, as ``run_udf(...,
roi=roi)``. Corrections (``corrections=``) are LiberTEM's own ``CorrectionSet``
(excluded pixels *patched*, input dtype at least float32): ``"detector"`` takes the
pixel mask the detector sent at the scan's start (nonzero = excluded, as
LiberTEM-live's ``get_correction_data``; :meth:`UDFAnalysis.use_detector`), a file or
array gives it. What is not supported is refused with :class:`UDFError` naming the UDF
and the feature (:func:`check_udf`). LiberTEM is imported only where a UDF runs.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.contract import Analysis
from analyses.errors import UDFError
from analyses.geometry import ScanGeometry
from analyses.udfinputs import UDFInputs, read_array
from analyses.sparse import CSRFrames
from analyses.udfpart import as_scipy, run_partition, takes_sparse, tiling_scheme, udf_meta
from analyses.udfresults import UDFPartial, UDFResults, _labels
from core.table import load_object

__all__ = ["UDFError", "UDFAnalysis", "UDFPartial", "load_udf_analysis", "parse_udf_spec",
           "check_udf", "PREFIX"]

#: ``--analysis`` prefix that names LiberTEM UDFs.
PREFIX = "udf:"
_KINDS = ("nav", "sig", "single")


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


def _kwargs_for(cls: Any, params: Dict[str, Any]) -> Dict[str, Any]:
    """JSON parameters -> the UDF's keyword arguments (``masks`` for ApplyMasksUDF)."""
    from libertem.udf.masks import ApplyMasksUDF

    kw = dict(params)
    if issubclass(cls, ApplyMasksUDF) and "masks" in kw:
        if "mask_factories" in kw:
            raise UDFError(f"{cls.__name__}: give masks or mask_factories, not both")
        arr = read_array(kw.pop("masks"), f"{cls.__name__} masks")
        arr = arr[np.newaxis] if arr.ndim == 2 else arr
        if arr.ndim != 3:
            raise UDFError(f"{cls.__name__}: masks must be (n, rows, cols) or one (rows, "
                           f"cols) mask, got shape {arr.shape}")
        kw["mask_factories"] = [functools.partial(np.asarray, m) for m in arr]   # picklable
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


# --------------------------------------------------------------- analysis ----

class UDFAnalysis(UDFResults, Analysis):
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

    def mains(self, g: ScanGeometry) -> List[Any]:
        """Main-node instances for ``g`` (``merge`` runs on them), checked once."""
        key = (tuple(g.scan_shape), tuple(g.shape), g.dtype)
        m = self._main.get(key)
        if m is None:
            m = []
            for cls, kw, label in zip(self.classes, self.kwargs, self.labels):
                udf = cls(**kw)
                udf.set_meta(udf_meta(udf, g, None, self.corrections(g, strict=False)))
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

    @property
    def sparse(self) -> bool:  # type: ignore[override]
        """CSR partitions as they are, as LiberTEM's sparse tiles, when a UDF takes them
        (:func:`~analyses.udfpart.takes_sparse`); dense frames otherwise."""
        g = self._geometry
        return g is not None and takes_sparse(self.mains(g), self.corrections(g, False))

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
        sparse = isinstance(frames, CSRFrames) and self.sparse
        data = as_scipy(frames) if sparse else np.asarray(frames)
        if take.all() and (len(positions) < 2 or (np.diff(positions) > 0).all()):
            pos = positions.copy()     # the usual case: the frames are not copied
        else:
            sel = np.flatnonzero(take)
            order = sel[np.argsort(positions[sel], kind="stable")]
            pos, data = positions[order], data[order]
        if not len(pos):
            return out
        mains = self.mains(g)
        ckey, corr = self.inputs.corrections(g)
        results = run_partition(self.spec, mains, g, data, pos, corr,
                                self._scheme(g, data.shape[0], mains, ckey, corr, sparse))
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

    def _scheme(self, g: ScanGeometry, k: int, mains: List[Any], ckey: Any = None,
                corr: Any = None, sparse: bool = False) -> Any:
        """:func:`~analyses.udfpart.tiling_scheme` of ``k`` frames, kept per shape."""
        key = (tuple(g.shape), g.dtype, k, ckey, sparse)
        if key not in self._schemes:
            self._schemes[key] = tiling_scheme(g, k, mains, corr, sparse)
        return self._schemes[key]
