"""ASI CheeTah TPX3's stream for the receiver: :mod:`kernels.io.tpx3` (the format, pure and
shared with the offline source ``analyses.sources.tpx3``) with its errors as the
receiver's :class:`~streams.errors.ProtocolError`, whose ``Reason`` counts the rejection.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from kernels.io import tpx3 as _format
from kernels.io.tpx3 import (ACQUISITION_END, ACQUISITION_START, ARRAY_CHUNK, DTYPES,  # noqa: F401
                             FORMAT_CSR, HEADER, SCAN_END, SCAN_START, VERSION, AcquisitionEnd,
                             AcquisitionStart, ArrayChunk, Message, ScanEnd, ScanStart,
                             encode_acquisition_end, encode_acquisition_start, encode_chunk,
                             encode_scan, encode_scan_end, encode_scan_start)
from streams.errors import ProtocolError
from streams.protocol import Reason

F = TypeVar("F", bound=Callable[..., Any])


def _as_protocol(f: F) -> F:
    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except _format.Tpx3FormatError as e:
            raise ProtocolError(Reason(e.reason), e.detail) from None
    return call  # type: ignore[return-value]


parse_header = _as_protocol(_format.parse_header)
chunk_layout = _as_protocol(_format.chunk_layout)
check_csr = _as_protocol(_format.check_csr)
