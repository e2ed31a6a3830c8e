"""Readers on the conformance corpus: the right frames for every layout, or a ReaderError
that names the problem.  Frames are compared with an independent read (h5py/numpy
slicing on the known frame axis) and with the builder's sha256 of the frames it wrote."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from kernels import ReaderError, open_frames
from tests.data.corpus import entry
from tests.data.fixtures import corpus  # noqa: F401  (session fixture)
from tests.data.h5util import frames_digest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases():
    """(entry name, case index) for every read case, from a manifest built at collection."""
    import tempfile

    from tests.data.corpus import build

    with tempfile.TemporaryDirectory(prefix="kernels-io-cases-") as d:
        m = build(d)
    return [pytest.param(e["name"], i, id=f"{e['name']}-{i}")
            for e in m["entries"] for i, _ in enumerate(e["reads"])]


def _installed(packages) -> list:
    missing = []
    for p in packages:
        try:
            __import__(p)
        except ImportError:
            missing.append(p)
    return missing


def _independent(e, case, root):
    """The frames read with h5py/numpy/tifffile directly, frame axis moved first."""
    path = os.path.join(root, e["path"])
    opts = case["options"]
    if e["format"] == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            if e["name"].startswith("eiger"):
                parts = sorted(k for k in f["/entry/data"] if k.startswith("data_"))
                return np.concatenate([f["/entry/data"][p][()] for p in parts])
            name = opts.get("dataset") or next(iter(e["datasets"]))
            data = f[name][()]
        axis = case.get("frame_axis")
        return data[None] if axis is None else np.moveaxis(data, axis, 0)
    if e["format"] == "tiff":
        import tifffile

        data = tifffile.imread(path)
        return data[None] if data.ndim == 2 else data
    if e["format"] == "ge":
        raw = np.fromfile(path, "<u2", offset=8192)
        return raw.reshape(-1, 2048, 2048)
    return None


@pytest.mark.parametrize("name,index", _cases())
def test_reader_on_corpus(corpus, name, index):  # noqa: F811
    e = entry(corpus, name)
    case = e["reads"][index]
    missing = _installed(set(e["requires"]) | set(case.get("requires", [])))
    if missing:
        pytest.skip(f"needs {missing}, not installed here (make setup installs them)")
    path = os.path.join(corpus["root"], e["path"])
    if case["expect"] == "error":
        with pytest.raises(ReaderError) as err:
            with open_frames(path, **case["options"]) as r:
                for i in range(r.n_frames):
                    r.read(i)
        assert case["match"] in str(err.value)
        return
    with open_frames(path, **case["options"]) as r:
        got = np.stack([r.read(i) for i in range(r.n_frames)])
        assert r.n_frames == case["n_frames"] and list(r.shape) == case["frame_shape"]
        assert r.dtype == np.dtype(case["dtype"]) and got.dtype == r.dtype
        if len(got) > 1:  # a row band equals the frame's rows
            assert np.array_equal(r.read_rows(1, 2, 7), got[1, 2:7], equal_nan=True)
        clone = pickle.loads(pickle.dumps(r))
        assert np.array_equal(clone.read(r.n_frames - 1), got[-1], equal_nan=True)
        clone.close()
    if case.get("sha256"):
        assert frames_digest(got) == case["sha256"]
    if not case["options"].get("dtype"):
        ref = _independent(e, case, corpus["root"])
        if ref is not None:
            assert np.array_equal(got, ref, equal_nan=True)
    if "masked_value" in case:
        assert int(got.max()) == case["masked_value"]
        assert int(got[got != case["masked_value"]].max()) == case["max_unmasked"]
    if case.get("masked_to") == "nan":
        raw = open_frames(path)
        mark = np.stack([raw.read(i) for i in range(raw.n_frames)]) == np.iinfo(raw.dtype).max
        assert mark.any() and np.isnan(got[mark]).all() and not np.isnan(got[~mark]).any()
    if "first_row_head" in case:
        assert got[0, 0, :3].tolist() == case["first_row_head"]


def test_manifest_describes_the_files(corpus):  # noqa: F811
    """The builder's manifest agrees with the files (strings byte for byte, filters)."""
    import h5py

    strings = entry(corpus, "strings")
    with h5py.File(os.path.join(corpus["root"], strings["path"]), "r") as f:
        for path, want in strings["strings"].items():
            tid = f[path].id.get_type()
            raw = f[path][()]
            fill = b" " if want["pad"] == "spacepad" else b"\0"
            assert tid.get_size() == want["size"] and raw.rstrip(fill).decode() == want["value"]
            assert f["/fixed"].attrs.get_id(path.rsplit("/", 1)[-1]).get_type().get_strpad() == \
                tid.get_strpad()
        assert f["/fixed/nullterm_full_width"][()] == b"12345678901234567890"
    if not _installed(["hdf5plugin"]):
        eiger = entry(corpus, "eiger_u32")
        filt = eiger["datasets"]["/entry/data/data_000001"]["filters"]
        assert [x["id"] for x in filt] == [32008] and filt[0]["values"][-1] == 2  # LZ4
        assert eiger["datasets"]["/entry/source/name"]["string"] == \
            {"vlen": False, "size": 20, "pad": "nullterm", "cset": "ascii"}
    with open(os.path.join(corpus["root"], "manifest.json")) as fh:
        assert json.load(fh)["entries"][0]["name"] == corpus["entries"][0]["name"]


