"""The example producer of docs/stream-protocol.md, run as written against mpistage's
receivers: the page stays true, and a producer that never imports mpistage works."""
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from streams import Receiver, write_rendezvous
from streams.security import StreamSecurity

DOC = Path(__file__).resolve().parents[2] / "docs" / "stream-protocol.md"


@pytest.mark.timeout(120)
def test_the_documented_producer_streams_a_complete_scan(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    rv = tmp_path / "rendezvous.json"
    code = blocks[0].replace('"rendezvous.json"', repr(str(rv)))
    assert "stager" not in code
    frames = {}

    def deliver(part):
        for f, img in zip(part.frames, part.data):
            frames[int(f)] = img.copy()

    sec = StreamSecurity.for_job(str(rv))        # CURVE, as a receiving job sets it up
    rxs = [Receiver(deliver, index=i, count=2, partition_frames=4, security=sec,
                    token=sec.token) for i in range(2)]     # the job's token, required
    reports = []
    threads = [threading.Thread(target=lambda rx=rx: reports.extend(rx.serve(1, timeout=90)))
               for rx in rxs]
    # start the producer first: it must wait for the rendezvous file
    prod = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    eps = [rx.bind() for rx in rxs]
    for t in threads:
        t.start()
    write_rendezvous(rv, eps, None, sec.server_public, sec.client_certificate,
                     viewer_certificate=sec.viewer_certificate, token=sec.token)
    out, _ = prod.communicate(timeout=90)
    assert prod.returncode == 0, out
    for t in threads:
        t.join(90)
    for rx in rxs:
        rx.close()
    assert len(reports) == 2 and all(r.ok and r.ended_by == "end" for r in reports)
    assert all(r.lost_in_transport == 0 and not r.rejected and not r.refused for r in reports)
    assert sorted(frames) == list(range(64))
    assert all((frames[f] == f).all() and frames[f].shape == (256, 256) for f in frames)
    assert frames[5].dtype == np.dtype("<u2")
