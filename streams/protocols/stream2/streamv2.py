"""DECTRIS Stream V2 messages: CBOR ``start`` / ``image`` / ``end``, decoded and encoded.

DECTRIS's specification (``stream_v2/README.md`` of github.com/dectris/documentation)
as its reference parser ``stream2.c`` checks it, every value bounded before use
(:mod:`~streams.protocols.stream2.bounds`; ``docs/stream-protocol.md`` section 8),
checked against DECTRIS's captured messages (branch ``stream2-test_data``). Image
payloads stay compressed: :class:`~streams.assemble.Assembler` decodes them
straight into frame memory.
"""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from streams.codecs import LZ4_BLOCK, bslz4_encode, decode_into, decoded_size, lz4_encode
from streams.protocols.stream2 import bounds
from streams.protocols.stream2.bounds import MAX_ARRAY_BYTES, MAX_UINT, MIN_INT
from streams.errors import CodecError, ProtocolError
from analyses.errors import GeometryError
from streams.protocol import Reason, ScanGeometry, rejection

__all__ = ["MAGIC", "Start", "Image", "End", "ChannelImage", "decode_message",
           "encode_start", "encode_image", "encode_end", "scan_name",
           "TYPED_ARRAY_TAGS", "decode_array", "START_ARRAYS", "MAX_ARRAY_BYTES", "MAX_UINT"]

MAGIC = b"\xd9\xd9\xf7"
SELF_DESCRIBE, MULTI_DIM, COMPRESSION = 55799, 40, 56500
#: RFC 8746 typed-array tags -> numpy type strings (half and 128-bit floats left out).
TYPED_ARRAY_TAGS = {64: "|u1", 65: ">u2", 66: ">u4", 67: ">u8", 68: "|u1", 69: "<u2",
                    70: "<u4", 71: "<u8", 72: "|i1", 73: ">i2", 74: ">i4", 75: ">i8",
                    77: "<i2", 78: "<i4", 79: "<i8", 81: ">f4", 82: ">f8", 85: "<f4",
                    86: "<f8"}
_DTYPE_TAG = {v: k for k, v in TYPED_ARRAY_TAGS.items() if k != 68}
#: ``image_dtype`` of the start message -> the typed arrays DECTRIS sends (little-endian)
IMAGE_DTYPES = {"uint8": "|u1", "uint16": "<u2", "uint32": "<u4"}


#: Start-message fields that hold arrays with SIMPLON ``header_detail: all``
#: (``basic`` and ``none`` leave them out): channel -> 2-D array, or one typed array.
START_ARRAYS = ("flatfield", "pixel_mask", "countrate_correction_lookup_table")
_UID_KEEP = re.compile(r"[^A-Za-z0-9._-]")
#: Most images a series may announce (the loss accounting takes 4 bytes per image).
MAX_IMAGES = 1 << 28


def scan_name(series_id: int, series_unique_id: str = "") -> str:
    """``series-<id>[-<unique id>]``, the unique id made file-safe and cut to 100: a
    detector that restarts its numbering does not overwrite an earlier series."""
    uid = _UID_KEEP.sub("_", series_unique_id)[:100]
    return f"series-{series_id}-{uid}" if uid else f"series-{series_id}"


@dataclass(frozen=True)
class ChannelImage:
    """One channel of one image, payload still encoded."""

    shape: Tuple[int, int]
    dtype: str
    encoding: str            # "raw", "lz4" or "bslz4"
    payload: bytes

    def decode(self) -> np.ndarray:
        out = np.empty(self.shape, np.dtype(self.dtype))
        decode_into(self.encoding, self.payload, out)
        return out


@dataclass(frozen=True)
class _Series:
    """What every message of a series names: its id and unique id (:attr:`key`)."""

    series_id: int
    series_unique_id: str

    @property
    def key(self) -> Tuple[str, int]:
        return (self.series_unique_id, self.series_id)


