"""The SimGrid twin (stager.simulate): hand-computed times, byte counts equal to the real
plan's, the command's output schema, and a smoke run at 1,024 nodes.

Each simulation runs in a fresh process (SimGrid allows one engine per process), so these
tests start a few short Python processes; no timed assertions (the simulated clock is
deterministic, the wall clock is not).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stager import plan
from stager.simulate import PlatformError, load_platform, predict, replay
from stager.simulate.predict import scenario, simulate
from stager.staging.options import resolve_options

MiB = 1 << 20

#: A platform where only the PFS server's 16 MiB/s link costs time (and, when given, the
#: metadata latency): every other rate is 1e15, every other latency 0.
HAND = """
name = "hand"
[nodes]
shared_host = false
cores = 1
hash_bw = 1e15
copy_bw = 1e15
local_write_bw = 1e15
local_meta = 0
local_fsync = 0
link_bw = 1e15
latency = 0
message_cpu = 0
[network]
topology = "star"
[pfs]
servers = 1
server_bw = 16777216
cold_bw = 1e15
warm = false
stripe = 1048576
meta_ops = 1e15
meta_latency = {meta}
client_bw = 1e15
[mpiio]
dedup = false
aggregators_per_node = 1
"""


def _files(tmp_path, sizes, scatter=False, replicas=1):
    data = tmp_path / "data"
    data.mkdir(parents=True)
    for i, s in enumerate(sizes):
        with open(data / f"f{i:03d}.bin", "wb") as f:
            f.truncate(s)  # sparse: the plan only stats them
    spec = tmp_path / "s.hook"
    how = "scatter" if scatter else "broadcast"
    more = f" replicas {replicas}" if replicas > 1 else ""
    spec.write_text(f"{how} to {tmp_path}/out/%n files{more} {{\n  {data}/*.bin\n}}\n")
    return plan(str(spec))


def _platform(tmp_path, meta=0.0):
    p = tmp_path / "hand.toml"
    p.write_text(HAND.format(meta=meta))
    return str(p)


def test_two_nodes_by_hand(tmp_path):
    """64 MiB, 32 MiB chunks, 2 nodes: each round both nodes read their 16 MiB stripe
    through one 16 MiB/s link (2 s), two rounds, pipelined: 4 s. Naive: each node reads
    all 64 MiB through that link: 128 MiB / 16 MiB/s = 8 s."""
    p = _files(tmp_path, [64 * MiB])
    doc = predict(p, _platform(tmp_path), 2, "stripe")
    assert doc["staged"]["seconds"] == pytest.approx(4.0, abs=1e-6)
    assert doc["naive"]["seconds"] == pytest.approx(8.0, abs=1e-6)
    assert doc["speedup"] == pytest.approx(2.0, rel=1e-6)
    assert doc["staged"]["pfs_bytes"] == 64 * MiB
    assert doc["naive"]["pfs_bytes"] == 2 * 64 * MiB


def test_metadata_latency_by_hand(tmp_path):
    """With 0.5 s a metadata round trip: planning stats one file and globs one block
    (2 operations, 1 s); each node opens the file and checks it at close (2 operations,
    1 s) before reading: 4 s + 1 s."""
    p = _files(tmp_path, [64 * MiB])
    doc = predict(p, _platform(tmp_path, meta=0.5), 2, "stripe", naive=False)
    assert doc["staged"]["phases"]["plan"] == pytest.approx(1.0, abs=1e-6)
    assert doc["staged"]["seconds"] == pytest.approx(5.0, abs=1e-6)
    assert doc["staged"]["pfs_metadata_ops"] == 2 + 2 * 2
    assert "naive" not in doc


def test_aligned_file_domains_by_hand(tmp_path):
    """BG/Q's ROMIO aligns file domains to the file system block: 1 MiB read collectively
    by 4 nodes (2 groups of 2) with 1 MiB blocks keeps one aggregator busy (of 4): it
    reads the block (1 MiB at 16 MiB/s) and alone sends it to the 3 other nodes through
    its own 16 MiB/s link (3/16 s), not through its group's two links: 4/16 s."""
    p = _files(tmp_path, [MiB])
    sc = replay(p, 4, resolve_options({}, method="readall"), groups=2, dedup=True,
                aggregators_per_node=1.0, align=MiB)
    (r,) = sc.collective
    assert [gr.senders for gr in r.groups.values()] == [0, 1]
    assert sc.pfs_bytes == MiB and sum(r.groups[1].sends.values()) == 3 * MiB
    plat = tmp_path / "agg.toml"
    plat.write_text(HAND.format(meta=0.0).replace("link_bw = 1e15", "link_bw = 16777216")
                    .replace("dedup = false", "dedup = true\nalign = 1048576"))
    doc = predict(p, str(plat), 4, "readall", naive=False)
    assert doc["staged"]["seconds"] == pytest.approx(0.25, rel=1e-3)


SIZES = [5 * MiB + 3, 70 * MiB + 11, 1000, 4096, 0, 300 * 1024, 33 * MiB]


