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

    assert "lines" in protocols.names() and protocols.protocol("lines").routing == "any"
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
