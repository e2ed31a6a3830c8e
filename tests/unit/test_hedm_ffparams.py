"""One parameter file for every FF stage, as MIDAS has it: MIDAS's own FF example file
(tests/data/midas_ff_params.txt) is read whole by stage 1 and stage 2; NrFilesPerSweep
means MIDAS's files per sweep, or the run is refused saying so."""
from __future__ import annotations

import os

import numpy as np
import pytest

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
MIDAS_FF = os.path.join(DATA, "midas_ff_params.txt")
STAGE1 = "Dark dark_000001.ge3\nNrPixelsY 2048\nNrPixelsZ 2048\n"


def _write(tmp_path, text, name="ff.params"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_midas_ff_file_is_read_whole_by_both_stages(tmp_path):
    from hedm.ffparams import ff_arrays, read_grains_params
    from hedm.ffpeaks import read_ff_params

    text = open(MIDAS_FF).read() + "\n" + STAGE1
    path = _write(tmp_path, text)
    p1 = read_ff_params(path)                    # Lsd, BC, RingThresh ... are stage 2's
    assert p1["NrFilesPerSweep"] == 1 and p1["Dark"] == "dark_000001.ge3"
    p2 = read_grains_params(path)
    assert p2["Lsd"] == 1000000.0 and p2["BC"] == (1022.0, 1022.0) and p2["px"] == 200.0
    assert p2["LatticeConstant"] == (4.08, 4.08, 4.08, 90.0, 90.0, 90.0)
    assert (p2["MarginOme"], p2["MarginEta"], p2["MarginRadial"]) == (0.5, 500.0, 500.0)
    assert p2["OverAllRingToIndex"] == 2 and p2["MinEta"] == 6.0
    arrays = ff_arrays(p2, 1440, (2048, 2048))
    assert sorted(set(arrays.ring.tolist())) == [1, 2, 3, 4, 5]   # RingThresh 1..5
    # a typo is still an error naming the line and the nearest key
    from hedm.params import ParamError
    with pytest.raises(ParamError, match=r"ff2.params:\d+: unknown parameter 'Lsdd'"):
        read_ff_params(_write(tmp_path, text + "Lsdd 5\n", "ff2.params"))
    with pytest.raises(ParamError, match=r"ff3.params:\d+: unknown parameter 'Tresh'"):
        read_grains_params(_write(tmp_path, text + "Tresh 5\n", "ff3.params"))


def test_aliases_and_refusals(tmp_path):
    from hedm.ffparams import read_grains_params
    from hedm.params import ParamError

    base = ("LatticeParameter 4.08 4.08 4.08 90 90 90\nWavelength 0.17\nLsd 1e6\nBC 1 2\n"
            "px 200\nOmegaStart 0\nOmegaStep 0.25\nExcludePoleAngle 4\n")
    p = read_grains_params(_write(tmp_path, base))
    assert p["LatticeConstant"][0] == 4.08 and p["MinEta"] == 4.0
    with pytest.raises(ParamError, match="Wedge 1.0 is not modelled"):
        read_grains_params(_write(tmp_path, base + "Wedge 1\n", "w.params"))
    with pytest.raises(ParamError, match="MinEta and its alias ExcludePoleAngle"):
        read_grains_params(_write(tmp_path, base + "MinEta 6\n", "a.params"))
    with pytest.raises(ParamError, match="missing required parameter.*Wavelength"):
        read_grains_params(_write(tmp_path, base.replace("Wavelength 0.17\n", ""), "m.params"))


def test_nr_files_per_sweep_means_files(tmp_path):
    from kernels import write_ge, write_tiff_series

    from hedm.ffpeaks import read_ff_params, sweep_frames
    from hedm.params import ParamError

    frames = [np.full((8, 6), i, np.uint16) for i in range(5)]
    write_ge(str(tmp_path / "ff.ge3"), frames)
    write_tiff_series(str(tmp_path / "t_%06d.tif"), frames, first=0)
    base = "Dark d.ge3\nNrPixelsY 6\nNrPixelsZ 8\n"
    # one GE file holding the sweep: MIDAS says 1 file; the frames come from the file
    p = read_ff_params(_write(tmp_path, base))
    assert sweep_frames(p, str(tmp_path / "ff.ge3"), False) == 5
    p = read_ff_params(_write(tmp_path, base + "RawStartNr 1\nNrFrames 3\n", "b.params"))
    assert sweep_frames(p, str(tmp_path / "ff.ge3"), False) == 3
    # the old meaning (frames) on a GE file differs from MIDAS's: refused, saying why
    p = read_ff_params(_write(tmp_path, base + "NrFilesPerSweep 5\n", "c.params"))
    with pytest.raises(ParamError, match="MIDAS's NrFilesPerSweep counts files per sweep"):
        sweep_frames(p, str(tmp_path / "ff.ge3"), False, "c.params")
    p = read_ff_params(_write(tmp_path, base + "NrFrames 9\n", "d.params"))
    with pytest.raises(ParamError, match="holds 5 frames"):
        sweep_frames(p, str(tmp_path / "ff.ge3"), False)
    # a TIFF series: one frame per file, so files = frames, as MIDAS counts them
    p = read_ff_params(_write(tmp_path, base + "NrFilesPerSweep 5\n", "e.params"))
    assert sweep_frames(p, str(tmp_path / "t_%06d.tif"), True) == 5
    p = read_ff_params(_write(tmp_path, base + "NrFilesPerSweep 5\nNrFrames 4\n", "f.params"))
    with pytest.raises(ParamError, match="one frame per file"):
        sweep_frames(p, str(tmp_path / "t_%06d.tif"), True)


def test_midas_aliases_as_midas_reads_them(tmp_path):
    """Issue 41 item 6: MIDAS's FF aliases (OmegaFirstFile for OmegaStart, Distance for Lsd,
    StepsizeOrient/StepsizePos, MinMatchesToAcceptFrac, OverallRingToIndex, NrPixels for
    both sizes) are read by both FF stages, as MIDAS's parsers read them."""
    from hedm.ffparams import ALIASES, read_grains_params
    from hedm.ffpeaks import read_ff_params
    from hedm.params import ParamError

    text = ("LatticeConstant 4.08 4.08 4.08 90 90 90\nWavelength 0.17\nDistance 1e6\nBC 1 2\n"
            "px 200\nOmegaFirstFile 180\nOmegaStep -0.25\nStepsizeOrient 0.5\n"
            "StepsizePos 50\nMinMatchesToAcceptFrac 0.6\nOverallRingToIndex 2\n"
            "NrPixels 2048\nDark d.ge3\n")
    path = _write(tmp_path, text, "midas.params")
    p = read_grains_params(path)
    assert (p["OmegaStart"], p["Lsd"], p["StepSizeOrient"], p["StepSizePos"],
            p["Completeness"], p["OverAllRingToIndex"]) == (180.0, 1e6, 0.5, 50.0, 0.6, 2)
    q = read_ff_params(path)
    assert q["NrPixelsY"] == q["NrPixelsZ"] == 2048
    # a flag may give the alias too; a key and its alias that differ are refused
    assert read_grains_params(path, {"OmegaFirstFile": -180.0})["OmegaStart"] == -180.0
    with pytest.raises(ParamError, match="OmegaStart and its alias OmegaFirstFile"):
        read_grains_params(_write(tmp_path, text + "OmegaStart 0\n", "both.params"))
    assert read_grains_params(_write(tmp_path, text + "OmegaStart 180\n", "same.params"))
    # every alias names the MIDAS source that reads it
    assert all(src and keys for keys, src in ALIASES.values())