@pytest.mark.parametrize("method", ["stripe", "bcast", "readall", "naive"])
def test_replayed_bytes_equal_the_plan(tmp_path, method):
    p = _files(tmp_path, SIZES)
    opts = resolve_options({}, method=method)
    n = 8
    sc = replay(p, n, opts, groups=4)
    total = sum(SIZES)
    assert p.total_bytes == total
    assert sc.written == n * total
    read_once = method in ("stripe", "bcast")
    assert sc.pfs_bytes == (total if read_once else n * total) or method == "readall" \
        and sc.pfs_bytes < n * total
    assert sum(c for r in sc.collective + sc.solo for gr in r.groups.values()
               for c in [gr.commits]) == n * len(SIZES)
    # aggregation is exact: 4 groups of 2 nodes read what 8 groups of 1 read, summed
    fine = replay(p, n, opts, groups=8)
    for coarse_r, fine_r in zip(sc.collective, fine.collective):
        for g, gr in coarse_r.groups.items():
            got = sum(x[2] * x[3] for x in gr.reads)
            want = sum(x[2] * x[3] for h in (2 * g, 2 * g + 1) if h in fine_r.groups
                       for x in fine_r.groups[h].reads)
            assert got == want


def test_scatter_bytes_are_the_placements(tmp_path):
    from stager.planning.scatter import node_bytes

    p = _files(tmp_path, SIZES, scatter=True)
    sc = replay(p, 4, resolve_options({}), groups=2)
    assert sc.written == sum(node_bytes(p, 4)) == sum(SIZES)
    assert sc.pfs_bytes == sum(SIZES)


def test_the_simulated_actors_move_the_replayed_bytes(tmp_path):
    p = _files(tmp_path / "b", SIZES)
    q = _files(tmp_path / "s", SIZES, scatter=True, replicas=2)
    pf = load_platform("here")
    scs = [scenario(p, pf, 4, m) for m in ("stripe", "naive")] + [scenario(q, pf, 4)]
    assert scs[2].written == 2 * sum(SIZES) and scs[2].pfs_bytes == sum(SIZES)
    for sc, res in zip(scs, simulate(scs, pf)):
        assert res["pfs_bytes"] == sc.pfs_bytes
        assert res["written"] == sc.written
        assert res["pfs_meta_ops"] == sc.pfs_meta_ops
        assert res["seconds"] > 0


def test_the_command_prints_the_documented_schema(tmp_path):
    _files(tmp_path, [3 * MiB, 40 * MiB])
    out = subprocess.run([sys.executable, "-m", "stager", "plan", str(tmp_path / "s.hook"),
                          "--simulate", "here", "--nodes", "4", "--json"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"platform", "platform_file", "nodes", "simulated_groups", "nodes_per_group",
            "files", "bytes_per_node", "chunk_size", "staged", "naive", "speedup",
            "simulator_seconds"} <= set(doc)
    for part in (doc["staged"], doc["naive"]):
        assert {"method", "seconds", "total_seconds", "phases", "startup", "pfs_bytes",
                "pfs_metadata_ops", "written_bytes", "network_bytes", "pfs_gbps",
                "delivered_gbps", "busy_group0", "simulator_seconds"} <= set(part)
        assert list(part["phases"]) == ["plan", "lock and resume", "capacity", "prepare",
                                        "transfer", "record"]
        assert part["seconds"] == part["phases"]["transfer"]
    assert doc["staged"]["method"] == "stripe" and doc["naive"]["method"] == "naive"
    assert doc["naive"]["pfs_bytes"] == 4 * doc["staged"]["pfs_bytes"] == 4 * 43 * MiB
    text = subprocess.run([sys.executable, "-m", "stager", "plan", str(tmp_path / "s.hook"),
                           "--simulate", "here", "--nodes", "4"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert text.returncode == 0 and text.stdout.startswith("simulated on 'here' (4 nodes")


@pytest.mark.parametrize("argv, message", [
    (["--simulate", "here"], "--simulate needs --nodes N"),
    (["--simulate", "nowhere", "--nodes", "2"], "no platform 'nowhere'"),
    (["--simulate", "here", "--nodes", "2", "--method", "relay"], "method must be one of"),
])
def test_the_command_refuses_bad_input(tmp_path, argv, message):
    _files(tmp_path, [MiB])
    out = subprocess.run([sys.executable, "-m", "stager", "plan", str(tmp_path / "s.hook")]
                         + argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_a_bad_platform_file_names_the_key(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(HAND.format(meta=0).replace("cores = 1", "cores = 1\nspeed = 3"))
    with pytest.raises(PlatformError, match=r"\[nodes\]: unknown key\(s\) speed"):
        load_platform(str(p))
    p.write_text(HAND.format(meta=0).replace("server_bw = 16777216\n", ""))
    with pytest.raises(PlatformError, match="missing key 'server_bw'"):
        load_platform(str(p))
    p.write_text(HAND.format(meta=0).replace("latency = 0", "latency = -1", 1))
    with pytest.raises(PlatformError, match="latency: -1"):
        load_platform(str(p))


def test_every_shipped_platform_loads():
    for name in ("here", "bgq", "dragonfly"):
        pf = load_platform(name)
        assert pf.fabric_bw(1024) > 0 and os.path.isfile(pf.path)


def test_smoke_1024_nodes_on_every_shipped_platform(tmp_path):
    p = _files(tmp_path, [577 * 1000 * 1000])
    for name in ("bgq", "dragonfly"):
        doc = predict(p, name, 1024)
        assert doc["simulated_groups"] * doc["nodes_per_group"] == 1024
        assert 0 < doc["staged"]["seconds"] < doc["naive"]["seconds"]
        # on Blue Gene/Q each of the 8 I/O nodes reads the file once for its 128 nodes
        readers = 1024 // 128 if name == "bgq" else 1024
        assert doc["naive"]["pfs_bytes"] == readers * doc["staged"]["pfs_bytes"]
