"""A UDF analysis's partials, their merge, and its results as LiberTEM makes them.

A :class:`UDFPartial` holds ``nav`` buffers as values at their scan positions and
``sig``/``single`` buffers as they are; ``merge(a, b)`` concatenates the first
(order-free) and combines the second with the UDF's own ``merge(dest, src)``:
associative, inputs never modified. The result (:meth:`UDFResults.results`) is a
main-node UDF prepared as LiberTEM's ``UDFRunner`` does (``allocate_for_full`` with the
valid mask as ROI, ``preprocess``), values placed and merged in, then ``get_results``
(NaN / 0 where no frame came, as outside a ROI); :meth:`UDFResults.write`: ``/udf``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from analyses.errors import UDFError
from analyses.geometry import ScanGeometry
from analyses.udfinputs import UDFInputs
from analyses.udfpart import lt_shape, udf_meta

__all__ = ["UDFPartial", "UDFResults"]


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
        return _mask(frames, [p for p, _ in self.nav])

    def received(self, frames: int) -> np.ndarray:
        """Bool (frames,): frames that reached the analysis, complete or not."""
        return _mask(frames, self.delivered)

    def complete(self, frames: int) -> np.ndarray:
        """Bool (frames,): frames that reached the analysis complete."""
        return _mask(frames, [f[c] for f, c in zip(self.delivered, self.delivered_complete)])

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


class UDFResults:
    """The merge and results of :class:`analyses.udf.UDFAnalysis` (which it is a base of)."""

    classes: List[Any]
    labels: List[str]
    spec: str
    params: Any
    inputs: UDFInputs

    def mains(self, g: ScanGeometry) -> List[Any]:
        raise NotImplementedError

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
        # what allocate_for_full / set_views_for_dataset read of a dataset
        ds = SimpleNamespace(shape=lt_shape(g), get_partitions=lambda: iter(()))
        index = None if roi is None else np.full(g.frames, -1, np.int64)
        if index is not None:
            index[flat_nonzero(roi)] = np.arange(int(valid.sum()))
        out = []
        for i, (cls, main) in enumerate(zip(self.classes, self.mains(g))):
            udf = cls(**main._kwargs)
            udf.set_meta(udf_meta(udf, g, roi, self.inputs.corrections(g, False)[1]))
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
            damage.set_shape_ds(lt_shape(g), roi)
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


def _mask(frames: int, where: List[np.ndarray]) -> np.ndarray:
    out = np.zeros(frames, bool)
    for w in where:
        out[w] = True
    return out


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
