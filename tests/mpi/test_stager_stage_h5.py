"""HDF5 selections staged collectively under mpirun (any rank count 1..4, emulated nodes).

Rank 0 writes a small NeXus-like scan (``tests.h5scan.make_scan``: a 3-D
uint16 stack, one chunk per frame, shuffle+gzip) and checks the node-local
copies; every per-rank verdict goes through ``assert_all``.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

from tests.mpiutil import assert_all, emulated, shared_tmpdir
from tests.h5scan import FRAMES, NX, NY, make_scan
import stager.planning.kinds  # noqa: F401  (registers the block kinds parse_spec reads)

pytestmark = pytest.mark.mpi


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.fixture
def scan():
    comm = _comm()
    d = shared_tmpdir(comm, "mpistage-h5-")
    if comm.rank == 0:
        make_scan(os.path.join(d, "scan42.h5"))
    comm.Barrier()
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _spec(d, body, dest="out/%n"):
    from hooks import parse_spec
    return parse_spec(f"broadcast to {d}/{dest} h5 {{\n{body}\n}}\n", path="t.hook",
                      base_dir=d, env={})


def stage_h5(spec, comm, *, memory=None, inline_bytes=None, **options):
    """``stager.stage`` of an h5-only spec, its report seen as the h5 figures."""
    from types import SimpleNamespace

    from stager import stage

    rep = stage(spec, comm, h5_memory=memory, h5_inline_bytes=inline_bytes, progress=False,
                **options)
    h5 = rep.extra.get("h5", {})
    return SimpleNamespace(nodes=rep.nodes, files=rep.files, files_staged=rep.files_transferred,
                           files_skipped=rep.files_skipped, datasets=h5.get("datasets", 0),
                           bytes_written=rep.bytes_written, pieces=h5.get("pieces", 0),
                           max_piece_bytes=h5.get("max_piece_bytes", 0), report=rep)


def _nodes(comm):
    return sorted({min(2, comm.size), comm.size})


def _check_on_rank0(comm, fn):
    """Run ``fn()`` on rank 0 (returns (ok, message)); every rank learns the verdict."""
    ok, msg = (True, "")
    if comm.rank == 0:
        try:
            ok, msg = fn()
        except Exception as e:
            ok, msg = False, f"{type(e).__name__}: {e}"
    assert_all(comm, ok, msg)


@pytest.mark.parametrize("sel, idx", [("[3:19]", np.s_[3:19]), ("", np.s_[:]),
                                      ("[1:-2:5]", np.s_[1:-2:5])])
def test_stack_values_chunks_filters_and_attrs(scan, sel, idx):
    import h5py

    comm = _comm()
    for k in _nodes(comm):
        # a 150 KiB memory cap forces several pieces; inline_bytes=0 forces collective reads
        r = stage_h5(_spec(scan, f"  scan42.h5:/entry/data/data{sel}", f"out{k}{sel}/%n"),
                     emulated(comm, k), memory="150K", inline_bytes=0)

        def check(r=r, k=k):
            with h5py.File(os.path.join(scan, "scan42.h5"), "r") as s:
                src = s["/entry/data/data"]
                want = src[idx]
                for node in r.nodes:
                    p = os.path.join(scan, f"out{k}{sel}", node, "scan42.h5")
                    with h5py.File(p, "r") as o:
                        got = o["/entry/data/data"]
                        if not np.array_equal(got[()], want) or got.dtype != np.uint16:
                            return False, f"{p}: values differ from the source selection"
                        if got.chunks != (1, NY, NX) or got.compression != "gzip" \
                                or got.compression_opts != 4 or not got.shuffle:
                            return False, f"{p}: chunks/filters {got.chunks} {got.compression}"
                        a = dict(got.attrs)
                        if a["units"] != "counts" or a["exposure_s"] != np.float32(0.1):
                            return False, f"{p}: attributes lost: {a}"
                        if a["stager_source"] != f"{s.filename}:/entry/data/data":
                            return False, f"{p}: stager_source {a['stager_source']}"
                        # gzip'd chunks move as stored bytes unless a step forces re-chunking
                        kind = "xxh3_128:values:" if "::" in sel or sel.count(":") == 2 \
                            else "xxh3_128:chunks:"
                        if not a["stager_checksum"].startswith(kind) \
                                or len(a["stager_checksum"]) != len(kind) + 32:
                            return False, f"{p}: stager_checksum {a['stager_checksum']}"
                        if sel and not a["stager_slice"].startswith("["):
                            return False, f"{p}: stager_slice {a['stager_slice']!r}"
                        if o["/entry/data"].attrs["NX_class"] != "NXdata":
                            return False, f"{p}: ancestor attributes lost"
            return True, ""
        _check_on_rank0(comm, check)
        assert_all(comm, r.pieces > 1 and r.max_piece_bytes <= 75 << 10,
                   f"memory bound not kept: {r}")
        assert_all(comm, r.files_staged == 1 and len(r.nodes) == k, str(r))


def test_group_copy_with_links_strings_and_resume(scan):
    import h5py

    comm = _comm()
    k = min(2, comm.size)
    spec = _spec(scan, "  scan42.h5:/entry/instrument\n  scan42.h5:/entry/data/data[0:8]\n"
                       "  scan42.h5:/entry/log")
    r = stage_h5(spec, emulated(comm, k))
    assert_all(comm, (r.files_staged, r.files_skipped, r.datasets) == (1, 0, 5), str(r))

    def check():
        with h5py.File(os.path.join(scan, "scan42.h5"), "r") as s:
            for node in r.nodes:
                p = os.path.join(scan, "out", node, "scan42.h5")
                with h5py.File(p, "r") as o:
                    if o["/entry/instrument/name"][()] != s["/entry/instrument/name"][()]:
                        return False, "vlen string differs"
                    if not np.array_equal(o["/entry/instrument/detector/flatfield"][()],
                                          s["/entry/instrument/detector/flatfield"][()]):
                        return False, "flatfield differs"
                    link = o.get("/entry/instrument/detector/data", getlink=True)
                    if not isinstance(link, h5py.SoftLink) or link.path != "/entry/data/data":
                        return False, f"soft link not kept: {link}"
                    if o["/entry/instrument/detector/data"].shape != (8, NY, NX):
                        return False, "soft link does not reach the staged stack"
                    if not np.array_equal(o["/entry/log"][()], s["/entry/log"][()]):
                        return False, "compound dataset differs"
                    if o["/entry/instrument/detector/distance"].attrs["units"] != "m":
                        return False, "attribute lost in group copy"
        return True, ""
    _check_on_rank0(comm, check)
    # resume: unchanged source and selections -> skipped; force -> staged again
    r2 = stage_h5(spec, emulated(comm, k))
    assert_all(comm, (r2.files_skipped, r2.bytes_written) == (1, 0), f"no resume: {r2}")
    r3 = stage_h5(spec, emulated(comm, k), force=True)
    assert_all(comm, r3.files_staged == 1 and r3.bytes_written == r.bytes_written, str(r3))
    # a different selection of the same file is not "current"
    r4 = stage_h5(_spec(scan, "  scan42.h5:/entry/data/data[0:9]"), emulated(comm, k))
    assert_all(comm, r4.files_staged == 1, f"changed selection was skipped: {r4}")


def test_state_records_make_verify_and_clean_work(scan):
    from core import checksum
    from tests.stagerun import read_record
    from stager.planning import spec_key
    comm = _comm()
    k = min(2, comm.size)
    spec = _spec(scan, "  scan42.h5:/entry/data/data[::4]")
    r = stage_h5(spec, emulated(comm, k))

    def check():
        for node in r.nodes:
            root = os.path.join(scan, "out", node)
            rec = read_record(root, spec_key(spec)).files.get("scan42.h5")
            path = os.path.join(root, "scan42.h5")
            if rec is None or rec.checksum != checksum.file_hexdigest(path):
                return False, f"state record missing or wrong in {root}: {rec}"
            if rec.size != os.path.getsize(path) or oct(os.stat(root).st_mode & 0o777) != "0o700":
                return False, f"size or directory mode wrong in {root}"
            if any(".stager-tmp-" in n for n in os.listdir(root)):
                return False, f"temporary file left in {root}"
        return True, ""
    _check_on_rank0(comm, check)


@pytest.mark.parametrize("entry, match", [
    ("scan42.h5:/entry/data/nope", "matches no object"),
    (f"scan42.h5:/entry/data/data[0:{FRAMES + 1}]", "out of range"),
    ("scan42.h5:/entry/instrument[0:2]", "is a group, not a dataset"),
])
def test_bad_selection_fails_on_every_rank(scan, entry, match):
    from stager.errors import PlanError
    comm = _comm()
    try:
        stage_h5(_spec(scan, f"  {entry}"), emulated(comm, min(2, comm.size)))
        msg = "no error"
    except PlanError as e:
        msg = str(e)
    msgs = comm.allgather(msg)
    assert_all(comm, len(set(msgs)) == 1 and match in msg and msg.startswith("t.hook:2:3"), msg)
    assert_all(comm, not os.path.exists(os.path.join(scan, "out")), "a failed plan wrote files")


def test_failure_on_one_node_fails_all_without_hang(scan):
    """A destination that cannot be written on the last node fails every rank, same message."""
    from stager.errors import TransferError
    comm = _comm()
    k = min(2, comm.size)
    if comm.rank == 0:
        os.makedirs(os.path.join(scan, "out", f"node{k - 1}"), mode=0o700)
        os.mkdir(os.path.join(scan, "out", f"node{k - 1}", "scan42.h5"))  # a directory in the way
    comm.Barrier()
    try:
        stage_h5(_spec(scan, "  scan42.h5:/entry/data/data"), emulated(comm, k),
                 inline_bytes=0)
        msg = "no error"
    except TransferError as e:
        msg = str(e)
    msgs = comm.allgather(msg)
    assert_all(comm, len(set(msgs)) == 1 and f"node node{k - 1}" in msg
               and "a directory is there" in msg, msg)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_tiny_tmpfs_fails_capacity_check_before_any_write(scan):
    from stager.errors import CapacityError
    comm = _comm()
    k = min(2, comm.size)
    mnt = os.path.join(scan, "mnt")
    mounted, why = False, ""
    if comm.rank == 0:
        # 160 frames of 512x512 noise: ~60 MiB stored, far above a 4 MiB tmpfs
        make_scan(os.path.join(scan, "big.h5"), frames=160, ny=256, nx=256, seed=3)
        os.mkdir(mnt)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt],
                             capture_output=True, text=True)
        mounted, why = res.returncode == 0, res.stderr.strip()
    mounted, why = comm.bcast((mounted, why), root=0)
    if not mounted:
        pytest.skip(f"mount -t tmpfs failed here: {why}")
    try:
        try:
            stage_h5(_spec(scan, "  big.h5:/entry/data/data[0:120]", "mnt/%n"), emulated(comm, k))
            msg = "no error"
        except CapacityError as e:
            msg = str(e)
        msgs = comm.allgather(msg)
        assert_all(comm, len(set(msgs)) == 1 and "node node0" in msg and "short by" in msg, msg)
        left = os.listdir(mnt) if comm.rank == 0 else []
        assert_all(comm, left == [], f"capacity failure still wrote: {left}")
    finally:
        comm.Barrier()
        if comm.rank == 0:
            subprocess.run(["umount", mnt], check=False)


def test_kernels_reader_reads_the_staged_stack(scan):
    comm = _comm()
    from kernels import HDF5Stack
    r = stage_h5(_spec(scan, "  scan42.h5:/entry/data/data[4:12]"),
                 emulated(comm, min(2, comm.size)))

    def check():
        import h5py
        with h5py.File(os.path.join(scan, "scan42.h5"), "r") as s:
            want = s["/entry/data/data"][4:12]
        for node in r.nodes:
            with HDF5Stack(os.path.join(scan, "out", node, "scan42.h5")) as st:
                if len(st) != 8 or not all(np.array_equal(st.read(i), want[i]) for i in range(8)):
                    return False, f"HDF5Stack reads different frames on {node}"
        return True, ""
    _check_on_rank0(comm, check)
