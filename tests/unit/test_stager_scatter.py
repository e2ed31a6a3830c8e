"""Scatter staging, serially: the placement rule, the spec syntax, ``stager plan --nodes``,
and where a task finds its input (:mod:`stager.locality`)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from hooks import SpecError, parse_spec
from stager.errors import PlanError
from stager.locality import StagedCopyMissing, Where
from stager.planning import build_plan
from stager.planning.scatter import node_bytes, place, placement


@pytest.mark.parametrize("seed", range(20))
def test_every_output_on_replicas_distinct_nodes_balanced_within_one_output(seed):
    rng = random.Random(seed)
    nodes = rng.randint(1, 9)
    sizes = [rng.choice([0, 1, 10, 1000, rng.randint(1, 10**6)]) for _ in range(rng.randint(0, 60))]
    reps = [rng.randint(1, nodes) for _ in sizes]
    out = place(sizes, reps, nodes)
    load = [0] * nodes
    for s, r, hs in zip(sizes, reps, out):
        assert len(hs) == r and len(set(hs)) == r and all(0 <= h < nodes for h in hs)
        for h in hs:
            load[h] += s
    if sizes:
        assert max(load) - min(load) <= max(sizes), (load, max(sizes))
    assert out == place(sizes, reps, nodes)  # deterministic: resume finds the same nodes


def test_more_replicas_than_nodes_is_refused():
    with pytest.raises(ValueError, match="3 replicas"):
        place([1], [3], 2)


def _tree(tmp_path, sizes):
    src = tmp_path / "src"
    src.mkdir()
    for i, n in enumerate(sizes):
        (src / f"f{i:02d}.bin").write_bytes(b"x" * n)
    return src


def test_spec_syntax_and_plan(tmp_path):
    src = _tree(tmp_path, [100, 300, 200, 50])
    text = (f"scatter to {tmp_path}/out/%n files replicas 2 {{ {src}/*.bin }}\n"
            f"broadcast to {tmp_path}/all/%n files {{ {src}/f00.bin }}\n")
    spec = parse_spec(text, path=str(tmp_path / "s.hook"))
    assert [(b.mode, b.replicas) for b in spec.blocks] == [("scatter", 2), ("broadcast", 0)]
    plan = build_plan(spec)
    held = placement(plan, 3)
    # the broadcast file is not placed: every node has it
    assert sorted(held) == [("files", i) for i in range(4)]
    assert all(len(h) == 2 for h in held.values())
    per = node_bytes(plan, 3)
    assert sum(per) == 2 * 650 + 3 * 100
    with pytest.raises(PlanError, match="needs at least 2 nodes, and this job has 1"):
        placement(plan, 1)


@pytest.mark.parametrize("text, where", [
    ("broadcast to /d files replicas 2 { a }", "'replicas' is an option of scatter blocks"),
    ("scatter to /d files replicas 0 { a }", "write a whole number of nodes"),
    ("scatter to /d files replicas two { a }", "write a whole number of nodes"),
    ("scatter /d files { a }", "missing 'to' after 'scatter'"),
])
def test_spec_errors(text, where):
    with pytest.raises(SpecError, match=where):
        parse_spec(text, path="s.hook")


def _plan_cli(*args):
    return subprocess.run([sys.executable, "-m", "stager", "plan", *args],
                          capture_output=True, text=True, timeout=60)


def test_plan_cli_shows_bytes_per_node_and_refuses_too_many_replicas(tmp_path):
    src = _tree(tmp_path, [1000, 1000, 1000, 1000])
    spec = tmp_path / "s.hook"
    spec.write_text(f"scatter to {tmp_path}/out/%n files replicas 2 {{ {src}/*.bin }}\n")
    r = _plan_cli(str(spec), "--nodes", "4")
    assert r.returncode == 0, r.stderr
    assert "bytes per node on 4 node(s): node 0: 2.0 KiB, node 1: 2.0 KiB" in r.stdout
    r = _plan_cli(str(spec), "--nodes", "4", "--json")
    doc = json.loads(r.stdout)
    assert doc["bytes_per_node"] == [2000] * 4
    assert sorted(n for hs in doc["holders"].values() for n in hs) == [0, 0, 1, 1, 2, 2, 3, 3]
    r = _plan_cli(str(spec))
    assert r.returncode == 0 and "pass --nodes N" in r.stdout
    r = _plan_cli(str(spec), "--nodes", "1")
    assert r.returncode == 2 and "s.hook:1:1: 'scatter ... replicas 2' needs at least 2" \
        in r.stderr


def test_plan_cli_refuses_a_file_no_node_can_hold(tmp_path):
    """A real 64 KiB tmpfs as the destination: a 100 KiB file can go nowhere (exit 2)."""
    src = _tree(tmp_path, [100 << 10, 10])
    dest = tmp_path / "tiny"
    dest.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(dest)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): the too-large-file check "
                    "needs a small filesystem")
    try:
        spec = tmp_path / "s.hook"
        spec.write_text(f"scatter to {dest}/%n files {{ {src}/*.bin }}\n")
        r = _plan_cli(str(spec), "--nodes", "2")
        assert r.returncode == 2, r.stdout
        assert "f00.bin (100.0 KiB) is larger than the free space" in r.stderr
    finally:
        subprocess.run(["umount", str(dest)], check=True)


def test_where_finds_the_local_copy_or_the_shared_one(tmp_path):
    src = _tree(tmp_path, [10, 20, 30])
    spec = parse_spec(f"scatter to {tmp_path}/out/%n files {{ {src}/*.bin }}\n",
                      path=str(tmp_path / "s.hook"))
    w = Where(build_plan(spec), ["node0", "node1"])
    f = str(src / "f02.bin")
    holder = w.node(f)
    other = ({"node0", "node1"} - {holder}).pop()
    local = w.copy(f, holder)
    assert local == f"{tmp_path}/out/{holder}/f02.bin"
    assert sum(len(w.nodes(str(src / f"f0{i}.bin"))) for i in range(3)) == 3
    # not staged yet: soft falls back to the source (counted), hard names node and file
    assert w.local(f, holder) == f and w.fell_back == 1
    with pytest.raises(StagedCopyMissing, match=f"node {holder}: the staged copy {local} "
                                                "is missing"):
        w.local(f, holder, hard=True)
    os.makedirs(os.path.dirname(local))
    with open(local, "wb") as fh:
        fh.write(b"y" * 30)
    assert w.local(f, holder, hard=True) == local
    with pytest.raises(StagedCopyMissing, match=f"node {other} holds no copy of "):
        w.local(f, other, hard=True)
    with open(local, "wb") as fh:
        fh.write(b"y" * 3)
    with pytest.raises(StagedCopyMissing, match="has 3 bytes, 30 were staged"):
        w.local(f, holder, hard=True)
    with pytest.raises(KeyError, match="not a file of the staged plan"):
        w.node(str(tmp_path / "nope"))


@pytest.mark.parametrize("seed", range(40))
def test_frame_ranges_of_one_output_on_distinct_nodes_and_loads_stay_balanced(seed):
    """Groups (the frame ranges of one HDF5 output, near-equal sizes, one replica count)
    mixed with single files: a group's ranges land on distinct nodes while nodes suffice,
    and loads still differ by at most the largest output."""
    from stager.kinds.h5.frames import split_rows
    rng = random.Random(seed)
    nodes = rng.randint(1, 9)
    sizes, reps, groups = [], [], []
    for _ in range(rng.randint(0, 8)):
        if rng.random() < 0.5:  # a single file
            sizes.append(rng.randint(0, 10**6))
            reps.append(rng.randint(1, nodes))
            continue
        frames, frame_bytes, r = rng.randint(1, 200), rng.randint(1, 5000), rng.randint(1, nodes)
        g = []
        for lo, hi in split_rows(frames, nodes):
            g.append(len(sizes))
            sizes.append((hi - lo) * frame_bytes)
            reps.append(r)
        groups.append(g)
    out = place(sizes, reps, nodes, groups)
    load = [0] * nodes
    for s, r, hs in zip(sizes, reps, out):
        assert len(hs) == r and len(set(hs)) == r
        for h in hs:
            load[h] += s
    for g in groups:
        held = [h for i in g for h in out[i]]
        if len(held) <= nodes:
            assert len(set(held)) == len(held), (g, [out[i] for i in g])
    if sizes:
        assert max(load) - min(load) <= max(sizes), (load, max(sizes))
    assert out == place(sizes, reps, nodes, groups)
