"""DECTRIS's legacy stream (SIMPLON 1.8 ``stream/api/.../config/format = legacy``): multipart
ZeroMQ messages of JSON parts and binary blobs, decoded and encoded.

The messages (SIMPLON API reference, "Stream interface"; the same the reader of
LiberTEM-live, ``libertem_dectris``, expects):

header
    ``{"htype": "dheader-1.0", "series": ID, "header_detail": "all"|"basic"|"none"}``;
    with ``basic`` and ``all`` the detector configuration follows (one JSON object,
    no ``htype``: ``nimages``, ``ntrigger``, ``trigger_mode``,
    ``x_pixels_in_detector``, ...); with ``all`` then three pairs of a JSON header
    (``dflatfield-1.0``, ``dpixelmask-1.0``, ``dcountrate_table-1.0``: ``shape``
    ``[x, y]``, ``type``) and its little-endian blob; an optional last part is the
    user's ``header_appendix``. A detector sends these as one multipart message;
    LiberTEM-live's simulator sends the dheader and the configuration as two
    single-part messages (:func:`decode_parts` returns a :class:`HeaderPart` and a
    :class:`ConfigPart` then, which the receiver pairs).
image
    four parts: ``{"htype": "dimage-1.0", "series": ID, "frame": N, "hash": MD5}``,
    ``{"htype": "dimage_d-1.0", "shape": [x, y], "type": "uint16", "encoding":
    "bs16-lz4<"}``, the blob, ``{"htype": "dconfig-1.0", "start_time": ns,
    "stop_time": ns, "real_time": ns}``; an optional fifth part is the user's
    ``image_appendix``. ``shape`` is ``[width, height]``: the frame has ``shape[1]``
    rows of ``shape[0]`` pixels.
end
    ``{"htype": "dseries_end-1.0", "series": ID}``.

``encoding`` is ``<`` (raw), ``lz4<`` (one LZ4 block, no framing) or
``bs{8,16,32}-lz4<`` (bitshuffle+LZ4 in the HDF5 filter's framing, the element size
in bits); big-endian (``>``) streams are refused ``unknown_encoding``. The messages
decode to Stream V2's :class:`~streams.protocols.stream2.streamv2.Start`,
:class:`~streams.protocols.stream2.streamv2.Image` and
:class:`~streams.protocols.stream2.streamv2.End` (series unique id ``""``, one
channel ``threshold_1``), so one receiver, one assembler and one decoder serve
both DECTRIS streams; an ``lz4<`` blob is given the one-block HDF5 framing the
decoder reads. Every part is checked (count, JSON size, types, shape, blob size)
before anything is allocated for it; a failure is a
:class:`~streams.errors.ProtocolError` naming series, frame and part.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from streams.codecs import bslz4_encode
from streams.errors import ProtocolError
from streams.protocol import Reason
from streams.protocols.stream2.streamv2 import MAX_ARRAY_BYTES, ChannelImage, End, Image, Start

__all__ = ["HeaderPart", "ConfigPart", "Appendix", "decode_parts", "first_part",
           "image_fields", "start_from",
           "encode_header", "encode_image", "encode_end", "CHANNEL", "MAX_PARTS",
           "MAX_JSON_BYTES", "MAX_FRAME_BYTES", "number_of_images"]

CHANNEL = "threshold_1"
#: most parts a message may have (a header with ``all`` and an appendix has 9)
MAX_PARTS = 12
#: largest JSON part (a detector configuration is a few KiB)
MAX_JSON_BYTES = 1 << 20
#: largest frame a ``dimage_d`` may announce, decoded (a 16M-pixel 32-bit frame is 64 MiB)
MAX_FRAME_BYTES = 1 << 30
PIXEL_TYPES = {"uint8": "|u1", "uint16": "<u2", "uint32": "<u4"}
_ARRAY_TYPES = {"uint8": "<u1", "uint16": "<u2", "uint32": "<u4", "float32": "<f4"}
_ENCODING = re.compile(r"^(?:bs(8|16|32)-)?(lz4)?([<>])$")
_ARRAY_PARTS = {"dflatfield-1.0": "flatfield", "dpixelmask-1.0": "pixel_mask",
                "dcountrate_table-1.0": "countrate_correction_lookup_table"}
#: legacy configuration key -> the Stream V2 start field of the same meaning (what
#: the scan's ``/detector`` group is written from)
_V2_NAMES = {"x_pixel_size": "pixel_size_x", "y_pixel_size": "pixel_size_y",
             "detector_number": "detector_serial_number", "description": "detector_description",
             "countrate_correction_applied": "countrate_correction_enabled",
             "flatfield_correction_applied": "flatfield_enabled",
             "pixel_mask_applied": "pixel_mask_enabled",
             "virtual_pixel_correction_applied": "virtual_pixel_interpolation_enabled",
             "countrate_correction_count_cutoff": "saturation_value"}


@dataclass(frozen=True)
class HeaderPart:
    """A ``dheader-1.0`` whose configuration came (or comes) as a message of its own."""

    series_id: int
    header_detail: str


@dataclass(frozen=True)
class ConfigPart:
    """A detector configuration sent as a message of its own (no ``htype``)."""

    config: Dict[str, Any]


@dataclass(frozen=True)
class Appendix:
    """A message that is neither: ignored, counted by the receiver."""

    what: str
    extra: Dict[str, Any] = field(default_factory=dict)


_JSON = json.JSONDecoder().decode
#: ``dimage_d`` (shape, type, encoding) -> (rows, cols, dtype, encoding, frame bytes): the
#: same for every image of a series, so checked once (bounded: a peer varying them only
#: makes every image pay the checks again)
_IMAGE_D: Dict[Tuple[Any, ...], Tuple[int, int, str, str, int]] = {}
_IMAGE_D_MAX = 64


def _json(part: Any, what: str) -> Dict[str, Any]:
    n = len(part)
    if n > MAX_JSON_BYTES:
        raise ProtocolError(Reason.MALFORMED, f"{what}: a JSON part of {n} bytes, more "
                            f"than {MAX_JSON_BYTES}")
    try:    # UTF-8 (RFC 8259) decoded here: json.loads would guess the encoding first
        v = _JSON(bytes(part).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(Reason.MALFORMED, f"{what}: not JSON ({e})") from None
    if not isinstance(v, dict):
        raise ProtocolError(Reason.MALFORMED, f"{what}: a JSON object was expected, got "
                            f"{type(v).__name__}")
    return v


def first_part(parts: Sequence[Any]) -> Dict[str, Any]:
    """A message's first part, decoded (a JSON object, checked)."""
    return _json(parts[0], "part 1")


