"""Detector controls without a detector: the table, URLs, hooks, image counts, and the
command of docs/guide/coming-from-libertem-live.md parsed by the real parser."""
import re
import shlex
from pathlib import Path

import pytest

from streams.controls import ControlError, load_hook, open_control
from streams.controls.simplon import Simplon, images_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "guide" / "coming-from-libertem-live.md"


def test_open_control_by_scheme():
    c = open_control("simplon://dcu:8080", {"control_mode": "passive"})
    assert isinstance(c, Simplon) and not c.active and c.client.base == "http://dcu:8080"
    assert open_control("simplon://dcu", {}).client.base == "http://dcu:80"
    for bad, words in (("dcu:80", "SCHEME://"), ("tango://dcu", "unknown control scheme"),
                       ("simplon://", "SCHEME://")):
        with pytest.raises(ValueError, match=words):
            open_control(bad, {})


def test_hooks(tmp_path):
    f = tmp_path / "engine.py"
    f.write_text("def start(info):\n    return info['series']\n")
    assert load_hook(f"{f}:start")({"series": 3}) == 3
    assert load_hook("json:dumps") is not None and load_hook(None) is None
    for bad in ("nohook", f"{f}:missing", "no_such_module_x:f", "json:__doc__"):
        with pytest.raises(ValueError, match="--on-ready"):
            load_hook(bad)


@pytest.mark.parametrize("mode,nimages,ntrigger,want", [
    ("exte", 1, 64, 64), ("inte", 5, 64, 64), ("exts", 64, 1, 64), ("ints", 8, 8, 64)])
def test_images_per_trigger_mode(mode, nimages, ntrigger, want):
    assert images_of(mode, nimages, ntrigger) == want


def test_an_active_control_needs_the_whole_scan_shape():
    c = Simplon("simplon://127.0.0.1:9", {"control_mode": "active"})
    c.client.timeout = 2
    with pytest.raises(ControlError, match="unreachable"):
        c.prepare((8, 8))            # the version call names the detector it cannot reach


def test_the_guide_command_parses_with_the_real_options():
    """The page's command: every flag a real option, every value parsed strictly."""
    import argparse

    from core.options import resolve
    from streams import cli
    from streams.controls import OPTIONS
    from streams.job.session import SESSION_OPTIONS, SessionOptions

    block = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)[0]
    words = shlex.split(block.replace("\\\n", " "), comments=True)
    words = words[words.index("stream"):]            # after "mpirun -n 8 stager"
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    cli.add_arguments(sub.add_parser("stream"))
    args = ap.parse_args(words)
    assert args.control == "simplon://dcu:80" and args.dectris_scan_shape == "128,128"
    settings = resolve(OPTIONS, {o.name: getattr(args, o.name) for o in OPTIONS}, {})
    assert settings["trigger_mode"] == "exte" and settings["on_ready"] == "scan_engine.py:start"
    c = open_control(args.control, settings)
    assert c.active and c.client.base == "http://dcu:80"
    from streams import protocols

    given = {o.name: getattr(args, o.name) for o in SESSION_OPTIONS if hasattr(args, o.name)}
    given.update({o.name: getattr(args, o.name) for o in protocols.options()},
                 rendezvous="/tmp/rv.json", out="/tmp/out")
    opts = SessionOptions.resolve(env={}, **given)
    assert opts.protocol_options["dectris_scan_shape"] == (128, 128)
    assert opts.protocol_options["dectris_endpoint"] == "tcp://dcu:9999"
    assert opts.corrections == "detector" and opts.udf_roi == "roi.npy"