def test_format_chosen_by_content_not_extension(corpus, tmp_path):  # noqa: F811
    from kernels.io import GEFile, HDF5Stack, TiffStack, sniff

    tiff = os.path.join(corpus["root"], "patterns_u8.tif")
    h5 = os.path.join(corpus["root"], "float32_frames.h5")
    for ext in (".h5", ".ge2", ".dat"):
        (tmp_path / f"tiff{ext}").write_bytes(open(tiff, "rb").read())
        assert isinstance(open_frames(str(tmp_path / f"tiff{ext}")), TiffStack)
    for ext in (".ge3", ".tif", ".cxi", ".emd"):
        (tmp_path / f"h5{ext}").write_bytes(open(h5, "rb").read())
        assert isinstance(open_frames(str(tmp_path / f"h5{ext}")), HDF5Stack)
    assert sniff(os.path.join(corpus["root"], "stack_f32.btf")) == "tiff"
    assert sniff(os.path.join(corpus["root"], "big_endian_u16.tiff")) == "tiff"
    # HDF5 with a 512-byte user block: the signature is at offset 512
    import h5py

    ub = str(tmp_path / "userblock.nxs")
    with h5py.File(ub, "w", userblock_size=512) as f:
        f.create_dataset("entry/data/data", data=np.ones((2, 4, 4), np.uint16), chunks=(1, 4, 4))
    assert sniff(ub) == "hdf5" and open_frames(ub).n_frames == 2
    assert isinstance(open_frames(os.path.join(corpus["root"], "scan.ge2")), GEFile)
    with pytest.raises(ReaderError, match="takes no such option"):
        open_frames(os.path.join(corpus["root"], "scan.ge2"), dataset="/x")
    with pytest.raises(ReaderError, match="cannot be opened"):
        open_frames(str(tmp_path / "missing.h5"))


PROBE = """
import json, sys
{block}
from kernels import open_frames, ReaderError
try:
    r = open_frames(sys.argv[1])
    r.read(r.n_frames - 1)
    print(json.dumps({{"ok": True, "n": r.n_frames,
                      "hdf5plugin": "hdf5plugin" in sys.modules}}))
except ReaderError as exc:
    print(json.dumps({{"ok": False, "error": str(exc)}}))
"""
BLOCK = """
class _No:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hdf5plugin":
            raise ImportError("hdf5plugin blocked by the test")
sys.meta_path.insert(0, _No())
"""


