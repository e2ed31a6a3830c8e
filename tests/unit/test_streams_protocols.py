"""The table of stream protocols: rows name their classes, the options choose one."""
import pytest

from streams import protocols


def test_the_builtin_rows_and_the_shorthand():
    assert protocols.chosen(None, None).routing == "modulo"
    assert protocols.chosen(None, "tcp://det:31001").name == "stream2"
    assert protocols.chosen("stream2", "tcp://det:31001").routing == "any"
    with pytest.raises(ValueError, match="contradicts"):
        protocols.chosen("native", "tcp://det:31001")
    with pytest.raises(ValueError, match="unknown stream protocol 'nope'.*native, stream2"):
        protocols.protocol("nope")


def test_a_plug_in_by_row_or_by_module_class():
    import tests.toyprotocol  # noqa: F401  (registers "lines")

    assert "lines" in protocols.ROWS.names() and protocols.protocol("lines").routing == "any"
    by_path = protocols.protocol("tests.toyprotocol:Lines")
    assert by_path.routing == "any" and by_path.name == "lines"


def test_options_ask_the_protocol():
    from streams.job.session import SessionOptions

    with pytest.raises(ValueError, match="give --insecure"):
        SessionOptions.resolve(rendezvous="/x/rv.json", out="/x/o",
                               protocol="tests.toyprotocol:Lines", env={})
    SessionOptions.resolve(rendezvous="/x/rv.json", out="/x/o", protocol="lines", insecure=True,
                           env={})
    with pytest.raises(ValueError, match="give --stream2 ENDPOINT"):
        SessionOptions.resolve(rendezvous="/x/rv.json", out="/x/o", protocol="stream2", env={})
    with pytest.raises(ValueError, match="--allow-from is for Stream V2"):
        SessionOptions.resolve(rendezvous="/x/rv.json", out="/x/o", allow_from="1.2.3.4", env={})


def test_a_protocol_declares_its_own_options_and_their_flags():
    from streams.cli import add_arguments
    from streams.job.session import SessionOptions, _resolve

    v2 = dict(rendezvous="/x/rv.json", out="/x/o", stream2="tcp://det:31001")
    o = SessionOptions.resolve(env={"STAGER_STREAM_V2_DECODE_THREADS": "3"}, **v2,
                               v2_grace="2.5", v2_pixel_mask=None, v2_hold_memory="48")
    assert o.protocol_options == {"v2_grace": 2.5, "v2_decode_threads": 3,
                                  "v2_pixel_mask": False, "v2_hold_memory": 48.0}
    assert not hasattr(o, "v2_grace")           # not an option of the job
    with pytest.raises(ValueError, match="v2_grace must be a finite number > 0"):
        SessionOptions.resolve(env={}, **v2, v2_grace=0)
    # an option of another protocol is refused, an unknown keyword is a TypeError
    with pytest.raises(ValueError, match="--v2-pixel-mask: not an option of the native"):
        SessionOptions.resolve(env={}, rendezvous="/x/rv.json", out="/x/o", v2_pixel_mask=True)
    assert SessionOptions.resolve(env={}, rendezvous="/x/rv.json", out="/x/o",
                                  v2_grace=None).protocol_options == {}
    with pytest.raises(TypeError, match="v2_nope"):
        SessionOptions.resolve(env={}, **v2, v2_nope=1)
    # options made without resolve(): the job's resolution fills the protocol's defaults
    made = SessionOptions(**v2, protocol_options={"v2_decode_threads": "2"})
    assert _resolve(made).protocol_options == {"v2_grace": 1.0, "v2_decode_threads": 2,
                                               "v2_pixel_mask": False, "v2_hold_memory": None}
    # the flags of stager stream receive come from the rows
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["receive", "--rendezvous", "r", "--out", "o", "--v2-pixel-mask",
                         "--v2-decode-threads", "2", "--v2-hold-memory", "32"])
    assert (args.v2_pixel_mask, args.v2_decode_threads, args.v2_grace,
            args.v2_hold_memory) == (True, "2", None, "32")
