"""The pieces of the live view that need no job: per-receiver progress, what a page is
sent, and the token guard of the web server (a real Tornado server on loopback)."""
from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest


def test_progress_per_receiver_counts_each_receiver_s_own_frames():
    from streams.accounting import ScanReport
    from streams.job.coordinator import Coordinator
    from streams.job.roles import assign_roles
    from streams.protocol import ScanGeometry

    c = Coordinator(assign_roles([0, 0, 1, 1], 1), "modulo")
    g = ScanGeometry("s", 2, 8, 2, (4, 4), "<u2", (2, 4))
    rep = ScanReport.empty(g, c.expected_at(g, 1))
    rep.got[[1, 3], :] = True         # receiver 1 (odd frames): 1 and 3 whole,
    rep.got[5, 0] = True              # 5 half
    rep.rejected["malformed_header"] += 2
    c.snapshot(1, rep, 0.0, 0.0)
    p = c.progress("s", 1.0)
    r0, r1 = p["per_receiver"]
    assert r0 == {"receiver": 0, "node": 0, "frames": 4, "complete": 0, "incomplete": 0,
                  "not_arrived": 4, "rejected": 0, "refused": 0, "closed": False,
                  "heard": False}
    assert r1 == {"receiver": 1, "node": 1, "frames": 4, "complete": 2, "incomplete": 1,
                  "not_arrived": 1, "rejected": 2, "refused": 0, "closed": False,
                  "heard": True}
    assert p["complete"] == r0["complete"] + r1["complete"]


def _partial(images, valid):
    from streams.view.results import Partial

    return Partial("s1", 1.5, False, {"frames": 4, "complete": 2}, images, valid)


def test_a_page_gets_exact_float64_values_and_big_images_binned(monkeypatch):
    from streams.view import server

    a = np.arange(6, dtype=np.int64).reshape(2, 3) * 7
    big = np.arange(16.0).reshape(4, 4)
    monkeypatch.setattr(server, "MAX_PIXELS", 6)
    m = json.loads(server.encode_partial(_partial(
        {"a": a, "big": big, "vector": np.ones(3)}, np.array([[1, 0, 1], [0, 0, 1]], bool))))
    assert [i["name"] for i in m["images"]] == ["a", "big"]      # 2-D buffers only
    got = np.frombuffer(base64.b64decode(m["images"][0]["data"]), "<f8").reshape(2, 3)
    assert np.array_equal(got, a) and m["images"][0]["binned"] == 1
    b = m["images"][1]
    assert b["shape"] == [2, 2] and b["binned"] == 2
    assert np.array_equal(np.frombuffer(base64.b64decode(b["data"]), "<f8"),
                          big.reshape(2, 2, 2, 2).mean(axis=(1, 3)).ravel())
    assert list(base64.b64decode(m["valid"]["data"])) == [1, 0, 1, 0, 0, 1]
    assert m["progress"]["complete"] == 2 and m["scan"] == "s1" and m["final"] is False


def test_the_token_guards_the_page_and_the_websocket_and_pages_get_the_latest():
    pytest.importorskip("tornado")
    import tornado.httpclient
    import tornado.httpserver
    import tornado.netutil
    import tornado.websocket

    from streams.view.server import _app, _State

    async def main():
        state = _State()
        state.put("scan:s1", '{"type": "scan", "n": 1}')
        socks = tornado.netutil.bind_sockets(0, "127.0.0.1")
        srv = tornado.httpserver.HTTPServer(_app(state, "right"))
        srv.add_sockets(socks)
        base = f"127.0.0.1:{socks[0].getsockname()[1]}"
        http = tornado.httpclient.AsyncHTTPClient()
        try:
            for url in (f"http://{base}/", f"http://{base}/?token=wrong",
                        f"http://{base}/ws?token=wrong"):
                r = await http.fetch(url, raise_error=False)
                assert r.code == 403 and r.body == b"", (url, r.code, r.body)
            with pytest.raises(tornado.httpclient.HTTPClientError) as e:
                await tornado.websocket.websocket_connect(f"ws://{base}/ws?token=wrong")
            assert e.value.code == 403
            r = await http.fetch(f"http://{base}/?token=right")
            assert r.code == 200 and b"window.mpistage" in r.body
            ws = await tornado.websocket.websocket_connect(f"ws://{base}/ws?token=right")
            assert json.loads(await ws.read_message())["n"] == 1     # what came before
            for n in (2, 3):
                state.put("scan:s1", json.dumps({"type": "scan", "n": n}))
            got = [json.loads(await ws.read_message())["n"]]
            while got[-1] != 3:
                got.append(json.loads(await ws.read_message())["n"])
            assert got in ([2, 3], [3])         # the latest always comes; older may not
            ws.close()
        finally:
            srv.stop()

    asyncio.run(main())