@dataclass(frozen=True)
class Start(_Series):
    """A ``start`` message: the series configuration (all fields kept in ``fields``)."""

    number_of_images: int
    image_size_x: int
    image_size_y: int
    image_dtype: Optional[str]
    channels: Tuple[str, ...]
    fields: Dict[str, Any] = field(default_factory=dict, compare=False)
    #: memory the message takes here: its bytes and its decoded arrays
    nbytes: int = field(default=0, compare=False, repr=False)

    @property
    def scan(self) -> str:
        return scan_name(self.series_id, self.series_unique_id)

    def arrays(self, channel: Optional[str] = None) -> Dict[str, Any]:
        """The start's arrays (``header_detail: all``): flatfield and pixel mask as
        channel -> 2-D array (only ``channel`` if given), the count-rate table 1-D."""
        out: Dict[str, Any] = {}
        for name in START_ARRAYS:
            v = self.fields.get(name)
            if isinstance(v, Mapping):
                per = {str(c): a for c, a in v.items() if isinstance(a, np.ndarray)
                       and (channel is None or c == channel)}
                if per:
                    out[name] = per
            elif isinstance(v, np.ndarray):
                out[name] = v
        return out

    def geometry(self, scan_shape: Optional[Tuple[int, int]] = None,
                 dtype: Optional[str] = None) -> ScanGeometry:
        """The series as a scan of one producer, one sector per image; ``scan_shape``
        defaults to ``user_data["scan_shape"]``, else ``(1, number_of_images)``."""
        ud = self.fields.get("user_data")
        if scan_shape is None and isinstance(ud, Mapping) and "scan_shape" in ud:
            scan_shape = tuple(ud["scan_shape"])  # type: ignore[assignment]
        dt = dtype or IMAGE_DTYPES.get(self.image_dtype or "")
        if self.number_of_images > MAX_IMAGES:
            raise ProtocolError(Reason.OUT_OF_RANGE, f"start of series {self.scan}: "
                                f"number_of_images {self.number_of_images} is over "
                                f"{MAX_IMAGES} (the accounting alone would take "
                                f"{self.number_of_images * 4 >> 20} MiB)")
        if dt is None:
            raise ProtocolError(Reason.MALFORMED, f"start of series {self.scan}: "
                                f"image_dtype {self.image_dtype!r} is not one of "
                                f"{', '.join(IMAGE_DTYPES)}")
        try:
            return ScanGeometry(scan=self.scan, producers=1,
                                frames=self.number_of_images, sectors=1,
                                shape=(self.image_size_y, self.image_size_x), dtype=dt,
                                scan_shape=scan_shape or (1, self.number_of_images))
        except GeometryError as e:
            raise rejection(e) from None


@dataclass(frozen=True)
class Image(_Series):
    """An ``image`` message: ``data`` maps channel name -> :class:`ChannelImage`."""

    image_id: int
    data: Dict[str, ChannelImage]
    fields: Dict[str, Any] = field(default_factory=dict, compare=False)
    #: memory the message takes here: its bytes and its decoded user-data arrays
    nbytes: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True)
class End(_Series):
    """An ``end`` message."""

    nbytes: int = field(default=0, compare=False, repr=False)


# ---- decoding ----


_SCALARS = frozenset((float, str, bool, bytes, type(None)))


def _plain(v: Any, what: str, arrays: bounds.Arrays) -> Any:
    """A field as plain Python and NumPy values, no CBOR tag left (the start is pickled
    for the other receivers: cbor2's frozendict and CBORTag do not pickle).

    Typed and tag-40 arrays become NumPy arrays charged to ``arrays``; other tags are
    skipped, as stream2.c does; integers must fit 64 bits (else ``malformed_header``
    naming ``what``).
    """
    t = type(v)
    if t is int:
        if not MIN_INT <= v <= MAX_UINT:
            raise ProtocolError(Reason.MALFORMED, f"{what}: {bounds.show(v)} does not fit 64 bits")
        return v
    if t in _SCALARS:     # most fields: nothing to do (this runs per image)
        return v
    CBORSimpleValue, CBORTag, undefined = bounds.cbor_types()
    if v is undefined:          # neither pickles: plain values
        return None
    if isinstance(v, CBORSimpleValue):
        return int(v.value)
    if isinstance(v, CBORTag):
        if v.tag == MULTI_DIM or v.tag in TYPED_ARRAY_TAGS or v.tag == COMPRESSION:
            return decode_array(v, what, arrays)
        return _plain(v.value, what, arrays)
    if isinstance(v, Mapping):
        return {_plain(k, what, arrays): _plain(x, f"{what}.{bounds.key_text(k)}", arrays)
                for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x, f"{what}[{i}]", arrays) for i, x in enumerate(v))
    return v


