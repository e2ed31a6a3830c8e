"""SIMPLON ``darray`` (the pixel mask of ``GET /detector/api/1.8.0/config/pixel_mask``):
shape given width first, read as LiberTEM-live's ``get_darray`` reads it; every field
checked and the size bounded before anything is decoded."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from streams.controls import ControlError
from streams.controls.simplon import MAX_MASK_SIDE, decode_darray


def darray(a: np.ndarray, **over) -> dict:
    """As DECTRIS's ``DEigerClient`` uploads one: ``shape`` is [width, height]."""
    d = {"__darray__": [1, 0, 0], "type": a.dtype.str, "shape": [a.shape[1], a.shape[0]],
         "filters": ["base64"], "data": base64.b64encode(a.tobytes()).decode("ascii")}
    d.update(over)
    return d


def test_round_trip_rows_then_columns_and_libertem_lives_reading():
    a = np.zeros((3, 5), "<u4")
    a[0, 4], a[2, 1] = 1, 8
    got = decode_darray(darray(a), "GET x")
    assert got.shape == (3, 5) and (got == a).all()
    pytest.importorskip("libertem_live", reason="LiberTEM-live's reader is the peer")
    from libertem_live.detectors.dectris.acquisition import get_darray

    assert (get_darray({"value": darray(a)}) == got).all()
    # line breaks in the base64 (base64.encodebytes) are read, as LiberTEM-live reads them
    wrapped = darray(a, data=base64.encodebytes(a.tobytes()).decode("ascii"))
    assert (decode_darray(wrapped, "GET x") == a).all()


@pytest.mark.parametrize("over,says", [
    ({"shape": [MAX_MASK_SIDE + 1, 1]}, "shape"),
    ({"shape": [5]}, "shape"),
    ({"shape": [5, -3]}, "shape"),
    ({"shape": [1 << 15, 1 << 15], "type": "<u8"}, "too large"),   # 8 GiB announced
    ({"type": "<f4"}, "type"),
    ({"type": "object"}, "type"),
    ({"filters": ["lz4", "base64"]}, "filters"),
    ({"data": "!!!!"}, "not base64"),
    ({"data": base64.b64encode(b"\0" * 8).decode()}, "of 8 bytes"),
    ({"data": "A" * 10_000}, "too large"),
    ({"data": None}, "no data"),
])
def test_hostile_darrays_are_refused_naming_the_field(over, says):
    a = np.zeros((3, 5), "<u4")
    with pytest.raises(ControlError, match=says) as e:
        decode_darray(darray(a, **over), "GET http://dcu/detector/api/1.8.0/config/pixel_mask")
    assert "config/pixel_mask" in str(e.value)
    with pytest.raises(ControlError, match="not a SIMPLON darray"):
        decode_darray([1, 2], "GET x")
