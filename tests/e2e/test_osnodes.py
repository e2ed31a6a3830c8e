"""The cluster's path: ``stager`` and a workflow over OS-level nodes, no ``--emulate-nodes``.

Each node is its own host name (UTS namespace) and its own node-local directory
(mount namespace) at one path, ``LOCAL``; Open MPI sees separate hosts
(:mod:`tests.osnodes`, docs/contributing.md). So nodes come from host names, the
leaders of different nodes exchange by messages over TCP (the stager's report says
which exchange it used: never the shared-memory window of emulated nodes), and a
destination without ``%n`` is a different directory on each node. Each test is a few
``mpirun`` runs of a few seconds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests.stagerun import journal_lines, wait_for
from tests.osnodes import OSNodes

pytestmark = pytest.mark.osnodes

HOSTS = ["nodeA", "nodeB", "nodeC", "nodeD"]
#: ``info["exchange"]`` of the stager's report per method, leaders on different hosts
EXCHANGE = {"stripe": "Iallgatherv", "bcast": "Ibcast", "readall": "Read_at_all",
            "naive": "none"}


def _sources(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    rng = __import__("random").Random(26)
    for i in range(240):  # small files: batches; a 64 KiB file is 64 rounds at 1K chunks
        (src / f"f{i:03d}.bin").write_bytes(rng.randbytes(64 << 10))
    (src / "big.bin").write_bytes(rng.randbytes(3 << 20))  # several chunks of 1M
    return src


def _copies(nodes: OSNodes, host: str, sub: str = "data") -> dict:
    """Node ``host``'s staged files (name -> bytes), read from outside the node."""
    root = nodes.node_dir(host) / sub
    return {p.name: p.read_bytes() for p in root.glob("*.bin")} if root.is_dir() else {}


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_stage_every_method_verify_resume_clean(tmp_path):
    nodes = OSNodes.create(tmp_path, HOSTS)
    src = _sources(nodes.tmp)
    want = {p.name: p.read_bytes() for p in src.glob("*.bin")}
    spec = nodes.tmp / "b.hook"  # no %n: LOCAL is node-local, as /local/scratch on a cluster
    spec.write_text(f"broadcast to {nodes.local}/data files {{\n  {src}/*.bin\n}}\n")
    rep = nodes.tmp / "r.json"
    total = sum(map(len, want.values()))

    for method in ("stripe", "readall", "bcast", "naive"):
        r = nodes.stager("stage", str(spec), "--method", method, "--force", "--chunk-size", "1M",
                         "--small-file-threshold", "128K", "--no-progress", "--json", str(rep))
        assert r.returncode == 0, (method, r.stderr)
        data = _report(rep)
        assert data["method"] == method and data["nodes"] == HOSTS, data
        assert data["bytes_written"] == len(HOSTS) * total, (method, data["bytes_written"])
        assert data["extra"]["files"]["exchange"].startswith(EXCHANGE[method]), (method, data)
        for h in HOSTS:
            assert _copies(nodes, h) == want, f"{method}: node {h}'s copies differ"

    r = nodes.stager("verify", str(spec))
    assert r.returncode == 0 and "all match" in r.stdout, r.stderr
    victim = nodes.node_dir("nodeC") / "data" / "f007.bin"
    victim.write_bytes(b"\x00" + victim.read_bytes()[1:])
    r = nodes.stager("verify", str(spec))
    assert r.returncode == 1, r.stdout + r.stderr
    # the node by its host name, the copy by the path it has on that node
    assert f"mismatch: node nodeC: {nodes.local}/data/f007.bin" in r.stderr, r.stderr
    r = nodes.stager("clean", str(spec))
    assert r.returncode == 0, r.stderr
    assert f"left {nodes.local}/data/f007.bin: modified since it was staged" in r.stderr, \
        r.stderr
    for h in HOSTS:  # everything else went; nodeC kept the file changed since staging
        left = sorted(p.relative_to(nodes.node_dir(h)) for p in nodes.node_dir(h).rglob("*"))
        assert left == ([Path("data"), Path("data/f007.bin")] if h == "nodeC" else []), (h, left)
    shutil.rmtree(nodes.node_dir("nodeC") / "data")

    # Resume: Ctrl-C in the middle of a slow run (the small files in 1 KiB rounds), then
    # the same command.
    want = {n: b for n, b in want.items() if n != "big.bin"}
    spec = nodes.tmp / "small.hook"
    spec.write_text(f"broadcast to {nodes.local}/data files {{\n  {src}/f*.bin\n}}\n")
    slow = ["stage", str(spec), "--chunk-size", "1K", "--small-file-threshold", "512",
            "--no-progress", "--json", str(rep)]
    job = nodes.popen([sys.executable, "-m", "stager", *slow])
    try:
        wait_for(lambda: journal_lines(nodes.node_dir("nodeD") / "data") >= 3
                 or job.poll() is not None, timeout=60, what="the first copies on nodeD")
        assert job.poll() is None, "the run ended before it could be interrupted"
        job.send_signal(signal.SIGINT)
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode != 0, out + err
    assert "to resume, run the same command again" in err, err
    have = {h: set(_copies(nodes, h)) for h in HOSTS}
    for h, names in have.items():  # whatever is there under its final name is whole
        assert all(_copies(nodes, h)[n] == want[n] for n in names), h
    on_all = set.intersection(*have.values())
    assert 0 < len(on_all) < len(want), f"{len(on_all)} of {len(want)} complete on every node"
    r = nodes.stager(*slow[:2], "--no-progress", "--json", str(rep))
    assert r.returncode == 0, r.stderr
    data = _report(rep)
    assert data["files_skipped"] == len(on_all), (data["files_skipped"], len(on_all))
    assert data["files_transferred"] == len(want) - len(on_all)
    missing = sum(len(want[n]) for h in HOSTS for n in set(want) - have[h])
    assert data["bytes_written"] == missing, (data["bytes_written"], missing)
    for h in HOSTS:
        assert _copies(nodes, h) == want, h
    r = nodes.stager("clean", str(spec))
    assert r.returncode == 0, r.stderr