def decode_array(v: Any, what: str, arrays: Optional[bounds.Arrays] = None) -> np.ndarray:
    """A typed array (tags 64-87), a tag 40 [dims, typed array] or a bare tag 56500 ->
    a NumPy array, its decoded size charged to ``arrays`` (default: this one alone,
    at most :data:`MAX_ARRAY_BYTES`) before allocation. Raises ProtocolError."""
    CBORTag = bounds.cbor_types()[1]

    if arrays is None:
        arrays = bounds.Arrays(MAX_ARRAY_BYTES)
    dims: Optional[Tuple[int, ...]] = None
    if isinstance(v, CBORTag) and v.tag == MULTI_DIM:
        c = v.value
        if not isinstance(c, Sequence) or len(c) != 2:
            raise ProtocolError(Reason.MALFORMED, f"{what}: tag 40 must hold [dimensions, "
                                "typed array]")
        dims, v = bounds.dims(c[0], what, 0), c[1]
    if isinstance(v, CBORTag) and v.tag in TYPED_ARRAY_TAGS:
        dtype = np.dtype(TYPED_ARRAY_TAGS[v.tag])
        encoding, payload = _bytes_item(v.value, dtype.itemsize, what)
    elif isinstance(v, CBORTag) and v.tag == COMPRESSION and dims is None:
        dtype = np.dtype("|u1")
        encoding, payload = _bytes_item(v, 1, what)
    else:
        raise ProtocolError(Reason.MALFORMED, f"{what}: expected a typed array (tags 64-87 "
                            "of RFC 8746, no half floats)")
    try:
        if encoding == "raw":
            n = len(payload) // dtype.itemsize
            if n * dtype.itemsize != len(payload):
                raise CodecError("wrong_payload_size", f"{len(payload)} bytes is not a "
                                 f"multiple of {dtype.itemsize}")
        else:
            n = decoded_size(payload) // dtype.itemsize
        if dims is not None and int(np.prod(dims, dtype=object)) != n:
            raise CodecError("wrong_payload_size", f"{n} elements, dimensions {list(dims)}")
        arrays.charge(n * dtype.itemsize, what)     # before the array exists
        out = np.empty(n, dtype)
        decode_into(encoding, payload, out)
    except CodecError as e:
        raise ProtocolError(Reason.MALFORMED, f"{what}: {e.reason}: {e.detail}") from None
    out = out.astype(dtype.newbyteorder("="), copy=False)
    return out.reshape(dims) if dims is not None else out


def _bytes_item(v: Any, itemsize: int, what: str) -> Tuple[str, bytes]:
    """A byte string or a DECTRIS compression tag -> (encoding, payload)."""
    CBORTag = bounds.cbor_types()[1]

    if isinstance(v, (bytes, bytearray, memoryview)):
        return "raw", bytes(v)
    if isinstance(v, CBORTag) and v.tag == COMPRESSION:
        c = v.value
        if not isinstance(c, Sequence) or len(c) != 3 or not isinstance(c[0], str) \
                or not isinstance(c[1], int) or not isinstance(c[2], (bytes, bytearray)):
            raise ProtocolError(Reason.MALFORMED, f"{what}: tag 56500 must hold [algorithm, "
                                "modifier, byte string]")
        alg, modifier, payload = c
        if alg == "bslz4":
            if modifier != itemsize:
                raise ProtocolError(Reason.MALFORMED, f"{what}: bslz4 element size "
                                    f"{bounds.show(modifier)} != {itemsize} of the typed array")
        elif alg != "lz4":
            raise ProtocolError(Reason.ENCODING, f"{what}: compression {bounds.show(alg)} is not "
                                "bslz4 or lz4")
        return alg, bytes(payload)
    raise ProtocolError(Reason.MALFORMED, f"{what}: expected a byte string or tag 56500, got "
                        f"{type(v).__name__}")


