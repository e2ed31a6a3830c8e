"""Real detector files through the ``stager`` command under ``mpirun -n 2`` (2 emulated nodes).

An Eiger series (master + bitshuffle/LZ4 data files behind external links), an
NXmx VDS and an unaligned bitshuffle selection from the conformance corpus:
``stager stage`` exits 0 and reports which read path ran, ``stager verify``
passes, a copy tampered so that it no longer decodes makes ``verify`` exit 1
naming node, file and dataset; a missing link target, VDS source or filter is
refused at planning with exit 2, naming it.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

NP = 2
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def _stager(*args, cwd):
    from tests.stagerun import mpi_env

    # every dataset through the read path (none travels inside the plan)
    env = mpi_env(STAGER_H5_INLINE_BYTES="0")
    return subprocess.run(["mpirun", "-n", str(NP), "--oversubscribe", sys.executable, "-m",
                           "stager", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    pytest.importorskip("hdf5plugin", reason="the Eiger/NXmx corpus needs hdf5plugin")
    from tests.data.corpus import build

    return build(str(tmp_path_factory.mktemp("corpus")))


def test_stage_verify_and_a_copy_that_no_longer_decodes(corpus, tmp_path):
    import h5py

    root = corpus["root"]
    spec = tmp_path / "det.hook"
    spec.write_text(f"broadcast to {tmp_path}/nodes/%n h5 {{\n"
                    f"  {root}/eiger_u32/series_1_master.h5:/\n"
                    f"  {root}/nxmx_vds/scan_master.h5:/entry\n"
                    f"  {root}/filters.h5:/bitshuffle_lz4[1:5]\n"
                    "}\n")
    r = _stager("stage", str(spec), "--emulate-nodes", "2", "--json", str(tmp_path / "r.json"),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    h5 = rep["extra"]["h5"]
    assert h5["read"] in ("independent", "independent+mpio", "mpio"), h5
    assert h5["h5py_mpi"] == ("mpio" in h5["read"]), h5
    for node in ("node0", "node1"):
        with h5py.File(tmp_path / "nodes" / node / "series_1_master.h5", "r") as c, \
                h5py.File(f"{root}/eiger_u32/series_1_data_000001.h5", "r") as s:
            d = c["/entry/data/data_000001"]  # an external link in the source
            assert c.get("/entry/data/data_000001", getlink=True).__class__.__name__ == \
                "HardLink"
            assert (d[()] == s["/entry/data/data"][()]).all()
            assert d.id.get_create_plist().get_filter(0)[2] == \
                s["/entry/data/data"].id.get_create_plist().get_filter(0)[2]
        with h5py.File(tmp_path / "nodes" / node / "scan_master.h5", "r") as c:
            from h5py import h5d
            assert c["/entry/data/data"].id.get_create_plist().get_layout() == h5d.CHUNKED
    r = _stager("verify", str(spec), "--emulate-nodes", "2", cwd=tmp_path)
    assert r.returncode == 0 and "all match" in r.stdout, r.stderr
    victim = tmp_path / "nodes" / "node1" / "series_1_master.h5"
    with h5py.File(victim, "r") as f:
        info = f["/entry/instrument/detector/pixel_mask"].id.get_chunk_info(0)  # gzip
    with open(victim, "r+b") as fh:
        fh.seek(info.byte_offset + 4)
        fh.write(b"\xff" * (info.size - 8))
    r = _stager("verify", str(spec), "--emulate-nodes", "2", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"node node1: {victim}: HDF5 dataset /entry/instrument/detector/pixel_mask " \
           "does not decode" in r.stderr, r.stderr
    assert "node0" not in r.stderr.split("mismatch", 1)[-1], r.stderr


@pytest.mark.parametrize("entry, names", [
    ("eiger_missing/series_2_master.h5:/", ["/entry/data/data_000002",
                                            "series_2_data_000002.h5", "does not exist"]),
    ("nxmx_vds_missing/scan_master.h5:/entry/data/data", [
        "/entry/data/data is a virtual dataset", "scan_data_000003.h5", "does not exist"]),
    ("missing_filter.h5:/", ["HDF5 filter 305 (LZO) is not available"]),
])
def test_missing_targets_and_filters_exit_2_naming_them(corpus, tmp_path, entry, names):
    spec = tmp_path / "bad.hook"
    spec.write_text(f"broadcast to {tmp_path}/nodes/%n h5 {{\n  {corpus['root']}/{entry}\n}}\n")
    r = _stager("stage", str(spec), "--emulate-nodes", "2", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    for n in names:
        assert n in r.stderr, r.stderr
    assert "HDF5_PLUGIN_PATH at hdf5plugin" not in r.stderr
    assert not os.path.exists(tmp_path / "nodes")
