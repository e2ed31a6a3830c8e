"""``scatter ... h5`` under mpirun at 2 and 4 emulated nodes: an NXmx-shaped scan split into
frame ranges, one per node; where every frame lands, verify/clean/resume, and tasks that
read their frames where they are staged.

The source follows the NeXus NXmx application definition's layout (NXentry/NXdata with
the frame stack at ``/entry/data/data``, per-frame ``omega`` under
``/entry/sample/goniometer``, a ``pixel_mask`` under the NXdetector) and, where
hdf5plugin is installed, the Eiger's bitshuffle+LZ4 chunks of one frame each.
Every test passes at any rank count 1..4: node counts above the rank count skip.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from tests.mpiutil import assert_all, emulated

pytestmark = pytest.mark.mpi

FRAMES, H, W = 30, 48, 40


def _comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _nodes_or_skip(comm, k):
    if k > comm.size:
        pytest.skip(f"{k} emulated nodes need at least {k} ranks (running {comm.size})")


def _stack():
    rng = np.random.default_rng(7)
    return rng.poisson(3.0, (FRAMES, H, W)).astype(np.uint16)


def _scan(d, comm, replicas=1):
    """Rank 0 writes an NXmx-shaped scan and the spec; every rank gets the paths."""
    import h5py

    src = os.path.join(d, "scan_0001.h5")
    spec = os.path.join(d, "scan.hook")
    if comm.rank == 0:
        try:
            import hdf5plugin
            comp = dict(hdf5plugin.Bitshuffle(cname="lz4"))
        except ImportError:
            comp = dict(compression="gzip")
        with h5py.File(src, "w") as f:
            e = f.create_group("entry")
            e.attrs["NX_class"] = "NXentry"
            e["definition"] = "NXmx"
            data = e.create_group("data")
            data.attrs["NX_class"] = "NXdata"
            data.create_dataset("data", data=_stack(), chunks=(1, H, W), **comp)
            gon = e.create_group("sample/goniometer")
            gon.attrs["NX_class"] = "NXtransformations"
            om = gon.create_dataset("omega", data=np.linspace(0.0, 0.1 * FRAMES, FRAMES,
                                                             endpoint=False))
            om.attrs["units"] = "deg"
            det = e.create_group("instrument/detector")
            det.attrs["NX_class"] = "NXdetector"
            det.create_dataset("pixel_mask", data=(np.arange(H * W) % 97 == 0)
                               .astype(np.uint32).reshape(H, W))
            det["count_time"] = 0.01
        with open(spec, "w") as f:
            f.write(f"scatter to {d}/nodes/%n h5 replicas {replicas} {{\n"
                    f"  {src}:/entry\n}}\n")
    comm.Barrier()
    return spec, src


def _held(d, nodes):
    """Rank 0: for every node, ``{frame: (file, row)}`` of the frames its copies hold
    (from their names; :func:`_check_copies` reads the frames)."""
    out = {}
    for n in nodes:
        root = os.path.join(d, "nodes", n)
        mine = {}
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
            if not name.endswith(".h5"):
                continue
            a, b = name[len("scan_0001.frames"):-3].split("-")
            for row, frame in enumerate(range(int(a), int(b))):
                mine[frame] = (name, row)
        out[n] = mine
    return out


def _check_copies(d, nodes, replicas):
    """Rank 0: every frame on ``replicas`` nodes with its omega; metadata whole. Messages."""
    import h5py

    stack = _stack()
    held = _held(d, nodes)
    bad = []
    for frame in range(FRAMES):
        on = [n for n in nodes if frame in held[n]]
        if len(on) != replicas:
            bad.append(f"frame {frame} on {on}")
        for n in on:
            name, row = held[n][frame]
            with h5py.File(os.path.join(d, "nodes", n, name), "r") as f:
                if not np.array_equal(f["/entry/data/data"][row], stack[frame]):
                    bad.append(f"frame {frame} on {n} differs")
                if f["/entry/sample/goniometer/omega"][row] != 0.1 * frame and \
                        abs(f["/entry/sample/goniometer/omega"][row] - 0.1 * frame) > 1e-12:
                    bad.append(f"omega of frame {frame} on {n}")
                if f["/entry/instrument/detector/pixel_mask"].shape != (H, W) or \
                        f["/entry"].attrs["NX_class"] != "NXentry" or \
                        f["/entry/instrument/detector/count_time"][()] != 0.01:
                    bad.append(f"metadata of {name} on {n}")
    counts = [len(held[n]) for n in nodes]
    return bad, counts


@pytest.mark.parametrize("k", [2, 4])
def test_frames_split_over_nodes_once_each_verify_resume_clean(mpi_tmpdir, k):
    from stager import clean, stage, verify
    comm = _comm()
    _nodes_or_skip(comm, k)
    spec, _ = _scan(mpi_tmpdir, comm)
    rep = stage(spec, emulated(comm, k), progress=False, h5_inline_bytes=0)
    bad, counts = _check_copies(mpi_tmpdir, rep.nodes, 1) if comm.rank == 0 else ([], [])
    assert_all(comm, not bad, "; ".join(bad[:5]))
    # balanced within one range (ranges are whole frames: at most one frame apart)
    assert_all(comm, comm.rank != 0 or max(counts) - min(counts) <= 1, str(counts))
    # node 0's leader staged its one range by itself: nothing went through the exchange
    h5x = rep.extra.get("h5", {})
    assert_all(comm, h5x.get("scatter_read_alone") == 1, str(h5x))
    again = stage(spec, emulated(comm, k), progress=False, h5_inline_bytes=0)
    assert_all(comm, again.files_transferred == 0, str(again))
    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == k, str(v))
    clean(spec, emulated(comm, k))
    comm.Barrier()
    gone = not os.path.exists(os.path.join(mpi_tmpdir, "nodes")) if comm.rank == 0 else True
    assert_all(comm, gone, "clean left the nodes directory behind")


def test_two_replicas_each_frame_on_two_nodes(mpi_tmpdir):
    from stager import stage, verify
    comm = _comm()
    k = min(comm.size, 4)
    if k < 2:
        pytest.skip("two replicas need two emulated nodes, so two ranks (running 1)")
    spec, _ = _scan(mpi_tmpdir, comm, replicas=2)
    rep = stage(spec, emulated(comm, k), progress=False, h5_inline_bytes=0)
    bad, counts = _check_copies(mpi_tmpdir, rep.nodes, 2) if comm.rank == 0 else ([], [])
    assert_all(comm, not bad, "; ".join(bad[:5]))
    assert_all(comm, comm.rank != 0 or sum(counts) == 2 * FRAMES, str(counts))
    # node 0's leader moved only its own ranges, among their holders
    h5x = rep.extra.get("h5", {})
    assert_all(comm, h5x.get("scatter_in_groups") == 2 and h5x.get("scatter_read_alone") == 0,
               str(h5x))
    v = verify(spec, emulated(comm, k))
    assert_all(comm, v.files_checked == 2 * k, str(v))


def test_a_node_reads_its_frames_where_they_are_staged(mpi_tmpdir):
    """stager.where: the holder reads its copy (rows of the range file), another node is
    told where they are (hard) or reads the source (soft); a vanished range copy is named
    with its node (hard) or read from the source (soft)."""
    import h5py

    from stager import StagedCopyMissing, stage, where
    comm = _comm()
    k = min(comm.size, 4)
    if k < 2:
        pytest.skip("needs two emulated nodes, so two ranks (running 1)")
    spec, src = _scan(mpi_tmpdir, comm)
    rep = stage(spec, emulated(comm, k), progress=False)
    ok, msg = True, ""
    if comm.rank == 0:
        stack = _stack()
        w = where(spec, rep.nodes)
        ranges = w.frame_ranges(src)
        ok = sum(len(fr) for fr, _ in ranges) == FRAMES and len(ranges) == k
        for fr, nodes in ranges:
            for frame in (fr.first, fr.stop - 1):
                at = w.frames_at(src, frame, nodes[0], hard=True)
                with h5py.File(at.path, "r") as f:
                    ok = ok and not at.fell_back and at.path != src and \
                        np.array_equal(f["/entry/data/data"][at.row], stack[frame])
        fr, nodes = ranges[0]
        other = [n for n in rep.nodes if n not in nodes][0]
        try:
            w.frames_at(src, fr.first, other, hard=True)
            ok, msg = False, "hard placement on a node without the frames did not fail"
        except StagedCopyMissing as e:
            ok = ok and f"node {other}" in str(e) and f"frames {fr.first}.." in str(e)
            msg += str(e)
        soft = w.frames_at(src, fr.first, other)
        ok = ok and soft.fell_back and soft.path == src and soft.row == fr.first
        at = w.frames_at(src, fr.first, nodes[0])
        os.unlink(at.path)
        try:
            w.frames_at(src, fr.first, nodes[0], hard=True)
            ok = False
        except StagedCopyMissing as e:
            ok = ok and f"node {nodes[0]}" in str(e) and os.path.basename(at.path) in str(e)
            msg += f"; {e}"
        soft = w.frames_at(src, fr.first, nodes[0])
        ok = ok and soft.fell_back and soft.path == src and w.fell_back == 2
    assert_all(comm, ok, msg)


def _frames_of(d, nodes, stem):
    """Rank 0: ``{source frame: [(node, frame array)]}`` from every node's range files of
    ``stem`` (named ``stem.frames{a}-{b}.h5``)."""
    import h5py

    out = {}
    for n in nodes:
        root = os.path.join(d, "nodes", n)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
            if not name.startswith(stem + ".frames"):
                continue
            a, b = name[len(stem) + len(".frames"):-3].split("-")
            with h5py.File(os.path.join(root, name), "r") as f:
                stack = f["/entry/data/data"][()]
                link = f.get("/entry/instrument/detector/data")
                if link is not None and not np.array_equal(link[()], stack):
                    stack = None  # the NXmx soft link no longer reaches the stack
            for row, frame in enumerate(range(int(a), int(b))):
                out.setdefault(frame, []).append((n, None if stack is None else stack[row]))
    return out


def test_eiger_and_nxmx_files_split_as_their_formats_define(mpi_tmpdir):
    """Files laid out as DECTRIS's Eiger file writer and the NXmx application definition
    write them (:mod:`tests.data.nxmx`, bitshuffle+LZ4 chunks of one frame): an NXmx
    master's virtual dataset and each Eiger data file split over the nodes frame by frame;
    an Eiger master's two linked stacks of different lengths refused, on every rank."""
    pytest.importorskip("hdf5plugin", reason="Eiger and NXmx stacks are bitshuffle+LZ4: "
                        "pip install --no-deps hdf5plugin (make setup does)")
    from stager import PlanError, stage
    from tests.data.nxmx import build_eiger, build_nxmx_vds
    comm = _comm()
    k = min(comm.size, 4)
    if k < 2:
        pytest.skip("needs two emulated nodes, so two ranks (running 1)")
    d = mpi_tmpdir
    if comm.rank == 0:
        eiger = build_eiger(os.path.join(d, "eiger"), "s1", n_per_file=(7, 4))
        vds = build_nxmx_vds(os.path.join(d, "vds"), "s2", n_per_file=(3, 4, 2))
        with open(os.path.join(d, "ok.hook"), "w") as f:
            f.write(f"scatter to {d}/nodes/%n h5 {{\n  {d}/vds/{vds['master']}:/entry\n"
                    f"  {d}/eiger/s1_data_*.h5:/entry/data/data\n}}\n")
        with open(os.path.join(d, "master.hook"), "w") as f:
            f.write(f"scatter to {d}/m/%n h5 {{ {d}/eiger/{eiger['master']}:/entry }}\n")
    comm.Barrier()
    rep = stage(os.path.join(d, "ok.hook"), emulated(comm, k), progress=False,
                h5_inline_bytes=0)
    bad = []
    if comm.rank == 0:
        for stem, frames in (("s2_master", vds["frames"]), ("s1_data_000001", eiger["frames"][:7]),
                             ("s1_data_000002", eiger["frames"][7:])):
            got = _frames_of(d, rep.nodes, stem)
            if sorted(got) != list(range(len(frames))):
                bad.append(f"{stem}: frames {sorted(got)}")
            for frame, copies in got.items():
                if len(copies) != 1 or copies[0][1] is None or \
                        not np.array_equal(copies[0][1], frames[frame]):
                    bad.append(f"{stem} frame {frame}: {[n for n, _ in copies]}")
            on = {n for c in got.values() for n, _ in c}
            if len(on) != min(k, len(frames)):
                bad.append(f"{stem} on {sorted(on)}")
    assert_all(comm, not bad, "; ".join(bad[:5]))
    msg = ""
    try:
        stage(os.path.join(d, "master.hook"), emulated(comm, k), progress=False)
    except PlanError as e:
        msg = str(e)
    assert_all(comm, "master.hook:1:1" in msg and "data_000002 (4 frames)" in msg
               and "two frame stacks" in msg, msg)
