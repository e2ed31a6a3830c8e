"""hedm.nfreduce: NF stage-1 reduction as an analysis, on a few frames, against the kernels.

The analysis's partials, merged in any order, give the spot tables that
:func:`kernels.nf.reduce_frame` gives frame by frame (what ``hedm/nf.py`` tabulates),
raw frames are oriented by ``ImTransOpt`` before the reduction, and the background
comes from a folder, a ``.npy`` or dark frames -- never from nowhere.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    from kernels import TiffSeries
    from kernels.nf import median_background
    from kernels.synth import DetectorModel

    from hedm.nf import read_nf_params
    from hedm.synth import make_nf_dataset

    folder = tmp_path_factory.mktemp("nf")
    params = make_nf_dataset(str(folder), DetectorModel(shape=(64, 48), n_frames=5, n_spots=12,
                                                         seed=4, frames_per_spot=1))
    p = read_nf_params(params)
    reader = TiffSeries(str(folder / p["InputPattern"]), p["RawStartNr"], 5)
    stack = np.stack([reader.read(i) for i in range(5)])
    background = median_background(stack)
    np.save(folder / "bg.npy", background)
    return {"folder": folder, "params": params, "p": p, "stack": stack, "bg": background}


def _reference(layer):
    """Per frame, straight from the kernel: (pixels (z, y, intensity, label), centroids)."""
    from kernels.nf import NFWorkspace, reduce_frame

    from hedm.nf import kernel_params

    work = NFWorkspace(layer["bg"].shape)
    out = []
    for image in layer["stack"]:
        s = reduce_frame(image, layer["bg"], kernel_params(layer["p"]), work)
        out.append((np.stack([s.rows, s.cols, s.intensity, s.labels], 1), s.centroids()))
    return out


def _analysis(layer, **kw):
    from hedm.nfreduce import NFReduce

    return NFReduce(layer["params"], background=kw.pop("background",
                                                       str(layer["folder"] / "bg.npy")), **kw)


def test_partials_merged_in_any_order_give_the_kernels_tables(layer):
    from hedm.nf import binary_images

    a = _analysis(layer)
    stack, first = layer["stack"], layer["p"]["RawStartNr"]
    late = a.process_partition(stack[[4, 2]], np.array([4, 2]), np.ones(2, bool))
    early = a.process_partition(stack[[0, 1, 3]], np.array([0, 1, 3]), np.ones(3, bool))
    t = a.tables(a.merge(late, early), 5)
    ref = _reference(layer)
    assert sum(len(px) for px, _ in ref) > 30          # the comparison compares something
    assert list(t["frames"]["frame"]) == [first + i for i in range(5)]
    assert list(t["frames"]["n_pixels"]) == [len(px) for px, _ in ref]
    assert list(t["frames"]["n_spots"]) == [len(c) for _, c in ref]
    for i, (px, cent) in enumerate(ref):
        mine = t["pixels"][t["pixels"]["frame"] == first + i]
        assert np.array_equal(np.stack([mine["z"], mine["y"], mine["intensity"],
                                        mine["label"]], 1), px)
        c = t["centroids"][t["centroids"]["frame"] == first + i]
        assert np.array_equal(np.stack([c["z"], c["y"]], 1), cent)
    assert np.array_equal(a.binary(t["pixels"]),
                          binary_images(t["pixels"], 1, 5, stack.shape[1:], first))
    # a partition with frames missing: the tables hold the frames seen, nothing else
    assert list(a.tables(late, 5)["frames"]["frame"]) == [first + 2, first + 4]


def test_raw_frames_are_oriented_by_ImTransOpt(layer):
    a = _analysis(layer)
    flipped = _analysis(layer, ImTransOpt=[1, 2])
    raw = layer["stack"][:, ::-1, ::-1].copy()     # what a detector mounted the other way sends
    pos, ok = np.arange(5), np.ones(5, bool)
    want = a.tables(a.process_partition(layer["stack"], pos, ok), 5)
    got = flipped.tables(flipped.process_partition(raw, pos, ok), 5)
    assert len(want["pixels"]) > 30
    for k in want:
        assert np.array_equal(got[k], want[k]), k


def test_background_from_a_folder_a_stack_or_dark_frames(layer, tmp_path):
    import tifffile

    from hedm.nfreduce import BACKGROUND_NAME

    np.save(tmp_path / BACKGROUND_NAME.format(d=0), layer["bg"])
    np.save(tmp_path / "stack.npy", layer["bg"][None].astype(np.float32))
    tifffile.imwrite(tmp_path / "dark.tif", layer["stack"])    # median of these frames
    for source in (tmp_path, tmp_path / "stack.npy", tmp_path / "dark.tif"):
        bg = _analysis(layer, background=str(source)).backgrounds()
        assert bg.dtype == np.uint16 and np.array_equal(bg, layer["bg"][None]), source
    np.save(tmp_path / "small.npy", layer["bg"][:10])
    from hedm.errors import HedmError

    with pytest.raises(HedmError, match=r"small.npy is \(10, 48\), frames are \(64, 48\)"):
        _analysis(layer, background=str(tmp_path / "small.npy")).backgrounds()


def test_refusals_say_what_to_pass(tmp_path):
    from hedm.synth import make_nf_dataset
    from kernels.synth import DetectorModel
    from hedm.errors import HedmError
    from analyses.loading import load_analysis

    params = make_nf_dataset(str(tmp_path), DetectorModel(shape=(32, 24), n_frames=3, seed=1,
                                                          frames_per_spot=1))
    with pytest.raises(HedmError, match="needs a background.*background=DIR"):
        load_analysis("hedm.nfreduce", {"params": params})
    with pytest.raises(HedmError, match="background .*missing.npy does not exist"):
        load_analysis("hedm.nfreduce", {"params": params,
                                        "background": str(tmp_path / "missing.npy")})
    with pytest.raises(HedmError, match="unknown option.*Threshold"):
        load_analysis("hedm.nfreduce", {"params": params, "background": params,
                                        "Threshold": 3})
    np.save(tmp_path / "bg.npy", np.zeros((32, 24), np.uint16))
    a = load_analysis("hedm.nfreduce", {"params": params, "background": str(tmp_path / "bg.npy")})
    with pytest.raises(HedmError, match=r"frames of \(24, 32\).*raw frames of \(32, 24\)"):
        a.prepare(_geometry((24, 32)))
    with pytest.raises(HedmError, match="has 5 frames"):
        a.prepare(_geometry((32, 24), frames=5))
    with pytest.raises(HedmError, match="uint16 .* sends float32"):
        a.prepare(_geometry((32, 24), dtype="<f4"))


def _geometry(shape, frames=2, dtype="<u2"):
    from streams.protocol import ScanGeometry

    return ScanGeometry("s", 1, frames, 1, shape, dtype, (1, frames))


def test_a_distance_without_any_spot_is_a_problem_not_a_result(layer):
    """As the file flow fails on it, a stream whose frames hold no spot is not served."""
    a = _analysis(layer)
    stack = layer["stack"]
    g = _geometry(stack.shape[1:], frames=len(stack))
    spots = a.process_partition(stack, np.arange(len(stack)), np.ones(len(stack), bool))
    assert a.problem(spots, g) == ""
    flat = np.repeat(layer["bg"].astype(stack.dtype)[None], len(stack), axis=0)
    dark = a.process_partition(flat, np.arange(len(stack)), np.ones(len(stack), bool))
    assert "no spot found at distance(s) 0" in a.problem(dark, g)
    # frames never received count as empty too
    assert "distance(s) 0" in a.problem(a.empty(), g)