def test_a_page_s_frame_request_is_answered_to_it_with_the_frame_or_the_refusal():
    pytest.importorskip("tornado")
    import tornado.httpserver
    import tornado.netutil
    import tornado.websocket

    from streams.view.results import Frame, FrameRefused
    from streams.view.server import _app, _State

    frame = np.arange(12, dtype="<u2").reshape(3, 4)
    asked = []

    def fetch(scan, index):
        asked.append((scan, index))
        if index == 1:
            return Frame(scan, index, frame, True, "spill")
        return FrameRefused("not any more", "not_held")

    async def main():
        socks = tornado.netutil.bind_sockets(0, "127.0.0.1")
        srv = tornado.httpserver.HTTPServer(_app(_State(), "t", fetch))
        srv.add_sockets(socks)
        ws = await tornado.websocket.websocket_connect(
            f"ws://127.0.0.1:{socks[0].getsockname()[1]}/ws?token=t")
        try:
            for bad in ("nonsense", json.dumps({"type": "frame", "scan": "s", "index": -1})):
                await ws.write_message(bad)                 # ignored: nothing comes back
            await ws.write_message(json.dumps({"type": "frame", "scan": "s", "index": 1}))
            ok = json.loads(await ws.read_message())
            await ws.write_message(json.dumps({"type": "frame", "scan": "s", "index": 2}))
            no = json.loads(await ws.read_message())
        finally:
            ws.close()
            srv.stop()
        return ok, no

    ok, no = asyncio.run(main())
    assert asked == [("s", 1), ("s", 2)]
    data = np.frombuffer(base64.b64decode(ok["data"]), "<f8").reshape(ok["shape"])
    assert np.array_equal(data, frame) and ok["where"] == "spill" and ok["complete"]
    assert no["refused"] == "not_held" and "not any more" in no["why"]


def test_the_live_plot_redraws_one_figure_with_each_partial():
    pytest.importorskip("matplotlib")
    from streams.view.results import Partial
    from streams.view.plot import LivePlot

    rng = np.random.default_rng(1)
    full = {"a": rng.random((4, 5)), "frame": rng.random((3, 3))}

    def partial(n, final=False):
        valid = np.zeros((4, 5), bool)
        valid.flat[:n] = True
        images = {"a": np.where(valid, full["a"], 0.0), "frame": full["frame"] * n,
                  "line": np.arange(3.0)}                       # not 2-D: not shown
        return Partial("s1", 0.0, final, {"frames": 20, "complete": n}, images, valid)

    plot = LivePlot(display=False)
    plot.update(partial(5))
    fig = plot.fig
    first = plot.image("a")
    assert plot.names == ["a", "frame"] and len(fig.axes) == 4     # two images, two bars
    assert np.isnan(first.flat[5:]).all() and np.allclose(first.flat[:5], full["a"].flat[:5])
    plot.update(partial(20, final=True))
    assert plot.fig is fig and len(fig.axes) == 4 and plot.updates == 2   # the same figure
    assert np.allclose(plot.image("a"), full["a"])
    assert np.allclose(plot.image("frame"), full["frame"] * 20)
    assert "20/20 complete" in fig._suptitle.get_text() and "final" in fig._suptitle.get_text()
    assert plot._repr_png_().startswith(b"\x89PNG")


def test_a_final_result_whose_end_failed_says_why_and_a_partial_never_does():
    """watch, the page and attach() tell a failed end by one rule (issue 41)."""
    from streams.view.results import Partial, failed_end

    def partial(final, **progress):
        return Partial("s1", 0.0, final, dict(frames=4, **progress), {}, np.ones((2, 2), bool))

    assert failed_end({"served": True}) is None and partial(True, served=True).failed is None
    why = "scan s1: not drained (OUT/s1.h5 is not mpistage's); kept in OUT/s1.undrained-x"
    assert partial(True, served=True, failed=why).failed == why
    assert "not served" in partial(True, served=False).failed
    assert partial(False, served=False, failed=why).failed is None   # not the end yet
