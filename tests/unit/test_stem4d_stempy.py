"""stem4d against stempy itself: counting, thresholds, the events file both ways.

- counting with stempy's rule equals ``stempy.image.electron_count_frame`` frame
  by frame (per-pixel dark, with and without a gain map), and a whole scan
  counted by ``stempy.image.electron_count`` (its own thresholds from its own
  sampling) equals ours given those thresholds;
- our sampled thresholds equal stempy's ``calculate_thresholds`` on the same
  samples (one frame, so stempy's random choice of frames cannot differ);
- every scan -- no electron at all, the same number in every frame -- writes a
  file ``stempy.io.load_electron_counts`` reads, with stempy's ``/metadata``;
- ``read_events`` reads files written by stempy's ``SparseArray.write_to_hdf5``,
  with one and with several frames per scan position.
"""
from __future__ import annotations

import numpy as np
import pytest

from streams.protocol import ScanGeometry

pytest.importorskip("numba")
h5py = pytest.importorskip("h5py")
si = pytest.importorskip("stempy.image", reason="stempy is the reference here")
sio = pytest.importorskip("stempy.io")

SHAPE = (48, 40)


def _camera_frames(n, rng, dark):
    """Camera-like uint16 frames: dark + read noise, electrons (some in clusters, some
    touching an X-ray hit), X-ray hits."""
    out = []
    for _ in range(n):
        f = dark + rng.normal(0, 3, SHAPE)
        k = rng.poisson(30)
        r, c = rng.integers(1, SHAPE[0] - 1, k), rng.integers(1, SHAPE[1] - 1, k)
        f[r, c] += rng.uniform(40, 300, k)
        f[r, c + 1] += rng.uniform(0, 60, k)          # charge sharing into a neighbour
        x = rng.integers(1, SHAPE[0] - 1), rng.integers(1, SHAPE[1] - 2)
        f[x] += 20_000                                   # an X-ray ...
        f[x[0], x[1] + 1] += 150                         # ... beside an electron
        out.append(np.clip(np.rint(f), 0, 65535).astype(np.uint16))
    return np.stack(out)


@pytest.mark.parametrize("with_gain", [False, True])
def test_stempy_rule_equals_electron_count_frame(with_gain):
    # stempy's single-frame path subtracts the dark's integer part where its scan
    # pipeline (the reference of the rule: the test below) truncates the difference;
    # on these frames no value lies within one count of a threshold, so both agree
    from kernels import count_electrons

    rng = np.random.default_rng(2)
    dark = rng.normal(100, 4, SHAPE).astype(np.float32)
    gain = rng.uniform(0.8, 1.25, SHAPE).astype(np.float32) if with_gain else None
    frames = _camera_frames(16, rng, dark)
    bg, xr = 14.7, 2500.25
    differ = 0
    for fr in frames:
        ours = np.flatnonzero(count_electrons(fr, dark, bg, xr, gain=gain, rule="stempy")[0])
        kw = {"gain": gain} if with_gain else {}
        theirs = si.electron_count_frame(fr, darkreference=dark, background_threshold=bg,
                                         xray_threshold=xr, **kw)
        assert np.array_equal(ours, np.sort(np.asarray(theirs.data[0, 0]))), "frame differs"
        raw = np.flatnonzero(count_electrons(fr, dark, bg, xr, gain=gain, rule="raw")[0])
        differ += not np.array_equal(raw, ours)
    assert differ > 0      # the rules differ next to X-rays: the comparison can fail


def _stempy_file(path, frames):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("frames", data=frames)
        d.attrs["scan_dimensions"] = (len(frames), 1)


@pytest.mark.parametrize("dark_kind", ["none", "below"])
def test_sampled_thresholds_equal_stempys(tmp_path, dark_kind):
    import stempy._image as _image

    from stem4d.counting import sampled_thresholds

    rng = np.random.default_rng(7)
    frame = _camera_frames(1, rng, np.full(SHAPE, 100.0))[:1]
    # stempy samples in uint16: a dark above some pixel wraps there (and fails); below all
    dark = (np.full(SHAPE, frame.min() - 0.5, np.float32) if dark_kind == "below" else None)
    _stempy_file(tmp_path / "one.h5", frame)
    with h5py.File(tmp_path / "one.h5", "r") as f:
        block = next(sio.get_hdf5_reader(f))
        args = [[block._block]] + ([] if dark is None else [dark]) + [9, 4.0, 10.0]
        ref = _image.calculate_thresholds(*args)
    ours = sampled_thresholds(np.repeat(frame, 9, axis=0), 0.0 if dark is None else dark,
                              None, 4.0, 10.0)
    assert ours.number_of_bins == ref.number_of_bins
    np.testing.assert_allclose(ours.mean, ref.mean, rtol=1e-12)
    np.testing.assert_allclose(ours.x_ray_threshold, ref.xray_threshold, rtol=1e-12)
    np.testing.assert_allclose(ours.optimized_mean, ref.optimized_mean, rtol=1e-6)
    np.testing.assert_allclose(ours.background_threshold, ref.background_threshold, rtol=1e-6)


