"""UDFs and data shared by the UDF adapter's tests (unit, MPI, end to end).

:class:`PosUDF` is the UDF "written in the test": a ``nav`` buffer, a ``sig``
buffer with its own ``merge``, ``get_task_data``, ``preprocess`` and
``postprocess``, a ``single`` buffer with ``extra_shape`` and ``get_results``.
:func:`reference` runs the same UDFs through LiberTEM's own
``Context.make_with("inline").run_udf``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from libertem.udf.base import UDF

SCAN = (8, 8)
FRAME = (32, 32)

#: (spec, JSON parameters) of the UDFs the tests run through our path.
SPECS: List[Tuple[str, Dict[str, Any]]] = [
    ("libertem.udf.sum:SumUDF", {}),
    ("libertem.udf.sumsigudf:SumSigUDF", {}),
    ("libertem.udf.stddev:StdDevUDF", {}),
    ("libertem.udf.masks:ApplyMasksUDF", {"masks": "MASKS"}),   # path filled in by the test
    ("tests.udf_cases:PosUDF", {"scale": 2.0}),
    ("tests.udf_cases:PartUDF", {}),
]


class PosUDF(UDF):
    """Per frame: scaled frame sum at (y, x) (nav), a weighted frame sum (sig, merged
    by hand), frames seen and a value from get_task_data (single, extra_shape)."""

    def __init__(self, scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(scale=scale, **kwargs)

    def get_task_data(self) -> Dict[str, Any]:
        return {"weight": np.full(self.meta.dataset_shape.sig, self.params.scale, np.float64)}

    def get_result_buffers(self) -> Dict[str, Any]:
        return {
            "value": self.buffer(kind="nav", dtype=np.float64),
            "where": self.buffer(kind="nav", extra_shape=(2,), dtype=np.int64),
            "weighted": self.buffer(kind="sig", dtype=np.float64),
            "stats": self.buffer(kind="single", extra_shape=(2,), dtype=np.int64),
            "mean_frame": self.buffer(kind="sig", dtype=np.float64, use="result_only"),
        }

    def preprocess(self) -> None:
        self.results.stats[:] = 0

    def process_frame(self, frame: np.ndarray) -> None:
        self.results.value[:] = self.params.scale * frame.sum()
        self.results.where[:] = self.meta.coordinates[0]
        self.results.weighted[:] += frame * self.task_data.weight
        self.results.stats[0] += 1

    def postprocess(self) -> None:
        self.results.stats[1] = self.results.stats[0]    # once per partition

    def merge(self, dest: Any, src: Any) -> None:
        dest.value[:] = src.value
        dest.where[:] = src.where
        dest.weighted[:] += src.weighted
        dest.stats[:] += src.stats

    def get_results(self) -> Dict[str, np.ndarray]:
        n = max(int(self.results.stats[0]), 1)
        return {"value": self.results.value, "where": self.results.where,
                "weighted": self.results.weighted, "mean_frame":
                self.results.weighted / self.params.scale / n,
                "stats": self.results.stats}


class PartUDF(UDF):
    """``process_partition``: the brightest pixel per frame (nav), the sum frame (sig)."""

    def get_result_buffers(self) -> Dict[str, Any]:
        return {"peak": self.buffer(kind="nav", dtype=np.float32),
                "total": self.buffer(kind="sig", dtype=np.float64)}

    def process_partition(self, partition: np.ndarray) -> None:
        self.results.peak[:] = partition.reshape(len(partition), -1).max(axis=1)
        self.results.total[:] += partition.sum(axis=0)

    def merge(self, dest: Any, src: Any) -> None:
        dest.peak[:] = src.peak
        dest.total[:] += src.total


def frames(seed: int = 0) -> np.ndarray:
    """(ny*nx, rows, cols) uint16 synthetic 4D-STEM frames."""
    from streams.simulate import synthetic_frame

    F = SCAN[0] * SCAN[1]
    return np.stack([synthetic_frame(i, FRAME, SCAN, seed=seed) for i in range(F)])


def masks() -> np.ndarray:
    """Three float32 masks: a disk, a ring, a random field."""
    yy, xx = np.mgrid[:FRAME[0], :FRAME[1]]
    r = np.hypot(yy - FRAME[0] / 2, xx - FRAME[1] / 2)
    rnd = np.random.default_rng(5).random(FRAME)
    return np.stack([r < 4, (r >= 6) & (r < 14), rnd]).astype(np.float32)


def make_udf(spec: str, params: Dict[str, Any]) -> Any:
    """The LiberTEM UDF object of ``spec`` for LiberTEM's own run."""
    import importlib

    from analyses.udf import _kwargs_for

    mod, _, name = spec.rpartition(":")
    cls = getattr(importlib.import_module(mod), name)
    return cls(**_kwargs_for(cls, params))


def reference(specs: List[Tuple[str, Dict[str, Any]]], data: np.ndarray,
              valid: Optional[np.ndarray] = None) -> List[Dict[str, np.ndarray]]:
    """LiberTEM inline results of each UDF (``roi=valid`` when some frames are missing)."""
    from libertem.api import Context

    ctx = Context.make_with("inline")
    ds = ctx.load("memory", data=data.reshape(*SCAN, *FRAME), sig_dims=2)
    roi = None if valid is None or valid.all() else valid.reshape(SCAN)
    res = ctx.run_udf(ds, [make_udf(s, p) for s, p in specs], roi=roi)
    return [{k: np.asarray(v.data) for k, v in r.items()} for r in res]


def compare(ref: Dict[str, np.ndarray], got: Dict[str, np.ndarray], what: str) -> List[str]:
    """Differences (empty: equal within float tolerance, same dtype and shape)."""
    bad = []
    for k, x in ref.items():
        if k not in got:
            bad.append(f"{what}: no buffer {k}")
            continue
        y = got[k]
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"{what}/{k}: {y.shape} {y.dtype}, LiberTEM {x.shape} {x.dtype}")
        elif not np.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            bad.append(f"{what}/{k}: max difference {np.nanmax(np.abs(x - y))}")
    return bad
