"""What a viewer's handle (:class:`streams.view.client.LiveJob`) gives back: a scan's
partial result (:class:`Partial`), one position's frame (:class:`Frame`), and the two
errors that end a wait without them (:class:`JobEnded`, :class:`FrameRefused`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from streams.errors import StreamError

__all__ = ["Partial", "Frame", "JobEnded", "FrameRefused", "failed_end"]


class JobEnded(StreamError):
    """The job ended (or its live socket went away) before what was waited for came."""


class FrameRefused(StreamError):
    """The job did not send the frame asked for; :attr:`refused` says why
    (:data:`streams.job.frames.OUTCOMES`: ``not_held``, ``too_large``, ``rate``, ...)."""

    def __init__(self, message: str, refused: str) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class Frame:
    """One scan position's frame as the job still held it (:meth:`LiveJob.frame`):
    ``where`` ``"memory"`` or ``"spill"``; ``complete`` every sector arrived."""

    scan: str
    index: int
    data: np.ndarray
    complete: bool
    where: str


def failed_end(progress: Dict[str, Any]) -> Optional[str]:
    """Why a scan's final message says its end failed (``progress``: ``failed``, the
    drain's sentence, or ``served`` false), or None."""
    if progress.get("failed"):
        return str(progress["failed"])
    if progress.get("served") is False:
        return "not served: frames missing (its report says which)"
    return None


@dataclass(frozen=True)
class Partial:
    """One partial (or the final) result of a scan, as the job published it.

    ``t`` is when the job took it; ``final`` the merged result written to
    ``OUT/<scan>.h5``; ``progress`` the job's figures (``docs/stream-protocol.md``
    section 9); ``images`` each 2-D buffer (read-only); ``valid`` True where a
    position's result is in.
    """

    scan: str
    t: float
    final: bool
    progress: Dict[str, Any]
    images: Dict[str, np.ndarray]
    valid: np.ndarray
    received: float = field(default=0.0, compare=False)   # time.time() when it arrived
    udf: Optional[Dict[str, Any]] = field(default=None, compare=False)

    @property
    def failed(self) -> Optional[str]:
        """Why the scan's end failed (a final message of a scan not served, or not
        drained: its results kept elsewhere, the sentence says where), else None."""
        return failed_end(self.progress) if self.final else None

    def udf_results(self) -> Any:
        """A LiberTEM UDF's buffers as ``run_udf_iter`` yields them (``.buffers``,
        ``.damage``); StreamError when the job's analysis is not a UDF."""
        from libertem.common.buffers import PreallocBufferWrapper
        from libertem.common.shape import Shape
        from libertem.udf.base import UDFResults

        if not self.udf:
            raise StreamError(f"scan {self.scan!r}: the job's analysis is not a LiberTEM "
                              "UDF (--analysis udf:...): use .images")
        nav = tuple(self.valid.shape)
        sig = tuple(int(n) for n in self.udf["sig_shape"])
        ds = Shape(nav + sig, sig_dims=len(sig))

        def wrap(data: np.ndarray, kind: str, extra: Sequence[int] = ()) -> Any:
            b = PreallocBufferWrapper(data, kind=kind, extra_shape=tuple(extra),
                                      dtype=data.dtype)
            b.set_shape_ds(ds, None)
            return b

        buffers = [{name: wrap(self.images[b["image"]], b["kind"], b["extra_shape"])
                    for name, b in u["buffers"].items() if b["image"] in self.images}
                   for u in self.udf["udfs"]]
        return UDFResults(buffers, wrap(self.valid, "nav"))

    @property
    def frames(self) -> int:
        return int(self.progress.get("frames", 0))

    @property
    def complete(self) -> int:
        return int(self.progress.get("complete", 0))

    @property
    def missing(self) -> int:
        """Frames not (wholly) in: incomplete ones and those not arrived."""
        return int(self.progress.get("incomplete", 0) + self.progress.get("not_arrived", 0))

    @property
    def rejected(self) -> int:
        return int(self.progress.get("rejected", 0))

    @property
    def nodes(self) -> List[Dict[str, Any]]:
        """Per receiver: ``receiver``, ``node`` (index), ``frames`` (routed to it),
        ``complete``, ``incomplete``, ``not_arrived``, ``rejected``, ``refused``,
        ``closed``."""
        return list(self.progress.get("per_receiver") or [])