def _multidim(v: Any, what: str, arrays: bounds.Arrays) -> ChannelImage:
    """One channel of an image, payload kept encoded; its decoded size (rows x cols x
    item size) is charged to ``arrays``."""
    CBORTag = bounds.cbor_types()[1]

    if not isinstance(v, CBORTag) or v.tag != MULTI_DIM:
        raise ProtocolError(Reason.MALFORMED, f"{what}: expected tag 40 (row-major "
                            "multi-dimensional array)")
    c = v.value
    if not isinstance(c, Sequence) or len(c) != 2:
        raise ProtocolError(Reason.MALFORMED, f"{what}: tag 40 must hold [dimensions, array]")
    dims, typed = c
    shape = bounds.dims(dims, what, 1)
    if len(shape) != 2:
        raise ProtocolError(Reason.MALFORMED, f"{what}: dimensions {list(shape)} are not "
                            "two positive integers")
    if not isinstance(typed, CBORTag) or typed.tag not in TYPED_ARRAY_TAGS:
        raise ProtocolError(Reason.MALFORMED, f"{what}: expected a typed array (tags 64-87 "
                            "of RFC 8746, no half floats)")
    dtype = TYPED_ARRAY_TAGS[typed.tag]
    itemsize = int(dtype[-1])
    arrays.charge(shape[0] * shape[1] * itemsize, what)
    encoding, payload = _bytes_item(typed.value, itemsize, what)
    return ChannelImage((shape[0], shape[1]), dtype, encoding, payload)


