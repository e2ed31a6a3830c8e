"""Payload encodings: ``raw``, ``lz4`` and ``bslz4``, decoded straight into frame memory.

Both compressed encodings use the HDF5 filters' framing (LZ4 filter 32004, bitshuffle
32008; ``docs/stream-protocol.md`` section 4), which DECTRIS detectors also put in
their CBOR compression tag, so one decoder serves both protocols.

:func:`decode_into` calls dectris-compression's C ``compression_decompress_buffer``
through ``ctypes`` so a payload decodes straight into the frame's place (its Python
``decompress`` costs a second pass and an allocation; hdf5plugin's bitshuffle was
1.5-1.9x slower: ``bench/README.md``, "What a frame costs"). The C path is checked
once per process against ``decompress`` (:func:`decoder_name`). Without
dectris-compression a numpy + ``lz4`` fallback decodes the same bytes about a
hundred times more slowly. Encoding (producers, simulators) is numpy +
``lz4.block``: no maintained package exposes the bitshuffle+LZ4 encoder.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from streams.errors import CodecError, MissingDependency

__all__ = ["decode_into", "encode", "decoded_size", "lz4_encode", "lz4_decode",
           "bslz4_encode", "bslz4_decode", "bitshuffle_block", "bitunshuffle_block",
           "default_bslz4_block", "decoder_name"]

_HEADER = struct.Struct(">QI")
_C_ERROR = (1 << 64) - 1        # COMPRESSION_ERROR, SIZE_MAX
#: raw big-endian encodings :func:`decode_into` swaps as it copies -> the native type
_SWAPPED = {"raw>u2": "<u2", "raw>u4": "<u4"}
_U32 = struct.Struct(">I")
PAYLOAD_SIZE = "wrong_payload_size"
CORRUPT = "corrupt_payload"


_FOUND: dict = {}


def _dectris() -> Any:
    if "decompress" not in _FOUND:
        try:
            from dectris.compression import decompress
        except ImportError:
            decompress = None
        _FOUND["decompress"] = decompress
    return _FOUND["decompress"]


#: ``CompressionAlgorithm`` of dectris-compression's C API (``src/compression.h``)
_C_ALGORITHM = {"bslz4": 0, "lz4": 1}


def _dectris_into() -> Any:
    """dectris-compression's ``compression_decompress_buffer`` (ctypes), or None when
    the package is missing or its C function does not decode a known payload as its
    Python ``decompress`` does (checked once)."""
    dec = _dectris()
    if dec is None:
        return None
    if "into" not in _FOUND:
        _FOUND["into"] = None
        try:
            import ctypes
            import dectris.compression as dc

            fn = ctypes.CDLL(dc.__file__).compression_decompress_buffer
            fn.restype = ctypes.c_size_t
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                           ctypes.c_size_t, ctypes.c_size_t]
            probe = (np.arange(4099, dtype="<u2") * 7 % 13).astype("<u2")
            for name, blob in (("bslz4", bslz4_encode(probe)),
                               ("lz4", lz4_encode(probe.view(np.uint8)))):
                out = np.zeros_like(probe)
                src = np.frombuffer(blob, np.uint8)
                n = fn(_C_ALGORITHM[name], out.ctypes.data, out.nbytes, src.ctypes.data,
                       src.size, 2)
                if n != out.nbytes or out.tobytes() != dec(blob, name, elem_size=2):
                    return None
            _FOUND["into"] = fn
        except (ImportError, OSError, AttributeError, CodecError, MissingDependency):
            return None
    return _FOUND["into"]


def _lz4_block() -> Any:
    try:
        import lz4.block
    except ImportError:
        raise MissingDependency("lz4", "the lz4/bslz4 encodings without dectris-compression") \
            from None
    return lz4.block


def decoder_name(into: bool = False) -> str:
    """Which implementation decodes lz4/bslz4 here: ``dectris-compression`` or
    ``numpy+lz4``; ``into``: say also whether it decodes straight into the frame
    (``dectris-compression (C, into the frame)``) or into a copy."""
    if _dectris() is None:
        return "numpy+lz4"
    if not into:
        return "dectris-compression"
    return "dectris-compression (C, into the frame)" if _dectris_into() is not None \
        else "dectris-compression (decompress + copy)"


def default_bslz4_block(itemsize: int) -> int:
    """bitshuffle's default block, in elements: 8 KiB / itemsize, a multiple of 8, >= 128."""
    return max((8192 // itemsize) // 8 * 8, 128)


def decoded_size(payload: Any) -> int:
    """Decoded size stated by an lz4/bslz4 payload's 12-byte header."""
    if len(payload) < _HEADER.size:
        raise CodecError(CORRUPT, f"compressed payload of {len(payload)} bytes is shorter "
                         "than its 12-byte header")
    return int(_HEADER.unpack_from(payload)[0])


# ---- bit transposition (the bitshuffle of one or more whole blocks) ----

def bitshuffle_block(block: np.ndarray, itemsize: int) -> np.ndarray:
    """Bit-transpose blocks ``(nblocks, n, itemsize)`` uint8 -> ``(nblocks, n*itemsize)``
    (bitshuffle's ``bshuf_trans_bit_elem``; ``docs/stream-protocol.md`` section 4)."""
    nb, n, e = block.shape
    bits = np.unpackbits(block, axis=2, bitorder="little")          # (nb, n, 8e)
    out = np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little")  # (nb, 8e, n/8)
    return out.reshape(nb, n * e)


def bitunshuffle_block(shuffled: np.ndarray, n: int, itemsize: int) -> np.ndarray:
    """Inverse of :func:`bitshuffle_block`: ``(nb, n*itemsize)`` -> ``(nb, n, itemsize)``."""
    nb = shuffled.shape[0]
    bits = np.unpackbits(shuffled.reshape(nb, 8 * itemsize, n // 8), axis=2, bitorder="little")
    return np.packbits(bits.transpose(0, 2, 1), axis=2, bitorder="little")


# ---- encoders (producers, simulators) ----

#: LZ4 block size of DECTRIS detectors (every lz4 image of DECTRIS's Stream V2 test data
#: states 8192 in its header); the HDF5 filter's own default is one block per chunk.
LZ4_BLOCK = 8192


def lz4_encode(data: Any, block_size: int = LZ4_BLOCK) -> bytes:
    """Encode bytes with the HDF5 LZ4 framing in blocks of ``block_size`` (0: one block)."""
    lz4b = _lz4_block()
    mv = memoryview(data).cast("B")
    n = mv.nbytes
    bs = n if block_size <= 0 or block_size > n else block_size
    parts = [_HEADER.pack(n, bs)]
    for i in range(0, n, max(bs, 1)):
        chunk = mv[i:i + bs]
        c = lz4b.compress(chunk, store_size=False)
        if len(c) >= len(chunk):       # as the HDF5 filter does: store incompressible blocks
            c = bytes(chunk)
        parts += [_U32.pack(len(c)), c]
    return b"".join(parts)


def bslz4_encode(array: np.ndarray, block: int = 0) -> bytes:
    """Encode an array with bitshuffle+LZ4 (HDF5 framing); ``block`` in elements, 0 = default."""
    lz4b = _lz4_block()
    a = np.ascontiguousarray(array)
    e = a.itemsize
    count = a.size
    bs = block or default_bslz4_block(e)
    if bs % 8:
        raise ValueError(f"bitshuffle block of {bs} elements is not a multiple of 8")
    raw = a.reshape(-1).view(np.uint8)
    parts = [_HEADER.pack(count * e, bs * e)]
    full = count // bs
    if full:
        for blk in bitshuffle_block(raw[:full * bs * e].reshape(full, bs, e), e):
            c = lz4b.compress(blk, store_size=False)
            parts += [_U32.pack(len(c)), c]
    last = (count % bs) - (count % bs) % 8
    if last:
        start = full * bs * e
        blk = bitshuffle_block(raw[start:start + last * e].reshape(1, last, e), e)[0]
        c = lz4b.compress(blk, store_size=False)
        parts += [_U32.pack(len(c)), c]
    parts.append(raw[(count - count % 8) * e:].tobytes())
    return b"".join(parts)


def encode(encoding: str, array: np.ndarray) -> bytes:
    """Payload of ``array`` (C order) in ``encoding``: ``raw``, ``lz4`` or ``bslz4``."""
    a = np.ascontiguousarray(array)
    if encoding == "raw":
        return a.tobytes()
    if encoding == "lz4":
        return lz4_encode(a.reshape(-1).view(np.uint8))
    if encoding == "bslz4":
        return bslz4_encode(a)
    raise ValueError(f"unknown encoding {encoding!r}")


# ---- decoders (receivers) ----

def _by_dectris(dec: Any, payload: Any, encoding: str, **kw: Any) -> bytes:
    try:
        return bytes(dec(payload, encoding, **kw))
    except Exception as err:
        raise CodecError(CORRUPT, f"{encoding} payload does not decode: {err}") from None


def lz4_decode(payload: Any) -> bytes:
    """Decode an HDF5-framed LZ4 payload (dectris-compression, else numpy+lz4)."""
    dec = _dectris()
    if dec is not None:
        return _by_dectris(dec, payload, "lz4")
    lz4b = _lz4_block()
    mv = memoryview(payload).cast("B")
    total, bs = _HEADER.unpack_from(mv)
    out = bytearray(total)
    pos, done = _HEADER.size, 0
    try:
        while done < total:
            n = min(bs, total - done)
            (stored,) = _U32.unpack_from(mv, pos)
            pos += 4
            chunk = mv[pos:pos + stored]
            if len(chunk) != stored:
                raise ValueError("truncated block")
            out[done:done + n] = chunk if stored == n else lz4b.decompress(
                chunk, uncompressed_size=n)
            pos += stored
            done += n
    except Exception as err:
        raise CodecError(CORRUPT, f"lz4 payload does not decode: {err}") from None
    return bytes(out)


def bslz4_decode(payload: Any, itemsize: int) -> bytes:
    """Decode a bitshuffle+LZ4 payload with element size ``itemsize``."""
    dec = _dectris()
    if dec is not None:
        return _by_dectris(dec, payload, "bslz4", elem_size=itemsize)
    lz4b = _lz4_block()
    mv = memoryview(payload).cast("B")
    total, bbytes = _HEADER.unpack_from(mv)
    e = itemsize
    if total % e or bbytes % e or (bbytes // e) % 8 or bbytes == 0:
        raise CodecError(CORRUPT, f"bslz4 header: {total} bytes in blocks of {bbytes} "
                         f"bytes does not fit element size {itemsize}")
    count, bs = total // e, bbytes // e
    out = np.empty(total, np.uint8)
    pos = _HEADER.size
    sizes = [bs] * (count // bs)
    last = (count % bs) - (count % bs) % 8
    if last:
        sizes.append(last)
    done = 0
    try:
        for n in sizes:
            (stored,) = _U32.unpack_from(mv, pos)
            pos += 4
            shuffled = lz4b.decompress(mv[pos:pos + stored], uncompressed_size=n * e)
            if len(shuffled) != n * e:
                raise ValueError(f"block decoded to {len(shuffled)} bytes, not {n * e}")
            pos += stored
            block = np.frombuffer(shuffled, np.uint8).reshape(1, n * e)
            out[done * e:(done + n) * e] = bitunshuffle_block(block, n, e).reshape(-1)
            done += n
        tail = mv[pos:]
        if len(tail) != (count - done) * e:
            raise ValueError(f"{len(tail)} trailing bytes, expected {(count - done) * e}")
        out[done * e:] = np.frombuffer(tail, np.uint8)
    except Exception as err:
        raise CodecError(CORRUPT, f"bslz4 payload does not decode: {err}") from None
    return out.tobytes()


def _contiguous(payload: Any) -> Any:
    """``payload``'s bytes as a uint8 array without a copy, or None (a buffer numpy
    cannot view, e.g. non-contiguous: decoded through the Python API instead)."""
    try:
        return np.frombuffer(payload, np.uint8)
    except (TypeError, ValueError, BufferError):
        return None


def decode_into(encoding: str, payload: Any, out: np.ndarray) -> None:
    """Decode ``payload`` (``raw``, ``lz4``, ``bslz4``, or a receiver's byte-swapping
    ``raw>u2``/``raw>u4``) into the C-contiguous ``out``; CodecError
    (``wrong_payload_size``, ``corrupt_payload``)."""
    dst = out.reshape(-1).view(np.uint8)
    if encoding == "raw":
        if len(payload) != dst.size:
            raise CodecError(PAYLOAD_SIZE, f"raw payload of {len(payload)} bytes, expected "
                             f"{dst.size}")
        dst[:] = np.frombuffer(payload, np.uint8)
        return
    if encoding in _SWAPPED:      # big-endian raw pixels (Merlin's MQ1): swapped as copied
        if len(payload) != dst.size or dst.size % out.itemsize:
            raise CodecError(PAYLOAD_SIZE, f"{encoding} payload of {len(payload)} bytes, "
                             f"expected {dst.size}")
        np.copyto(dst.view(_SWAPPED[encoding]).reshape(-1),
                  np.frombuffer(payload, ">" + _SWAPPED[encoding][1:]))
        return
    if encoding not in ("lz4", "bslz4"):
        raise CodecError("unknown_encoding", f"encoding {encoding!r}")
    stated = decoded_size(payload)
    if stated != dst.size:
        raise CodecError(PAYLOAD_SIZE, f"{encoding} payload decodes to {stated} bytes, "
                         f"expected {dst.size}")
    into = _dectris_into()
    src = _contiguous(payload) if into is not None and dst.flags.c_contiguous else None
    if src is not None:
        n = into(_C_ALGORITHM[encoding], dst.ctypes.data, dst.size, src.ctypes.data,
                 src.size, out.itemsize)
        if n != dst.size:
            raise CodecError(CORRUPT, f"{encoding} payload does not decode (dectris-"
                             f"compression: {'error' if n == _C_ERROR else f'{n} bytes'})")
        return
    data = lz4_decode(payload) if encoding == "lz4" else bslz4_decode(payload, out.itemsize)
    if len(data) != dst.size:
        raise CodecError(PAYLOAD_SIZE, f"{encoding} payload decoded to {len(data)} bytes, "
                         f"expected {dst.size}")
    dst[:] = np.frombuffer(data, np.uint8)
