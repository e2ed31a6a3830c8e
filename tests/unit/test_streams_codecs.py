"""raw / lz4 / bslz4 payloads: round trips, the bit transposition by its definition, both
decoders (dectris-compression and the numpy+lz4 fallback), and size/corruption errors."""
import struct

import numpy as np
import pytest

from streams import codecs
from streams.errors import CodecError

SIZES = [1, 7, 8, 9, 100, 2047, 2048, 4096, 4100, 8200, 40000]
DTYPES = ["|u1", "<u2", "<u4", "<i4", "<f4", "<u8", "<f8"]


@pytest.fixture(params=["dectris-compression", "numpy+lz4"])
def decoder(request, monkeypatch):
    if request.param == "numpy+lz4":
        monkeypatch.setattr(codecs, "_dectris", lambda: None)
    elif codecs._dectris() is None:
        pytest.skip("dectris-compression is not installed here (pip install "
                    "dectris-compression); the numpy+lz4 fallback is tested instead")
    assert codecs.decoder_name() == request.param
    return request.param


def _data(n, dt, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.poisson(2, n) * rng.integers(0, 3, n)).astype(dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("enc", ["raw", "lz4", "bslz4"])
def test_round_trip(decoder, enc, dt):
    for n in SIZES:
        a = _data(n, dt, n)
        out = np.full_like(a, 7)
        codecs.decode_into(enc, codecs.encode(enc, a), out)
        assert np.array_equal(out, a), (enc, dt, n)


def naive_bitshuffle(block: np.ndarray) -> bytes:
    """bitshuffle's definition, bit by bit: output bit (k, i) = bit k of element i."""
    n, e = block.shape
    out = np.zeros((8 * e, n // 8), np.uint8)
    for i in range(n):
        for k in range(8 * e):
            if block[i, k // 8] >> (k % 8) & 1:
                out[k, i // 8] |= 1 << (i % 8)
    return out.tobytes()


@pytest.mark.parametrize("e", [1, 2, 4])
def test_bit_transposition_is_bitshuffles(e):
    rng = np.random.default_rng(e)
    block = rng.integers(0, 256, (64, e), dtype=np.uint8)
    got = codecs.bitshuffle_block(block[None], e)[0].tobytes()
    assert got == naive_bitshuffle(block)
    back = codecs.bitunshuffle_block(np.frombuffer(got, np.uint8)[None], 64, e)
    assert np.array_equal(back[0], block)
    one = np.zeros((8, 1), np.uint8)
    one[0, 0] = 1                                   # element 0 = 1 -> first byte 0b1
    assert codecs.bitshuffle_block(one[None], 1)[0].tobytes() == b"\x01" + b"\x00" * 7


def test_bslz4_byte_layout():
    """Header = uint64 BE size + uint32 BE block bytes; blocks; then count % 8 raw elements."""
    a = np.arange(4096 + 8 + 5, dtype="<u2")        # one full block, an 8-element block, 5 left
    p = codecs.bslz4_encode(a)
    total, bbytes = struct.unpack(">QI", p[:12])
    assert (total, bbytes) == (a.nbytes, 4096 * 2)
    assert p[-10:] == a[-5:].tobytes()              # the leftover elements, uncompressed
    pos, blocks = 12, 0
    while pos < len(p) - 10:
        (n,) = struct.unpack(">I", p[pos:pos + 4])
        pos += 4 + n
        blocks += 1
    assert pos == len(p) - 10 and blocks == 2


def test_lz4_byte_layout_and_stored_blocks():
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, 20000, dtype=np.uint8)   # incompressible: stored as is
    p = codecs.lz4_encode(noise, 8192)
    assert struct.unpack(">QI", p[:12]) == (20000, 8192)
    assert struct.unpack(">I", p[12:16]) == (8192,) and p[16:16 + 8192] == noise[:8192].tobytes()
    assert codecs.lz4_decode(p) == noise.tobytes()


def test_default_bslz4_block_is_bitshuffles():
    assert [codecs.default_bslz4_block(e) for e in (1, 2, 4, 8, 64)] == [8192, 4096, 2048,
                                                                          1024, 128]


def test_wrong_sizes_and_corruption(decoder):
    a = _data(1000, "<u2")
    out = np.empty(999, "<u2")
    for enc in ("raw", "lz4", "bslz4"):
        with pytest.raises(CodecError) as e:
            codecs.decode_into(enc, codecs.encode(enc, a), out)
        assert e.value.reason == "wrong_payload_size"
    good = np.empty_like(a)
    for enc in ("lz4", "bslz4"):
        p = codecs.encode(enc, a)
        for broken in (p[:5], p[:40], p[:12] + b"\xff" * (len(p) - 12)):
            with pytest.raises(CodecError) as e:
                codecs.decode_into(enc, broken, good)
            assert e.value.reason in ("corrupt_payload", "wrong_payload_size")


def test_dectris_compression_decodes_straight_into_the_frame():
    """With dectris-compression, its C function decodes into the destination (checked
    once against its Python API); a payload cut short is corrupt, never half-written
    silently; a non-contiguous payload goes through the Python API."""
    if codecs._dectris() is None:
        pytest.skip("dectris-compression is not installed here")
    assert codecs.decoder_name(into=True) == "dectris-compression (C, into the frame)"
    a = _data(4100, "<u2")
    blob = codecs.encode("bslz4", a)
    out = np.zeros_like(a)
    codecs.decode_into("bslz4", memoryview(blob), out)
    assert np.array_equal(out, a)
    with pytest.raises(CodecError) as e:
        codecs.decode_into("bslz4", blob[:-40], np.zeros_like(a))
    assert e.value.reason == "corrupt_payload"
    strided = np.frombuffer(blob + blob, np.uint8).reshape(2, -1)[:, :len(blob) // 2]
    with pytest.raises(CodecError):        # its bytes are not a payload: refused, no crash
        codecs.decode_into("bslz4", memoryview(strided), np.zeros_like(a))


@pytest.mark.parametrize("dt", ["<u2", "<u4"])
def test_big_endian_raw_is_swapped_as_it_is_copied(dt):
    a = _data(1001, dt)
    out = np.zeros_like(a)
    enc = "raw>" + dt[1:]
    codecs.decode_into(enc, a.astype(">" + dt[1:]).tobytes(), out)
    assert np.array_equal(out, a)
    with pytest.raises(CodecError) as e:
        codecs.decode_into(enc, a.astype(">" + dt[1:]).tobytes()[:-1], out)
    assert e.value.reason == "wrong_payload_size"
