"""A producer never waits in silence (issue 41): a send blocked because no receiver
takes its messages says so, naming the receiver, until one does; real ZeroMQ sockets."""
from __future__ import annotations

import socket
import threading
import time

import zmq

import streams.protocols.native.producer as producer_module
from streams.protocols.native.producer import Producer


def test_a_blocked_send_says_what_it_waits_for_and_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(producer_module, "BLOCKED_NOTE", 0.2)
    with socket.socket() as s:      # a free port nobody listens on yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = f"tcp://127.0.0.1:{port}"
    got = []

    def late_receiver() -> None:
        time.sleep(1.5)
        pull = zmq.Context.instance().socket(zmq.PULL)
        pull.bind(ep)
        while pull.poll(20000) and got[-1:] != [b"9"]:
            got.append(pull.recv_multipart()[0])
        pull.close(linger=0)

    t = threading.Thread(target=late_receiver, daemon=True)
    t.start()
    p = Producer([ep], 0, sndhwm=1, linger=5)   # a queue of one message: the second waits
    try:
        for i in range(10):
            p.send_parts(0, [str(i).encode(), b""])
    finally:
        p.close()
    t.join(30)
    assert got == [str(i).encode() for i in range(10)]
    err = capsys.readouterr().err
    assert f"receiver 0 ({ep}) has taken nothing for" in err, err
    assert "is the job still reading?" in err
