"""Hostile Merlin data through a real receiving job (``mpirun -n 2 stager stream receive
--protocol merlin``): a detector-side TCP server whose connections carry a frame before
any header, a header announcing 2^40 frames, a message cut short by the connection's
end, garbage where an MPX prefix must be, a length bomb, a frame shorter than its header
says; each refused and counted by reason in ``rejections.json``, the connection dropped
and made again where the framing is lost, and the acquisition that follows served whole."""
from __future__ import annotations

import json
import shutil
import socket
import threading

import numpy as np
import pytest

from tests.e2e.test_streams_receive import Job

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _frames(n, shape=(16, 16)):
    return np.random.default_rng(5).integers(0, 4096, (n, *shape))


@pytest.mark.timeout(180)
def test_hostile_merlin_data_is_refused_counted_and_the_acquisition_served(tmp_path):
    from streams.protocols.merlin.mpx import MAX_MESSAGE, encode_frame, encode_hdr, encode_message

    fr = _frames(4)
    cut = encode_message(encode_frame(1, fr[0], 12))
    connections = [
        # a frame before any header; 2^40 frames announced; then a message cut short
        encode_message(encode_frame(1, fr[0], 12)) + encode_message(encode_hdr(1 << 40, 2, 12))
        + cut[: len(cut) // 2],
        b"GARBAGE-GARBAGE-GARBAGE",                            # no MPX prefix
        b"MPX,%010d," % (MAX_MESSAGE + 2),                     # a length bomb
        encode_message(encode_hdr(4, 2, 12))                   # the good acquisition, with
        + encode_message(encode_frame(2, fr[1], 12)[:-2])      # a frame 2 bytes short
        + b"".join(encode_message(encode_frame(i + 1, a, 12)) for i, a in enumerate(fr)),
    ]
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(150)
    served = []

    def detector():
        try:
            for data in connections:
                conn, _ = srv.accept()
                conn.sendall(data)
                served.append(len(data))
                if data is connections[0]:
                    conn.close()                     # mid-message: the cut-short case
                    continue
                conn.settimeout(150)
                try:
                    conn.recv(1)                     # until the receiver drops it
                except OSError:
                    pass
                conn.close()
        except OSError:
            pass

    t = threading.Thread(target=detector, daemon=True)
    t.start()
    try:
        job = Job(tmp_path, "--insecure", "--protocol", "merlin", "--merlin-endpoint",
                  f"127.0.0.1:{srv.getsockname()[1]}", "--merlin-scan-shape", "2,2",
                  "--partition-frames", "2", "--timeout", "120", np_=2, nodes=1)
        rc, out, err = job.wait()
    finally:
        srv.close()
    assert rc == 0, out + err
    assert len(served) == 4, served                 # every connection was made
    (rep_path,) = job.out.glob("acquisition-*.json")
    rep = json.loads(rep_path.read_text())
    assert rep["ok"] and rep["frames_complete"] == 4, rep
    rej = json.loads((job.out / "rejections.json").read_text())
    by = rej["by_reason"]
    assert by.get("unknown_scan") == 1, rej             # the frame before any header
    assert by.get("out_of_range") == 1, rej             # 2^40 frames, named
    assert any("1099511627776" in e for e in rej["examples"]), rej["examples"]
    assert by.get("wrong_payload_size") == 2, rej       # cut short; 2 bytes short
    assert by.get("malformed_header") == 1, rej         # garbage
    assert by.get("too_large") == 1, rej                # the length bomb
    assert "job: " in out and "messages rejected" in out, out