def _uint(m: Dict[str, Any], key: str, what: str, limit: int = 1 << 62) -> int:
    v = m.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > limit:
        raise ProtocolError(Reason.MALFORMED, f"{what}: {key} must be an integer in "
                            f"[0, {limit}], not {v!r}")
    return v


def _shape(m: Dict[str, Any], what: str) -> Tuple[int, int]:
    """``shape`` ``[x, y]`` -> ``(rows, cols)`` = ``(y, x)``."""
    s = m.get("shape")
    if not isinstance(s, list) or len(s) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20 for v in s):
        raise ProtocolError(Reason.MALFORMED, f"{what}: shape must be [width, height], two "
                            f"integers in [1, 2^20], not {s!r}")
    return int(s[1]), int(s[0])


def _type(m: Dict[str, Any], table: Dict[str, str], what: str) -> str:
    t = m.get("type")
    if t not in table:
        raise ProtocolError(Reason.MALFORMED, f"{what}: type {t!r} is not one of "
                            f"{', '.join(table)}")
    return table[t]


def _encoding(enc: Any, itemsize: int, what: str) -> str:
    """A legacy ``encoding`` -> ``raw`` / ``lz4`` / ``bslz4`` (the decoder's names)."""
    m = _ENCODING.match(enc) if isinstance(enc, str) else None
    if m is None or (m.group(1) and not m.group(2)):
        raise ProtocolError(Reason.ENCODING, f"{what}: encoding {enc!r} is not '<', "
                            "'lz4<' or 'bs<bits>-lz4<'")
    bits, lz4, order = m.groups()
    if order == ">" and itemsize > 1:
        raise ProtocolError(Reason.ENCODING, f"{what}: big-endian encoding {enc!r} is not "
                            "supported (set the detector to little-endian)")
    if bits is not None:
        if int(bits) != 8 * itemsize:
            raise ProtocolError(Reason.MALFORMED, f"{what}: encoding {enc!r} shuffles "
                                f"{bits}-bit elements, the type has {8 * itemsize}")
        return "bslz4"
    return "lz4" if lz4 else "raw"