def _probe(path, block, env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    proc = subprocess.run([sys.executable, "-c", PROBE.format(block=block), path],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_missing_filter_error_names_it_and_its_fix_works(corpus, tmp_path):  # noqa: F811
    """Without hdf5plugin the Eiger stack's bitshuffle filter is missing: a ReaderError
    names 32008 and the fix; the fix (hdf5plugin, or its plugin folder for reading)
    then reads the frames; with hdf5plugin installed it is imported on demand."""
    if _installed(["hdf5plugin"]):
        pytest.skip("hdf5plugin is not installed: the Eiger corpus files were not built")
    import hdf5plugin

    master = os.path.join(corpus["root"], entry(corpus, "eiger_u32")["path"])
    empty = str(tmp_path / "no-plugins")
    os.mkdir(empty)
    got = _probe(master, BLOCK, {"HDF5_PLUGIN_PATH": empty})
    assert not got["ok"]
    assert "32008 (bitshuffle)" in got["error"] and "data_000001" in got["error"]
    assert "pip install --no-deps hdf5plugin" in got["error"]
    # the read-only fix the message names: HDF5_PLUGIN_PATH at hdf5plugin's plugins
    got = _probe(master, BLOCK, {"HDF5_PLUGIN_PATH": hdf5plugin.PLUGIN_PATH})
    assert got["ok"] and got["n"] == 5
    # installed but not imported: the reader imports it when a dataset needs it
    got = _probe(master, "", {"HDF5_PLUGIN_PATH": empty})
    assert got["ok"] and got["hdf5plugin"]


def test_vds_sources_resolved_from_the_master_folder(corpus, tmp_path, monkeypatch):  # noqa: F811
    """A relative VDS source is found next to the master, whatever the working directory."""
    if _installed(["hdf5plugin"]):
        pytest.skip("hdf5plugin is not installed: the NXmx corpus files were not built")
    monkeypatch.chdir(tmp_path)
    e = entry(corpus, "nxmx_vds")
    with open_frames(os.path.join(corpus["root"], e["path"])) as r:
        assert frames_digest(np.stack([r.read(i) for i in range(r.n_frames)])) == \
            e["reads"][0]["sha256"]


@pytest.mark.parametrize("name,module,hint", [("mib", "rsciio", "rosettasciio"),
                                              ("edf", "fabio", "pip install --no-deps fabio")])
def test_missing_optional_reader_names_the_extra(corpus, monkeypatch, name, module,  # noqa: F811
                                                 hint):
    if name not in [x["name"] for x in corpus["entries"]]:
        pytest.skip(f"corpus entry {name} not built ({corpus['skipped']})")
    e = entry(corpus, name)
    for mod in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, module, None)      # import now raises ImportError
    with pytest.raises(ReaderError, match=hint):
        open_frames(os.path.join(corpus["root"], e["path"]))


# -- HDF5 files of other programs: RosettaSciIO reads them unaided ------------------------
def test_velox_emd_is_read_as_rosettasciio_reads_it(tmp_path):
    """A Thermo Fisher Velox EMD (layout of tests/data/layouts.write_velox_emd, what
    RosettaSciIO's Velox reader reads): without dataset= its frames are RosettaSciIO's,
    equal to ``rsciio.emd.file_reader``; two detectors are listed, never guessed."""
    pytest.importorskip("rsciio", reason="RosettaSciIO (optional reader) is not installed")
    from rsciio.emd import file_reader

    from kernels.io import HDF5Stack, RsciioFrames
    from kernels.io.signatures import hdf5_flavour
    from tests.data.layouts import write_velox_emd

    rng = np.random.default_rng(5)
    haadf = rng.integers(0, 60000, (4, 24, 20)).astype(np.uint16)
    bf = rng.integers(0, 60000, (4, 24, 20)).astype(np.uint16)
    one = str(tmp_path / "haadf.emd")
    write_velox_emd(one, {"HAADF": haadf})
    assert hdf5_flavour(one) == "emd"
    with open_frames(one) as r:
        assert isinstance(r, RsciioFrames) and (r.n_frames, r.shape) == (4, (24, 20))
        got = np.stack([r.read(i) for i in range(r.n_frames)])
        assert got.dtype == np.uint16                     # the file's dtype, not float
        assert np.array_equal(r.read_rows(2, 5, 9), got[2, 5:9])
        clone = pickle.loads(pickle.dumps(r))
        assert np.array_equal(clone.read(3), got[3])
    ref = file_reader(one)
    assert len(ref) == 1 and np.array_equal(got, ref[0]["data"]) and np.array_equal(got, haadf)

    two = str(tmp_path / "two.emd")
    keys = write_velox_emd(two, {"HAADF": haadf, "BF": bf})
    with pytest.raises(ReaderError, match=r"holds 2 signals of frames .*pass signal=N") as err:
        open_frames(two)
    assert "HAADF (4, 24, 20)" in str(err.value) and "BF (4, 24, 20)" in str(err.value)
    ref = file_reader(two)
    titles = [s["metadata"]["General"]["title"] for s in ref]
    for i, want in enumerate(ref):
        with open_frames(two, signal=i) as r:
            frames = np.stack([r.read(k) for k in range(r.n_frames)])
        assert np.array_equal(frames, want["data"])
        assert np.array_equal(frames, {"HAADF": haadf, "BF": bf}[titles[i]])
    # a dataset asked for is read by the HDF5 reader (frame axis from Velox's chunks)
    with open_frames(two, dataset=f"/Data/Image/{keys[1]}/Data") as r:
        assert isinstance(r, HDF5Stack) and r.frame_axis == 2
        assert np.array_equal(np.stack([r.read(k) for k in range(r.n_frames)]), bf)


def test_other_programs_hdf5_is_routed_only_when_it_says_so(tmp_path):
    """Berkeley EMD (written by RosettaSciIO) goes to RosettaSciIO, which refuses a stack
    without navigation axes naming what to do; NeXus and plain HDF5 stay ours."""
    pytest.importorskip("rsciio", reason="RosettaSciIO (optional reader) is not installed")
    import h5py
    from rsciio.emd import file_writer

    from kernels.io import HDF5Stack
    from kernels.io.signatures import hdf5_flavour

    stack = np.arange(3 * 6 * 5, dtype=np.uint16).reshape(3, 6, 5)

    def axis(name, size, nav):
        return {"name": name, "size": size, "navigate": nav, "offset": 0.0, "scale": 1.0,
                "units": "nm"}
    path = str(tmp_path / "berkeley.emd")
    file_writer(path, {"data": stack, "axes": [axis("t", 3, True), axis("y", 6, False),
                                               axis("x", 5, False)],
                       "metadata": {"General": {"title": "stack"}, "Signal": {}},
                       "original_metadata": {}})
    assert hdf5_flavour(path) == "emd"
    with pytest.raises(ReaderError, match="none of its signals .* has frames.*pass dataset= "
                                          "and frame_axis="):
        open_frames(path)
    with h5py.File(path, "r") as f:                   # Berkeley EMD stores axes reversed
        stored = f["/signals/stack/data"][()]
    assert np.array_equal(stored, stack.T)
    with open_frames(path, dataset="/signals/stack/data", frame_axis=2) as r:
        assert np.array_equal(np.stack([r.read(i) for i in range(3)]),
                              np.moveaxis(stored, 2, 0))
    nexus = str(tmp_path / "nexus.emd")
    with h5py.File(nexus, "w") as f:
        f.create_dataset("Version", data=np.array([b'{"format": "Velox"}']))
        f.create_dataset("entry/data/data", data=stack, chunks=(1, 6, 5))
    assert hdf5_flavour(nexus) == "hdf5" and isinstance(open_frames(nexus), HDF5Stack)
