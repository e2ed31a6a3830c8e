"""HEDM parameter files: strict parsing, FILE:LINE errors, flag > file > default."""
import argparse

import pytest

from hedm.ff import SCHEMA as FF_SCHEMA
from hedm.ff import read_ff_params
from hedm.nf import SCHEMA as NF_SCHEMA
from hedm.nf import kernel_params, read_nf_params
from hedm.params import (ParamError, add_param_flags, flag_overrides, format_params,
                                   parse_params, relative_to)

GOOD = """# an NF parameter file
InputPattern   stem_%06d.tif
NrFilesPerDistance 300   # frames
NrPixelsY 512
NrPixelsZ 256

RawStartNr 0
BackgroundTasks 2
"""


def write(tmp_path, text, name="nf.params"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_good_file_with_defaults(tmp_path):
    p = read_nf_params(write(tmp_path, GOOD + "MedFiltRadius 2\nGaussFiltRadius 1.5\n"))
    assert p["NrFilesPerDistance"] == 300 and p["NrPixelsY"] == 512 and p["NrPixelsZ"] == 256
    assert p["GaussFiltRadius"] == 1.5 and p["BlanketSubtraction"] == 0  # default
    k = kernel_params(p)
    assert (k.median_size, k.log_sigma, k.log_radius) == (5, 1.5, 4)


@pytest.mark.parametrize("line, lineno, words", [
    ("NrPixelY 512", 9, ["unknown parameter 'NrPixelY'", "did you mean 'NrPixelsY'"]),
    ("nrpixelsy 512", 9, ["did you mean 'NrPixelsY'"]),
    ("NrPixelsY 12", 9, ["already set on line 4"]),
    ("RawStartNr 3", 9, ["already set on line 7"]),
    ("LoGMaskRadius four", 9, ["LoGMaskRadius must be an integer", "'four'"]),
    ("LoGMaskRadius 0", 9, ["LoGMaskRadius must be >= 1"]),
    ("MedFiltRadius 3", 9, ["must be one of 1, 2"]),
    ("GaussFiltRadius nan", 9, ["finite"]),
    ("BlanketSubtraction", 9, ["needs a value"]),
    ("LoGMaskRadius 1 2", 9, ["takes one value"]),
])
def test_bad_line_names_file_and_line(tmp_path, line, lineno, words):
    path = write(tmp_path, GOOD + line + "\n")
    with pytest.raises(ParamError) as info:
        read_nf_params(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{lineno}: "), msg
    for w in words:
        assert w in msg, msg


def test_missing_required_named_all(tmp_path):
    path = write(tmp_path, "InputPattern a_%d.tif\nNrPixelsY 4\n")
    with pytest.raises(ParamError) as info:
        read_nf_params(path)
    assert "NrFilesPerDistance" in str(info.value) and "NrPixelsZ" in str(info.value)
    assert "NrPixelsY (" not in str(info.value)


def test_unreadable_file(tmp_path):
    with pytest.raises(ParamError, match="cannot read the parameter file"):
        read_nf_params(str(tmp_path / "nope.params"))


def test_flags_override_file_and_are_checked(tmp_path):
    parser = argparse.ArgumentParser()
    add_param_flags(parser, NF_SCHEMA)
    ns = parser.parse_args(["--NrPixelsY", "64", "--BlanketSubtraction", "30"])
    p = read_nf_params(write(tmp_path, GOOD), flag_overrides(ns, NF_SCHEMA))
    assert p["NrPixelsY"] == 64 and p["BlanketSubtraction"] == 30 and p["NrPixelsZ"] == 256
    bad = parser.parse_args(["--BlanketSubtraction", "70000"])
    with pytest.raises(ParamError, match=r"^--BlanketSubtraction: .*0\.\.65535"):
        flag_overrides(bad, NF_SCHEMA)


def test_format_round_trip(tmp_path):
    values = parse_params(GOOD, NF_SCHEMA)
    again = parse_params(format_params(values, NF_SCHEMA), NF_SCHEMA)
    assert again == values
    # repeatable keys and resolved values (defaults, empty names) round-trip too
    values = parse_params(GOOD + "ImTransOpt 1\nImTransOpt 2 3\n", NF_SCHEMA)
    assert values["ImTransOpt"] == (1, 2, 3)
    assert parse_params(format_params(values, NF_SCHEMA), NF_SCHEMA) == values
    full = read_nf_params(write(tmp_path, GOOD))
    assert full["OrigFileName"] == "" and full["ImTransOpt"] == ()
    assert read_nf_params(write(tmp_path, format_params(full, NF_SCHEMA), "again")) == full


def test_ff_cross_checks(tmp_path):
    base = "Dark d.ge3\nNrFilesPerSweep 4\nNrPixelsY 8\nNrPixelsZ 8\n"
    assert read_ff_params(write(tmp_path, base, "ff.params"))["Threshold"] == 50.0
    with pytest.raises(ParamError, match="MinNrPx .* must not exceed MaxNrPx"):
        read_ff_params(write(tmp_path, base + "MinNrPx 9\nMaxNrPx 3\n", "ff2.params"))
    with pytest.raises(ParamError, match="OutputFileName must be a plain file name"):
        read_ff_params(write(tmp_path, base + "OutputFileName a/b\n", "ff3.params"))
    assert {p.key for p in FF_SCHEMA} >= {"Dark", "Threshold", "MinNrPx", "MaxNrPx"}


def test_relative_to_keeps_node_placeholder():
    assert relative_to(".", "/dev/shm/x/%n/nf/nf.params") == "/dev/shm/x/%n/nf/."
    assert relative_to("/abs", "/a/b.params") == "/abs"


@pytest.mark.parametrize("schema", [FF_SCHEMA, NF_SCHEMA], ids=["ff", "nf"])
def test_flow_help_shows_percent_fields(schema):
    from hedm.params import add_flow_arguments

    parser = argparse.ArgumentParser()
    add_flow_arguments(parser, "X", schema)
    text = " ".join(parser.format_help().split())  # argparse %-formats help: a key's '%n'
    assert "%n = node name" in text and "--DataDirectory" in text