def _framed_lz4(blob: Any, decoded: int) -> bytes:
    """One plain LZ4 block as the HDF5 LZ4 filter's framing (one block of ``decoded``
    bytes), what :func:`streams.codecs.decode_into` reads."""
    return struct.pack(">QII", decoded, decoded, len(blob)) + bytes(blob)


def _image_d(d: Dict[str, Any], where: str) -> Tuple[int, int, str, str, int]:
    """A ``dimage_d``'s frame: (rows, cols, dtype, encoding, decoded bytes), checked."""
    rows, cols = _shape(d, f"{where} dimage_d")
    dtype = _type(d, PIXEL_TYPES, f"{where} dimage_d")
    itemsize = int(dtype[-1])
    nbytes = rows * cols * itemsize
    if nbytes > MAX_FRAME_BYTES:
        raise ProtocolError(Reason.TOO_LARGE, f"{where}: a {cols}x{rows} frame of "
                            f"{nbytes} bytes, more than {MAX_FRAME_BYTES}")
    return rows, cols, dtype, _encoding(d.get("encoding"), itemsize, f"{where} dimage_d"), nbytes


def _image(parts: Sequence[Any], head: Dict[str, Any], check_hash: bool) -> Image:
    series, frame, rows, cols, dtype, encoding, payload, times = \
        image_fields(parts, head, check_hash)
    return Image(series, "", frame, {CHANNEL: ChannelImage((rows, cols), dtype, encoding,
                                                           payload)}, times)


def image_fields(parts: Sequence[Any], head: Dict[str, Any], check_hash: bool = False) -> Tuple[
        int, int, int, int, str, str, Any, Dict[str, Any]]:
    """An image message's series, frame, rows, cols, dtype, encoding, payload and
    ``dconfig`` times, every part checked (``head``: its first part, decoded), without
    building an :class:`Image` (a receiver's fast path for a series already open).

    Raises
    ------
    ProtocolError
        the reason and what is wrong, naming series, frame and part.
    """
    series = _uint(head, "series", "dimage-1.0")
    frame = _uint(head, "frame", f"series {series} dimage-1.0")
    where = f"series {series} frame {frame}"
    if len(parts) not in (4, 5):
        raise ProtocolError(Reason.MALFORMED, f"{where}: an image message has 4 parts "
                            f"(5 with an appendix), not {len(parts)}")
    d = _json(parts[1], f"{where} part 2")
    if d.get("htype") != "dimage_d-1.0":
        raise ProtocolError(Reason.MALFORMED, f"{where}: part 2 is {d.get('htype')!r}, "
                            "expected dimage_d-1.0")
    shape = d.get("shape")
    key = (tuple(shape) if isinstance(shape, list) else None, d.get("type"), d.get("encoding"))
    known = _IMAGE_D.get(key) if key[0] is not None and all(
        type(v) is int for v in key[0]) and type(key[1]) is str and type(key[2]) is str \
        else None
    if known is None:
        known = _image_d(d, where)
        if key[0] is not None and len(_IMAGE_D) < _IMAGE_D_MAX:
            _IMAGE_D[key] = known
    rows, cols, dtype, encoding, nbytes = known
    blob = parts[2]
    size = d.get("size")
    if size is not None and size != len(blob):
        raise ProtocolError(Reason.PAYLOAD_SIZE, f"{where}: dimage_d says {size!r} bytes, "
                            f"the blob has {len(blob)}")
    if check_hash:
        want, got = head.get("hash"), hashlib.md5(blob).hexdigest()
        if want != got:
            raise ProtocolError(Reason.CORRUPT, f"{where}: MD5 {got} of the blob, the "
                                f"header says {want!r}")
    payload = _framed_lz4(blob, nbytes) if encoding == "lz4" else blob
    c = _json(parts[3], f"{where} part 4")
    if c.get("htype") != "dconfig-1.0":
        raise ProtocolError(Reason.MALFORMED, f"{where}: part 4 is {c.get('htype')!r}, "
                            "expected dconfig-1.0")
    times = {}
    for k in ("start_time", "stop_time", "real_time"):
        v = c.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ProtocolError(Reason.MALFORMED, f"{where} dconfig: {k} must be a "
                                f"number, not {v!r}")
        times[k] = v
    return series, frame, rows, cols, dtype, encoding, payload, times


