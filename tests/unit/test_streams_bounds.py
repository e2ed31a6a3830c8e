"""The pure parts of a bounded, role-checked receiving job: a scan's cost at ``begin``,
the open-scan bound, a second copy compared by digest, the job's token, the roles' keys."""
import numpy as np
import pytest

from analyses.contract import FrameSum
from streams.assemble import Assembler
from streams.bounds import STATE_COPIES, scan_cost
from streams.codecs import encode
from streams.protocol import Begin, Data, End, ScanGeometry
from streams.protocols.native.headers import encode_begin, encode_data, encode_end, feed

G = ScanGeometry("s", 1, 6, 2, (8, 4), "<u2", (2, 3))


def _frames(g, seed=0):
    return np.random.default_rng(seed).integers(1, 60000, (g.frames, *g.shape)).astype(g.dtype)


def _send(a, g, img, f, s, enc="raw"):
    r0, r1 = g.sector_rows(s)
    a.data(Data(g.scan, f, s, r0, r1, enc), encode(enc, img[r0:r1]))


def _assembler(**kw):
    got = {}

    def deliver(p):
        for f, img in zip(p.frames, p.data):
            got[int(f)] = img.copy()
    return Assembler(deliver, **kw), got


# ---- cost ----
def test_scan_cost_adds_partitions_accounting_and_the_analysis_state():
    g = ScanGeometry("c", 1, 100, 4, (16, 16), "<u2", (10, 10))
    c = scan_cost(g, partition_frames=10, local_frames=50, analysis_bytes=1000)
    assert c.partitions == 2 * 10 * 16 * 16 * 2          # two partitions of K frames
    assert c.accounting == 100 * (4 * 9 + 3)              # got + digest per sector; per frame 3
    assert c.analysis == STATE_COPIES * 1000
    assert c.total == c.partitions + c.accounting + c.analysis
    # a scan with fewer local frames than one partition needs one partition only
    assert scan_cost(g, 64, 10).partitions == 64 * 16 * 16 * 2


def test_a_begin_whose_whole_cost_is_over_the_bound_is_refused_naming_it():
    huge = ScanGeometry("huge", 1, 1 << 22, 1, (1, 1), "<u2", (2048, 2048))
    a, _ = _assembler(memory_bytes=256 << 20, partition_frames=1024,
                      job_bytes=FrameSum().scan_bytes)
    # the assembler's own part fits: only the analysis's state makes it too large
    assert a.cost(huge).partitions + a.cost(huge).accounting < 256 << 20
    a.begin(Begin(0, huge))
    assert "huge" not in a.scans and a.rejected == {"too_large": 1}
    assert "analysis, live and output" in a.examples[0] and "(--memory)" in a.examples[0]
    a.begin(Begin(0, G))                       # a reasonable scan still opens
    assert "s" in a.scans


# ---- open scans ----
def test_begins_beyond_max_open_scans_are_refused_and_open_scans_go_on():
    img = _frames(G)
    a, got = _assembler(max_scans=2, partition_frames=1)
    a.begin(Begin(0, G))
    for i in range(5):
        a.begin(Begin(0, ScanGeometry(f"junk{i}", 1, 1, 1, (1, 1), "<u2", (1, 1))))
    assert set(a.scans) == {"s", "junk0"} and a.rejected == {"busy": 4}
    assert "--max-open-scans 2" in a.examples[0] and "the open scans go on" in a.examples[0]
    for f in range(G.frames):
        for s in range(G.sectors):
            _send(a, G, img[f], f, s)
    a.end(End("s", 0, G.frames * G.sectors))
    rep = a.closed["s"]
    assert rep.ok and all((got[f] == img[f]).all() for f in range(G.frames))
    # once the job has served its scans, no new scan opens; the open one goes on
    a.refuse_new = "the job has finalized its --scans 1"
    a.begin(Begin(0, ScanGeometry("late", 1, 1, 1, (1, 1), "<u2", (1, 1))))
    assert "late" not in a.scans and "--scans 1" in a.examples[-1]


def test_a_begin_for_a_name_this_job_served_is_refused_naming_it():
    a, _ = _assembler()
    a.begin(Begin(0, G))
    a.close("s", "end")
    a.begin(Begin(0, G))
    assert "s" not in a.scans and a.rejected == {"scan_name_used": 1}
    assert "already served a scan named s" in a.examples[0]


# ---- duplicates ----
@pytest.mark.parametrize("routing", ["modulo", "any"])
def test_a_second_copy_is_compared_with_the_first(routing):
    img = _frames(G)
    a, got = _assembler(partition_frames=1, routing=routing)
    a.begin(Begin(0, G))
    _send(a, G, img[0], 0, 0)
    _send(a, G, img[0], 0, 0, "lz4")           # equal content, other encoding
    _send(a, G, img[0] + 1, 0, 0)              # other content
    for f in range(G.frames):                   # the rest; frame 0 sector 0 already in
        for s in range(G.sectors):
            if (f, s) != (0, 0):
                _send(a, G, img[f], f, s)
    _send(a, G, img[4] ^ 1, 4, 1)              # after its partition was delivered
    a.end(End("s", 0, None))
    rep = a.closed["s"]
    assert rep.rejected == {"duplicate": 1, "conflicting_duplicate": 2}
    assert rep.conflicting == {0: [0], 4: [1]}
    assert not rep.ok and "2 frame(s) (0, 4) arrived twice with different content" \
        in rep.result_invalid
    assert "RESULT INVALID" in rep.summary()
    assert (got[0] == img[0]).all() and (got[4] == img[4]).all()      # the first copy kept