def decode_message(buf: Any, max_array_bytes: int = MAX_ARRAY_BYTES,
                   max_field_bytes: Optional[int] = None) -> Any:
    """Decode one Stream V2 message into :class:`Start`, :class:`Image` or :class:`End`.

    ``max_array_bytes`` bounds all the message's typed arrays together (an image's
    channels by their dimensions: they stay encoded); an image's field arrays (user
    data) are also bounded by ``max_field_bytes`` (what a receiver may hold before
    the start). ``nbytes`` is ``len(buf)`` plus the decoded arrays. Raises
    ProtocolError: ``malformed_header``, ``unknown_encoding`` or ``too_large``.
    """
    import cbor2

    if bytes(buf[:3]) != MAGIC:
        raise ProtocolError(Reason.MALFORMED, "not a Stream V2 message: it does not start "
                            "with the CBOR self-describe tag d9 d9 f7")
    try:
        m = cbor2.loads(bytes(buf), semantic_decoders=bounds.semantic(), allow_duplicate_keys=False)
    except Exception as e:
        raise ProtocolError(Reason.MALFORMED, f"not CBOR ({type(e).__name__}: "
                            f"{str(e)[:200]})") from None
    if not isinstance(m, Mapping) or not m:
        raise ProtocolError(Reason.MALFORMED, "a Stream V2 message is a non-empty CBOR map")
    if next(iter(m)) != "type":
        raise ProtocolError(Reason.MALFORMED, "the first key of a Stream V2 message must "
                            "be 'type'")
    bounds.text_keys(m, "a Stream V2 message")
    kind = bounds.untag(m["type"])
    if kind not in ("start", "image", "end"):
        raise ProtocolError(Reason.MALFORMED, f"Stream V2 type {bounds.show(kind)} is not start, "
                            "image or end")
    what = f"Stream V2 {kind} message"
    arrays = bounds.Arrays(max_array_bytes)
    size = len(buf)
    if kind == "end":
        return End(bounds.uint(m, "series_id", what), bounds.text(m, "series_unique_id", what, ""),
                   nbytes=size)
    if kind == "start":
        channels = bounds.channels(m, what)
        dtype = m.get("image_dtype")
        uint = bounds.uint
        start = Start(uint(m, "series_id", what), bounds.text(m, "series_unique_id", what, ""),
                      uint(m, "number_of_images", what), uint(m, "image_size_x", what),
                      uint(m, "image_size_y", what),
                      None if dtype is None else bounds.text(m, "image_dtype", what),
                      channels, {k: _plain(v, f"{what}: field {k}", arrays)
                                 for k, v in m.items()})
        return replace(start, nbytes=size + arrays.used)
    data = bounds.untag(m.get("data"))
    if not isinstance(data, Mapping):
        raise ProtocolError(Reason.MALFORMED, f"{what}: data must be a map of channels")
    bounds.text_keys(data, f"{what}: data")
    image_id = bounds.uint(m, "image_id", what)
    series_id = bounds.uint(m, "series_id", what)
    chans = {k: _multidim(v, f"{what} {image_id} channel {k}", arrays)
             for k, v in data.items()}
    # the channels stay encoded (len(buf) holds them); the fields' arrays are decoded
    left = max_array_bytes - arrays.used
    decoded = bounds.Arrays(left, "for one message") if max_field_bytes is None or \
        left <= max_field_bytes else bounds.Arrays(max_field_bytes, "for the arrays of an "
                                                   "image's fields (what holding it may take)")
    fields = {k: _plain(v, f"{what} {image_id} field {k}", decoded)
              for k, v in m.items() if k != "data"}
    return Image(series_id, bounds.text(m, "series_unique_id", what, ""), image_id, chans, fields,
                 nbytes=size + decoded.used)


# ---- encoding (the simulator; tests) ----

def _typed(array: np.ndarray, compression: Optional[str], multidim: bool = True) -> Any:
    from cbor2 import CBORTag

    a = np.ascontiguousarray(array)
    dt = a.dtype.str if a.itemsize > 1 else "|" + a.dtype.str[1:]
    try:
        tag = _DTYPE_TAG[dt]
    except KeyError:
        raise ValueError(f"no RFC 8746 typed-array tag for {dt}") from None
    if compression is None:
        inner: Any = a.tobytes()
    elif compression == "bslz4":
        inner = CBORTag(COMPRESSION, ["bslz4", a.itemsize, bslz4_encode(a)])
    elif compression == "lz4":
        inner = CBORTag(COMPRESSION, ["lz4", 0, lz4_encode(a.reshape(-1).view(np.uint8),
                                                           LZ4_BLOCK)])
    else:
        raise ValueError(f"compression must be None, 'bslz4' or 'lz4', not {compression!r}")
    if not multidim:
        return CBORTag(tag, inner)
    return CBORTag(MULTI_DIM, [list(a.shape), CBORTag(tag, inner)])


def _dumps(m: Dict[str, Any]) -> bytes:
    import cbor2

    return cbor2.dumps(cbor2.CBORTag(SELF_DESCRIBE, m))