def _array(head_part: Any, blob: Any, what: str) -> Tuple[str, np.ndarray]:
    h = _json(head_part, what)
    name = _ARRAY_PARTS.get(h.get("htype"))  # type: ignore[arg-type]
    if name is None:
        raise ProtocolError(Reason.MALFORMED, f"{what}: {h.get('htype')!r} is not one of "
                            f"{', '.join(_ARRAY_PARTS)}")
    what = f"{what} ({h['htype']})"
    rows, cols = _shape(h, what)
    dtype = np.dtype(_type(h, _ARRAY_TYPES, what))
    n = rows * cols * dtype.itemsize
    if n > MAX_ARRAY_BYTES or len(blob) != n:
        raise ProtocolError(Reason.PAYLOAD_SIZE, f"{what}: shape {[cols, rows]} "
                            f"{h.get('type')} is {n} bytes, the blob has {len(blob)}"
                            f" (at most {MAX_ARRAY_BYTES})")
    a = np.frombuffer(bytes(blob), dtype).reshape(rows, cols).astype(dtype.newbyteorder("="))
    return name, a


def number_of_images(config: Dict[str, Any], what: str) -> int:
    """Images of a series from the detector configuration: ``ntrigger`` for
    ``exte``/``inte`` (one image per trigger), ``nimages x ntrigger`` otherwise."""
    mode = config.get("trigger_mode")
    ntrigger = _uint(config, "ntrigger", what)
    if mode in ("exte", "inte"):
        return ntrigger
    return _uint(config, "nimages", what) * ntrigger


def start_from(series: int, detail: str, config: Optional[Dict[str, Any]],
               arrays: Optional[Dict[str, np.ndarray]] = None,
               images: int = 0) -> Start:
    """The series' :class:`Start` from its dheader, configuration and arrays.

    The image type and (without a configuration) size are left to the first image
    (``image_dtype`` None). ``images``: the count when the header has no
    configuration (``header_detail none``), 0 when unknown.

    Raises
    ------
    ProtocolError
        naming the series, when the configuration lacks what the series needs or
        the image count is unknown.
    """
    what = f"series {series} detector configuration"
    fields: Dict[str, Any] = {"header_detail": detail}
    nx = ny = 0
    if config is not None:
        images = number_of_images(config, what)
        nx = _uint(config, "x_pixels_in_detector", what, 1 << 20) \
            if "x_pixels_in_detector" in config else 0
        ny = _uint(config, "y_pixels_in_detector", what, 1 << 20) \
            if "y_pixels_in_detector" in config else 0
        fields["legacy_config"] = config
        for k, v in config.items():
            if isinstance(v, (bool, int, float, str)):
                fields[_V2_NAMES.get(k, k)] = v
        if isinstance(config.get("threshold_energy"), (int, float)):
            fields["threshold_energy"] = {CHANNEL: config["threshold_energy"]}
    elif images <= 0:
        raise ProtocolError(Reason.MALFORMED, f"series {series}: header_detail none, so the "
                            "stream does not say how many images come: give the count "
                            "(--dectris-images N) or set header_detail basic")
    for name, a in (arrays or {}).items():
        fields[name] = a if name == "countrate_correction_lookup_table" else {CHANNEL: a}
        if name != "countrate_correction_lookup_table" and not nx:
            ny, nx = a.shape
    return Start(series, "", images, nx, ny, None, (CHANNEL,), fields)