def test_a_corrupt_second_copy_is_corrupt_not_a_conflict():
    img = _frames(G)
    a, _ = _assembler(partition_frames=1)
    a.begin(Begin(0, G))
    _send(a, G, img[0], 0, 0)
    r0, r1 = G.sector_rows(0)
    a.data(Data("s", 0, 0, r0, r1, "lz4"), b"\0\0\0\x10not lz4 at all")
    assert sum(a.rejected.values()) == 1 and a.rejected.keys() <= {"corrupt_payload",
                                                                      "wrong_payload_size"}
    assert "(a second copy)" in a.examples[0] and not a.scans["s"].report.conflicting


def test_conflicting_frames_merge_across_receivers():
    from streams.accounting import ScanReport

    a, b = ScanReport.empty(G), ScanReport.empty(G)
    a.conflicting, b.conflicting = {1: [0]}, {1: [1], 3: [0]}
    m = a.merge(b)
    assert m.conflicting == {1: [0, 1], 3: [0]} and m.to_dict()["frames_conflicting"] == 2


# ---- token ----
def test_a_begin_without_the_job_s_token_is_refused():
    a, _ = _assembler()
    token = "ab" * 16
    feed(a, [encode_begin(G, 0), b""], token)
    feed(a, [encode_begin(G, 0, "cd" * 16), b""], token)
    assert not a.scans and a.rejected == {"wrong_token": 2}
    assert "without the job's token" in a.examples[0]
    assert "with another job's token" in a.examples[1]
    feed(a, [encode_begin(G, 0, token), b""], token)
    assert "s" in a.scans
    r0, r1 = G.sector_rows(0)
    feed(a, [encode_data("s", 0, 0, (r0, r1)), b"\0" * ((r1 - r0) * 4 * 2)], token)
    feed(a, [encode_end("s", 0, 1), b""], token)
    assert a.closed["s"].received_data == 1
    # a receiver not given a token (a plain Receiver in a test, Stream V2) takes any begin
    b, _ = _assembler()
    feed(b, [encode_begin(G, 0), b""])
    assert "s" in b.scans


def test_a_malformed_token_is_a_malformed_header():
    from streams.protocols.native.headers import decode_header

    import msgpack
    h = msgpack.unpackb(encode_begin(G, 0, "ab" * 16))
    h["token"] = 5
    with pytest.raises(Exception, match="token must be a string"):
        decode_header(msgpack.packb(h))


# ---- roles ----
def test_viewer_keys_are_admitted_on_the_live_socket_only(tmp_path):
    from streams.security import DOMAIN_DATA, DOMAIN_LIVE, StreamSecurity

    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"))
    assert sec.client_certificate.endswith(".client.key_secret")
    assert sec.viewer_certificate.endswith(".viewer.key_secret")
    assert len(sec.authorized) == 1 and len(sec.viewers) == 1
    assert not (sec.authorized & sec.viewers)
    assert sec.keys_of(DOMAIN_DATA) == sec.authorized
    assert sec.keys_of(DOMAIN_LIVE) == sec.authorized | sec.viewers
    assert sec.token and len(sec.token) == 32 and "token" not in str(sec.describe())


def test_authorized_keys_with_a_viewers_directory(tmp_path):
    import os

    import zmq.auth

    from streams.errors import StreamError
    from streams.security import StreamSecurity

    keys = tmp_path / "keys"
    (keys / "viewers").mkdir(parents=True)
    prod, _ = zmq.auth.create_certificates(str(keys), "beamline")
    view, _ = zmq.auth.create_certificates(str(keys / "viewers"), "alice")
    for p in list(keys.glob("*.key_secret")) + list((keys / "viewers").glob("*.key_secret")):
        os.unlink(p)
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"), str(keys))
    assert sec.client_certificate is None and sec.viewer_certificate is None
    assert sec.authorized == {zmq.auth.load_certificate(prod)[0].decode()}
    assert sec.viewers == {zmq.auth.load_certificate(view)[0].decode()}
    # without DIR/viewers/ the job writes a viewers' certificate of its own
    os.unlink(view)
    os.rmdir(keys / "viewers")
    sec = StreamSecurity.for_job(str(tmp_path / "rv.json"), str(keys))
    assert sec.viewer_certificate == str(tmp_path / "rv.json.viewer.key_secret")
    # one key in both roles: refused
    (keys / "viewers").mkdir()
    os.link(prod, keys / "viewers" / "beamline.key")
    with pytest.raises(StreamError, match="both a producer's and a viewer's"):
        StreamSecurity.for_job(str(tmp_path / "rv.json"), str(keys))


def test_rendezvous_carries_token_and_viewer_certificate(tmp_path):
    import json

    from streams.errors import RendezvousError
    from streams.protocols.native.rendezvous import read_rendezvous, write_rendezvous

    p = tmp_path / "rv.json"
    rv = write_rendezvous(p, ["tcp://h:1"], viewer_certificate="/v.key_secret",
                          token="0123456789abcdef" * 2)
    assert read_rendezvous(p) == rv and rv.token == "0123456789abcdef" * 2
    d = json.loads(p.read_text())
    d["token"] = "not hex"
    p.write_text(json.dumps(d))
    with pytest.raises(RendezvousError, match="token"):
        read_rendezvous(p)