def test_a_scan_counted_by_stempy_equals_ours_with_its_thresholds(tmp_path):
    from stem4d.analysis import Stem4D

    rng = np.random.default_rng(11)
    frames = _camera_frames(24, rng, np.full(SHAPE, 100.0))
    dark = (frames.min(axis=0) - 0.5).astype(np.float32)    # per pixel, below every value
    np.save(tmp_path / "dark.npy", dark)
    _stempy_file(tmp_path / "scan.h5", frames)
    # stempy.image.electron_count's own steps for an HDF5 reader (its metadata stays
    # empty on this path, so the thresholds are taken where it computes them)
    import stempy._image as _image

    with h5py.File(tmp_path / "scan.h5", "r") as f:
        reader = sio.get_hdf5_reader(f)
        res = _image.calculate_thresholds([next(reader)._block], dark, 12, 4.0, 10.0)
        reader.reset()
        opts = _image.ElectronCountOptionsClassic()
        opts.dark_reference = dark
        opts.background_threshold = res.background_threshold
        opts.x_ray_threshold = res.xray_threshold
        opts.gain = None
        opts.scan_dimensions = (len(frames), 1)
        opts.apply_row_dark_subtraction = False
        opts.optimized_mean = res.optimized_mean
        opts.apply_row_dark_use_mean = False
        data = _image.electron_count(reader.begin(), reader.end(), opts)
    theirs = [np.asarray(si.safe_array(d[0], copy=False)) for d in data.data]
    meta = {"background_threshold": res.background_threshold,
            "x_ray_threshold": res.xray_threshold}
    a = Stem4D(mode="count", rule="stempy", dark=str(tmp_path / "dark.npy"),
               background_threshold=meta["background_threshold"],
               xray_threshold=meta["x_ray_threshold"])
    g = ScanGeometry("t", 1, len(frames), 1, SHAPE, "<u2", (1, len(frames)))
    a.prepare(g)
    p = a.process_partition(frames, np.arange(len(frames)), np.ones(len(frames), bool))
    counts, flat = p.ragged("events", len(frames))
    starts = np.concatenate(([0], np.cumsum(counts)))
    assert counts.sum() > 10 * len(frames)
    for i in range(len(frames)):
        assert np.array_equal(flat[starts[i]:starts[i + 1]], np.sort(theirs[i])), f"frame {i}"