def decode_parts(parts: Sequence[Any], check_hash: bool = False,
                 head: Optional[Dict[str, Any]] = None) -> Any:
    """One message (its parts, bytes-like) -> :class:`Start`, :class:`Image`,
    :class:`End`, :class:`HeaderPart` (a dheader without its configuration),
    :class:`ConfigPart` (a configuration without its dheader) or :class:`Appendix`.

    Raises
    ------
    ProtocolError
        the reason and what is wrong, naming series, frame and part (``head``: the
        first part, already decoded by :func:`first_part`).
    """
    if not 0 < len(parts) <= MAX_PARTS:
        raise ProtocolError(Reason.MALFORMED, f"a legacy message of {len(parts)} parts "
                            f"(1 to {MAX_PARTS})")
    if head is None:
        head = first_part(parts)
    htype = head.get("htype")
    if htype == "dimage-1.0":
        return _image(parts, head, check_hash)
    if htype == "dseries_end-1.0":
        return End(_uint(head, "series", "dseries_end-1.0"), "")
    if htype == "dheader-1.0":
        series = _uint(head, "series", "dheader-1.0")
        detail = head.get("header_detail")
        if detail not in ("all", "basic", "none"):
            raise ProtocolError(Reason.MALFORMED, f"series {series} dheader: header_detail "
                                f"{detail!r} is not all, basic or none")
        if len(parts) == 1:
            return HeaderPart(series, detail)
        if detail == "none":
            raise ProtocolError(Reason.MALFORMED, f"series {series} dheader: header_detail "
                                f"none with {len(parts)} parts")
        config = _json(parts[1], f"series {series} dheader part 2")
        arrays: Dict[str, np.ndarray] = {}
        if detail == "all":
            if len(parts) < 8:
                raise ProtocolError(Reason.MALFORMED, f"series {series} dheader: "
                                    f"header_detail all has 8 parts (9 with an appendix), "
                                    f"not {len(parts)}")
            for i in (2, 4, 6):
                name, a = _array(parts[i], parts[i + 1], f"series {series} dheader part "
                                                        f"{i + 1}")
                arrays[name] = a
        return start_from(series, detail, config, arrays)
    if htype is None and len(parts) == 1:
        return ConfigPart(head)
    return Appendix(f"a message of type {htype!r}")


# ---- encoding (the simulator, dumps, tests) ----

def _j(d: Dict[str, Any]) -> bytes:
    return json.dumps(d).encode()