FLOW = '''
import hashlib, json, os, socket
from stager import where
from workflows import app, this_node
from workflows.runtime import active_runtime

@app
def read_local(source, spec, nodes):
    path = where(spec, nodes).local(source, this_node(), hard=True)
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return {"source": source, "path": path, "host": socket.gethostname(),
            "node": this_node(), "sha": digest}

def main(args):
    spec, nodes = args.stage_spec, list(args.stage_report.nodes)
    w = where(spec, nodes)
    sources = sorted(args.argv)
    futures = [read_local.on(w.node(s), hard=True)(s, spec, nodes) for s in sources]
    rt = active_runtime()
    roles = rt.executor.roles
    out = {"tasks": [f.result() for f in futures], "placed": rt.placed,
           "placed_here": rt.placed_here, "mode": roles.mode, "servers": list(roles.servers),
           "server_of": list(roles.server_of), "names": list(roles.names)}
    with open(os.path.join(args.out, "locality.json"), "w") as fh:
        json.dump(out, fh)
    return len(out["tasks"])
'''


def test_scatter_and_a_workflow_with_per_node_task_servers(tmp_path):
    hosts = ["nodeA", "nodeB"]
    nodes = OSNodes.create(tmp_path, hosts, ranks_per_node=2)
    src = tmp_path / "src"
    src.mkdir()
    rng = __import__("random").Random(17)
    for i in range(8):
        (src / f"s{i}.bin").write_bytes(rng.randbytes((i + 1) * 20_000))
    spec = tmp_path / "sc.hook"
    spec.write_text(f"scatter to {nodes.local}/data files {{\n  {src}/*.bin\n}}\n")
    flow = tmp_path / "where_flow.py"
    flow.write_text(FLOW)
    out = tmp_path / "out"
    out.mkdir()
    sources = sorted(str(p) for p in src.glob("*.bin"))
    r = nodes.run([sys.executable, "-m", "workflows", "run", str(flow), "--executor", "mpi",
                   "--dispatch", "nodes", "--stage", str(spec), "--out", str(out), "--",
                   *sources], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr

    # scatter: each file on exactly one node, the one stager.where names (no %n needed)
    from stager import where

    w = where(str(spec), hosts)
    held = {h: set(_copies(nodes, h)) for h in hosts}
    assert held["nodeA"].isdisjoint(held["nodeB"]) and held["nodeA"] and held["nodeB"], held
    for s in sources:
        name = os.path.basename(s)
        assert name in held[w.node(s)], (name, w.node(s), held)
        assert _copies(nodes, w.node(s))[name] == Path(s).read_bytes()

    # the workflow: a task server on nodeB (its lowest rank, 2) serves nodeB's worker;
    # every task ran on the host holding its file and read that node's copy
    res = json.loads((out / "locality.json").read_text())
    assert res["mode"] == "nodes" and res["names"] == hosts, res
    assert res["servers"] == [0, 2] and res["server_of"] == [0, 0, 2, 2], res   # a server: itself
    assert res["placed"] == res["placed_here"] == len(sources), res
    for t in res["tasks"]:
        assert t["host"] == t["node"] == w.node(t["source"]), t
        assert t["path"] == f"{nodes.local}/data/{os.path.basename(t['source'])}", t
        assert t["sha"] == hashlib.sha256(Path(t["source"]).read_bytes()).hexdigest(), t

    r = nodes.stager("clean", str(spec))
    assert r.returncode == 0, r.stderr
    for h in hosts:
        assert [p for p in nodes.node_dir(h).rglob("*") if p.is_file()] == [], h