def encode_start(series_id: int, series_unique_id: str, number_of_images: int,
                 shape: Tuple[int, int], image_dtype: str = "uint16",
                 channels: Tuple[str, ...] = ("threshold_1",),
                 pixel_mask: Optional[Dict[str, np.ndarray]] = None,
                 user_data: Any = None, header_detail: str = "basic",
                 flatfield: Optional[Dict[str, np.ndarray]] = None,
                 countrate_table: Optional[np.ndarray] = None,
                 array_compression: Optional[str] = None, **extra: Any) -> bytes:
    """A ``start`` message with every field of the specification's table.

    ``header_detail="all"`` (SIMPLON's) adds ``flatfield``, ``pixel_mask`` and
    ``countrate_correction_lookup_table`` as DECTRIS encodes them, made up when not
    given (a ``pixel_mask`` given is sent anyway); ``array_compression`` wraps their
    bytes in tag 56500.
    """
    if header_detail not in ("all", "basic", "none"):
        raise ValueError(f"header_detail must be all, basic or none, not {header_detail!r}")
    now = _dt.datetime.now(_dt.timezone.utc)
    m: Dict[str, Any] = {
        "type": "start", "arm_date": now, "beam_center_x": shape[1] / 2.0,
        "beam_center_y": shape[0] / 2.0, "channels": list(channels), "count_time": 0.001,
        "countrate_correction_enabled": False,
        "detector_description": "mpistage Stream V2 simulator",
        "detector_serial_number": "SIM-0000", "detector_translation": [0.0, 0.0, 0.1],
        "flatfield_enabled": False, "frame_time": 0.001,
        "goniometer": {"omega": {"increment": 0.0, "start": 0.0}},
        "image_dtype": image_dtype, "image_size_x": int(shape[1]),
        "image_size_y": int(shape[0]), "incident_energy": 300e3,
        "incident_wavelength": 0.0197, "number_of_images": int(number_of_images),
        "pixel_mask_enabled": pixel_mask is not None, "pixel_size_x": 75e-6,
        "pixel_size_y": 75e-6, "saturation_value": int(np.iinfo(
            np.dtype(IMAGE_DTYPES[image_dtype])).max) - 1,
        "sensor_material": "Si", "sensor_thickness": 450e-6, "series_id": int(series_id),
        "series_unique_id": series_unique_id,
        "threshold_energy": {c: 4000.0 * (i + 1) for i, c in enumerate(channels)},
        "user_data": user_data, "virtual_pixel_interpolation_enabled": False}
    if header_detail == "all":
        ny, nx = int(shape[0]), int(shape[1])
        if flatfield is None:
            flatfield = {c: np.ones((ny, nx), "<f4") for c in channels}
        if pixel_mask is None:
            pixel_mask = {c: np.zeros((ny, nx), "<u4") for c in channels}
        if countrate_table is None:
            countrate_table = np.arange(1 << 12, dtype="<u4")
        m["flatfield"] = {c: _typed(np.asarray(v, "<f4"), array_compression)
                          for c, v in flatfield.items()}
        m["countrate_correction_lookup_table"] = _typed(
            np.asarray(countrate_table, "<u4").reshape(-1), array_compression, multidim=False)
        m["pixel_mask_enabled"] = m["flatfield_enabled"] = True
        m["countrate_correction_enabled"] = True
    if pixel_mask is not None:
        m["pixel_mask"] = {c: _typed(np.asarray(v, "<u4"), array_compression)
                           for c, v in pixel_mask.items()}
    m.update(extra)
    return _dumps(m)


def encode_image(series_id: int, series_unique_id: str, image_id: int,
                 data: Dict[str, np.ndarray], compression: Optional[str] = "bslz4",
                 time_base: int = 50_000_000, frame_ticks: int = 50_000,
                 series_date: Optional[_dt.datetime] = None, user_data: Any = None) -> bytes:
    """An ``image`` message, fields in the order DECTRIS detectors send them."""
    date = series_date or _dt.datetime.now(_dt.timezone.utc)
    start = image_id * frame_ticks
    return _dumps({
        "type": "image", "series_id": int(series_id), "series_unique_id": series_unique_id,
        "image_id": int(image_id), "real_time": [frame_ticks - 5, time_base],
        "series_date": date, "start_time": [start, time_base],
        "stop_time": [start + frame_ticks - 5, time_base], "user_data": user_data,
        "data": {c: _typed(a, compression) for c, a in data.items()}})


def encode_end(series_id: int, series_unique_id: str) -> bytes:
    """An ``end`` message."""
    return _dumps({"type": "end", "series_id": int(series_id),
                   "series_unique_id": series_unique_id})