def detector_config(number_of_images: int, shape: Tuple[int, int], bit_depth: int = 16,
                    trigger_mode: str = "exte", **extra: Any) -> Dict[str, Any]:
    """A detector configuration as a SIMPLON detector sends it with ``header_detail
    basic`` (the fields LiberTEM-live reads, and those the scan's ``/detector`` keeps)."""
    rows, cols = shape
    per_trigger = trigger_mode in ("exte", "inte")
    cfg: Dict[str, Any] = {
        "trigger_mode": trigger_mode, "ntrigger": number_of_images if per_trigger else 1,
        "nimages": 1 if per_trigger else number_of_images,
        "x_pixels_in_detector": cols, "y_pixels_in_detector": rows,
        "bit_depth_image": bit_depth, "bit_depth_readout": bit_depth, "count_time": 0.001,
        "frame_time": 0.001, "compression": "bslz4", "sensor_material": "Si",
        "sensor_thickness": 450e-6, "x_pixel_size": 75e-6, "y_pixel_size": 75e-6,
        "beam_center_x": cols / 2.0, "beam_center_y": rows / 2.0,
        "description": "mpistage legacy-stream simulator", "detector_number": "SIM-0000",
        "countrate_correction_applied": False, "flatfield_correction_applied": False,
        "pixel_mask_applied": False, "virtual_pixel_correction_applied": False,
        "threshold_energy": 4000.0}
    cfg.update(extra)
    return cfg


def encode_header(series: int, config: Optional[Dict[str, Any]], header_detail: str = "basic",
                  pixel_mask: Optional[np.ndarray] = None,
                  flatfield: Optional[np.ndarray] = None,
                  countrate_table: Optional[np.ndarray] = None,
                  appendix: Optional[bytes] = None) -> List[bytes]:
    """The parts of a header message (``all``: arrays made up when not given)."""
    parts = [_j({"htype": "dheader-1.0", "series": int(series), "header_detail": header_detail})]
    if header_detail == "none":
        return parts
    assert config is not None, "header_detail basic/all sends the configuration"
    parts.append(_j(config))
    if header_detail == "all":
        ny, nx = config["y_pixels_in_detector"], config["x_pixels_in_detector"]
        ff = np.ones((ny, nx), "<f4") if flatfield is None else np.asarray(flatfield, "<f4")
        pm = np.zeros((ny, nx), "<u4") if pixel_mask is None else np.asarray(pixel_mask, "<u4")
        ct = np.arange(2 * 64, dtype="<f4").reshape(2, 64) if countrate_table is None \
            else np.asarray(countrate_table, "<f4")
        for htype, a, t in (("dflatfield-1.0", ff, "float32"), ("dpixelmask-1.0", pm, "uint32"),
                            ("dcountrate_table-1.0", ct, "float32")):
            parts += [_j({"htype": htype, "shape": [a.shape[1], a.shape[0]], "type": t}),
                      np.ascontiguousarray(a).tobytes()]
    if appendix is not None:
        parts.append(appendix)
    return parts


def encode_image(series: int, frame: int, image: np.ndarray, encoding: str = "bslz4",
                 times: Optional[Tuple[int, int, int]] = None) -> List[bytes]:
    """The four parts of an image message; ``encoding`` ``raw``, ``lz4`` or ``bslz4``."""
    a = np.ascontiguousarray(image)
    itemsize = a.dtype.itemsize
    if encoding == "bslz4":
        blob, enc = bslz4_encode(a), f"bs{8 * itemsize}-lz4<"
    elif encoding == "lz4":
        import lz4.block

        blob, enc = lz4.block.compress(a.tobytes(), store_size=False), "lz4<"
    elif encoding == "raw":
        blob, enc = a.astype(a.dtype.newbyteorder("<")).tobytes(), "<"
    else:
        raise ValueError(f"encoding must be raw, lz4 or bslz4, not {encoding!r}")
    t0, t1, real = times or (frame * 1_000_000, frame * 1_000_000 + 999_000, 999_000)
    return [_j({"htype": "dimage-1.0", "series": int(series), "frame": int(frame),
                "hash": hashlib.md5(blob).hexdigest()}),
            _j({"htype": "dimage_d-1.0", "shape": [a.shape[1], a.shape[0]],
                "type": f"uint{8 * itemsize}", "encoding": enc, "size": len(blob)}),
            blob,
            _j({"htype": "dconfig-1.0", "start_time": t0, "stop_time": t1, "real_time": real})]


def encode_end(series: int) -> List[bytes]:
    """The one part of an end message."""
    return [_j({"htype": "dseries_end-1.0", "series": int(series)})]