def _write(tmp_path, name, frames, **params):
    from stem4d.analysis import Stem4D

    n = len(frames)
    g = ScanGeometry(name, 1, n, 1, frames.shape[1:], frames.dtype.str, (2, n // 2))
    a = Stem4D(**params)
    a.prepare(g)
    p = a.process_partition(frames, np.arange(n), np.ones(n, bool))
    path = tmp_path / f"{name}.h5"
    with h5py.File(path, "w") as f:
        a.write(f, p, g)
    return path


@pytest.mark.parametrize("case", ["dark_scan", "equal_counts", "one_each", "ragged"])
def test_every_scan_writes_a_file_stempy_reads(tmp_path, case):
    from stem4d.layout import read_events

    n = 16
    frames = np.zeros((n, 16, 12), np.uint16)
    want = [[] for _ in range(n)]
    if case != "dark_scan":
        for i in range(n):
            k = {"equal_counts": 3, "one_each": 1, "ragged": i % 4}[case]
            for j in range(k):
                r, c = 2 + 4 * j, 1 + (i % 10)
                frames[i, r, c] = 500
                want[i].append(r * 12 + c)
    path = _write(tmp_path, case, frames, dark=0.0, background_threshold=40.0,
                  xray_threshold=2000.0)
    sa = sio.load_electron_counts(str(path))
    assert tuple(sa.scan_shape) == (2, 8) and tuple(sa.frame_shape) == (16, 12)
    assert sa.data.shape == (n, 1)
    for i in range(n):
        assert list(sa.data[i, 0]) == want[i], i
    dense = sa.to_dense()
    assert dense.sum() == sum(len(w) for w in want)
    meta = sa.metadata["electron_counting"]
    assert meta["background_threshold"] == 40.0 and meta["x_ray_threshold"] == 2000.0
    assert list(meta["scan_shape"]) == [2, 8] and list(meta["frame_shape"]) == [16, 12]
    assert meta["threshold_calculated"] == 0 and meta["dark_reference"] == "constant 0.0"
    events, scan, frame = read_events(str(path))
    assert scan == (2, 8) and [list(e) for e in events] == want


def test_read_events_reads_stempys_files_with_several_frames_per_position(tmp_path):
    from stem4d.errors import Stem4DError
    from stem4d.layout import read_events

    rng = np.random.default_rng(3)
    scan_shape, frame_shape, k = (4, 6), (10, 8), 2
    data = np.empty((24, k), dtype=object)
    for i in range(24):
        for j in range(k):
            data[i, j] = np.sort(rng.choice(80, rng.integers(0, 6), replace=False)
                                 ).astype(np.uint32)
    sa = sio.SparseArray(data, scan_shape, frame_shape)
    sa.write_to_hdf5(str(tmp_path / "multi.h5"))
    per, scan, frame = read_events(str(tmp_path / "multi.h5"), per_position=True)
    assert scan == scan_shape and frame == frame_shape
    for i in range(24):
        assert len(per[i]) == k
        for j in range(k):
            assert np.array_equal(per[i][j], data[i, j]), (i, j)
    with pytest.raises(Stem4DError, match="2 frames per scan position"):
        read_events(str(tmp_path / "multi.h5"))
    # one frame per position, written by stempy: read as it is
    sio.SparseArray(data[:, :1], scan_shape, frame_shape).write_to_hdf5(
        str(tmp_path / "single.h5"))
    one, _, _ = read_events(str(tmp_path / "single.h5"))
    assert all(np.array_equal(one[i], data[i, 0]) for i in range(24))


def test_a_counting_detectors_events_are_written_as_stempy_reads_them(tmp_path):
    """``events="detector"`` (ASI TPX3): the CSR frames' counts are the electrons, kept
    sparse, written with a frame per position for each repeat of a pixel; stempy's dense
    frames and sum equal the scan's counts, and the same frames dense (a spill read
    offline) write the same events."""
    from analyses.sparse import CSRFrames
    from stem4d.analysis import Stem4D
    from stem4d.layout import read_events
    from streams.protocols.asi_tpx3.simulator import sparse_scan

    nav, sig = (3, 5), (12, 10)
    ip, ix, v = sparse_scan(nav, sig, 80.0, seed=2)
    n = nav[0] * nav[1]
    csr = CSRFrames(ip.astype(np.int64), ix, v, (n, *sig))
    dense = csr.dense()
    assert v.max() >= 3                        # pixels hit several times: L >= 3
    g = ScanGeometry("s", 1, n, 1, sig, "<u4", nav)
    files = []
    for name, frames in (("csr", csr), ("dense", dense)):
        a = Stem4D(mode="both", events="detector")
        assert a.sparse
        a.prepare(g)
        parts = [a.process_partition(
            frames[s:s + 5] if name == "dense" else
            CSRFrames(ip[s:s + 6].astype(np.int64) - ip[s], ix[ip[s]:ip[s + 5]],
                      v[ip[s]:ip[s + 5]], (5, *sig)), np.arange(s, s + 5), np.ones(5, bool))
            for s in range(0, n, 5)]
        p = parts[0].merge(parts[1]).merge(parts[2])
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as f:
            a.write(f, p, g)
        files.append(path)
    sa = sio.load_electron_counts(str(files[0]))
    L = int(v.max())
    assert sa.data.shape == (n, L) and tuple(sa.frame_shape) == sig
    assert np.array_equal(sa.to_dense().reshape(n, *sig), dense)
    assert np.array_equal(sa.sum(axis=(0, 1)), dense.sum(axis=0))
    with h5py.File(files[0]) as f, h5py.File(files[1]) as d:
        assert np.array_equal(f["electron_counts"][()].ravel(), dense.sum(axis=(1, 2)))
        assert f["electron_events"].attrs["frames_per_position"] == L
        assert "thresholds" not in f["metadata/electron_counting"].attrs
        for a, b in zip(f["electron_events/frames"][()], d["electron_events/frames"][()]):
            assert np.array_equal(a, b)
        assert np.array_equal(f["sum_image"][()], d["sum_image"][()])
    per, _, _ = read_events(str(files[0]), per_position=True)
    assert all(len(x) == L for x in per)
