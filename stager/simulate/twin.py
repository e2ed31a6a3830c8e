"""The SimGrid twin: a :class:`~stager.simulate.replay.Scenario` run as SimGrid actors.

One actor per simulated group of nodes (``Scenario.groups``; each stands for
``Scenario.k`` nodes, see :mod:`stager.simulate.replay`) on a platform built from a
:class:`~stager.simulate.platform.Platform`:

* a group is a host of ``k`` cores' speed (1 flop = 1 ns of one core: the leader is one
  rank), a disk (``k`` x the node-local write rate), a full-duplex NIC (``k`` x the node's
  injection) and a PFS client link (``k`` x a node's PFS rate); with ``shared_host``
  (emulated nodes of one machine) every group is the one machine, its cores, its disk and
  its memory bus;
* the network between groups is one shared link of the topology's all-to-all capacity
  (:meth:`Platform.fabric_bw`: a torus' bisection, a dragonfly's taper);
* the PFS: per server a *disk* link (reads of data not yet read) and a *net* link, behind
  one storage link of the file system's peak, files striped round-robin in ``stripe``
  units; with I/O forwarding (Blue Gene/Q), reads cross the group's share of I/O nodes'
  links (and cache, ``ion_cache``); two-phase aggregators send through their own links;
  the metadata service: ``meta_ops`` operations/s shared, each waiting ``meta_latency``.

Every number of a group's activity is the sum over its nodes and every rate of a
node's resource is ``k`` x the node's, so a group's time is a node's time, while shared
resources (PFS servers, metadata, the fabric) see the whole job's load. The flow model
is SimGrid's CM02 (max-min fair sharing, no TCP factors: the platforms' figures are the
achieved rates). An actor follows the stager's own loop (``stager.staging.transfer``'s
engine: ``post(k); read(k+1); write(k-1); wait(k)`` and the status collective after each
round, every leader waiting for all).

SimGrid allows one engine per process: :func:`run_scenario` is called once in a fresh
process (:func:`stager.simulate.predict.simulate` starts them).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

from stager.simulate.platform import Platform
from stager.simulate.replay import FSYNCS, LOCAL_OPS, OPEN_OPS, Group, Round, Scenario

__all__ = ["run_scenario", "PHASES"]

#: Flops of one CPU-second of one core (so a host's speed is cores x FLOP).
FLOP = 1e9
#: Phases of a stage, in order (``stager.staging.pipeline``'s).
PHASES = ("plan", "lock and resume", "capacity", "prepare", "transfer", "record")


def _stripes(file: int, offset: int, length: int, stripe: int, servers: int
             ) -> List[Tuple[int, int, int]]:
    """``(server, unit, bytes)`` of a file range striped round-robin over ``servers``
    from a server that depends on the file (as GPFS and Lustre place a file's first
    block)."""
    out = []
    pos, end = offset, offset + length
    while pos < end:
        unit = pos // stripe
        nxt = min(end, (unit + 1) * stripe)
        out.append(((file * 7 + unit) % servers, unit, nxt - pos))
        pos = nxt
    return out


def run_scenario(sc: Scenario, pf: Platform) -> Dict[str, Any]:
    """Simulate ``sc`` on ``pf`` in this process (once per process: SimGrid's rule).

    Returns the predicted times (``phases``: seconds of each phase, ``transfer`` being
    what ``stager stage`` reports as its time), the bytes and metadata operations the
    simulated actors made, and group 0's busy time per activity of the transfer.
    """
    import simgrid as sg

    engine = sg.Engine(["twin", "--log=root.thres:critical", "--cfg=network/model:CM02",
                        "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0"])
    n, G, k = sc.nodes, sc.groups, sc.k
    nd, pfs = pf.nodes, pf.pfs
    zone = sg.NetZone.create_full_zone("twin")
    UP, DOWN = sg.LinkInRoute.Direction.UP, sg.LinkInRoute.Direction.DOWN

    def link(name: str, bw: float, lat: float = 0.0) -> Any:
        lk = zone.create_link(name, max(bw, 1.0))
        lk.set_latency(lat)
        return lk.seal()

    # the metadata service as a link of meta_ops "bytes"/s, one byte an operation: the same
    # fair sharing as a processor (an Exec moved to a remote host deadlocks SimGrid
    # 3.32's Python bindings when two actors do it at once)
    mds = zone.create_host("mds", FLOP).seal()
    mds_link = link("mds", pfs.meta_ops)
    fabric = link("fabric", pf.fabric_bw(n), nd.latency)
    storage = link("storage", pfs.servers * pfs.server_bw)
    ion_hosts: List[Any] = []
    nics: List[Any] = []
    senders: List[Any] = []
    ions: List[List[Any]] = [[] for _ in range(G)]
    if nd.shared_host:
        machine = zone.create_host("machine", FLOP)
        machine.core_count = nd.cores
        machine.seal()
        disk = machine.create_disk("local", 1e15, nd.local_write_bw).seal()
        hosts, disks = [machine] * G, [disk] * G
        zone.add_route(machine.netpoint, machine.netpoint, None, None,
                       [sg.LinkInRoute(fabric)], False)
        clients = [link("client", pfs.client_bw)] * G
    else:
        bridges: List[Any] = []
        hosts = [zone.create_host(f"g{g}", k * FLOP).seal() for g in range(G)]
        disks = [h.create_disk("local", 1e15, k * nd.local_write_bw).seal() for h in hosts]
        for g in range(G):
            nic = zone.create_split_duplex_link(f"g{g}.nic", k * pf.injection_bw())
            nic.set_latency(nd.latency / 2)
            nics.append(nic.seal())
        clients = [link(f"g{g}.client", k * pfs.client_bw) for g in range(G)]
        senders = [link(f"g{g}.senders", k * pf.injection_bw()) for g in range(G)]
        fwd = pf.io_forwarding
        if fwd is not None:
            share = max(1.0, n / fwd.nodes_per_ion) / G  # the job's I/O nodes, per group
            for g in range(G):
                bridge = zone.create_split_duplex_link(f"g{g}.bridge", share * fwd.ion_link_bw)
                bridges.append(bridge.seal())
                ions[g] = [sg.LinkInRoute(link(f"g{g}.ion", share * fwd.ion_storage_bw)),
                           sg.LinkInRoute(bridge, DOWN)]
                if fwd.ion_cache:
                    # the I/O node is the GPFS client: a block its nodes ask for at once is
                    # read from the servers once, then sent to each from its page pool
                    ion = zone.create_host(f"g{g}.ionnode", FLOP).seal()
                    ion_hosts.append(ion)
                    zone.add_route(ion.netpoint, hosts[g].netpoint, None, None,
                                   [sg.LinkInRoute(bridge, DOWN), sg.LinkInRoute(clients[g]),
                                    sg.LinkInRoute(nics[g], DOWN)], False)
        for g in range(G):
            for h in range(G):
                mid = [sg.LinkInRoute(fabric)] if g != h else []
                zone.add_route(hosts[g].netpoint, hosts[h].netpoint, None, None,
                               [sg.LinkInRoute(nics[g], UP), sg.LinkInRoute(senders[g])] + mid
                               + [sg.LinkInRoute(nics[h], DOWN)], False)
    servers = []
    for s in range(pfs.servers):
        d = link(f"s{s}.disk", pfs.cold_bw)
        net = link(f"s{s}.net", pfs.server_bw)
        cold = zone.create_host(f"s{s}.cold", FLOP).seal()
        warm = zone.create_host(f"s{s}.warm", FLOP).seal()
        servers.append((cold, warm))
        for g in range(G if not nd.shared_host else 1):
            tail = [sg.LinkInRoute(storage)] + ions[g] + [sg.LinkInRoute(clients[g])]
            if nics:
                tail.append(sg.LinkInRoute(nics[g], DOWN))
            if s == 0:
                zone.add_route(hosts[g].netpoint, mds.netpoint, None, None,
                               [sg.LinkInRoute(mds_link)], False)
            for src, head in ((cold, [d, net]), (warm, [net])):
                zone.add_route(src.netpoint, hosts[g].netpoint, None, None,
                               [sg.LinkInRoute(x) for x in head] + tail, False)
    zone.seal()

    barrier = sg.Barrier(G)
    tree = max(1, math.ceil(math.log2(n))) if n > 1 else 0
    seen: set = set()  # stripe units some node has read (cached at the server since)
    tally = {"pfs_bytes": 0, "pfs_meta_ops": 0, "written": 0, "sent": 0}
    busy: Dict[str, float] = {a: 0.0 for a in ("metadata", "read", "checksum", "exchange",
                                                "write", "commit", "wait")}
    marks: Dict[str, float] = {}

    def coll(steps: int, nbytes: float = 0.0) -> None:
        """The latency of a tree collective of ``steps`` steps (and its bytes)."""
        t = steps * (nd.latency + 2 * nd.message_cpu) + nbytes / pf.injection_bw()
        if t > 0:
            sg.this_actor.sleep_for(t)

    def cpu(seconds: float) -> None:  # CPU seconds summed over the group's nodes
        if seconds > 0:
            sg.this_actor.execute(seconds * FLOP)

    def timed(g: int, what: str, fn: Any, *args: Any) -> None:
        t = sg.Engine.clock
        fn(*args)
        if g == 0:
            busy[what] += sg.Engine.clock - t

    def local_ops(count: float, fsyncs: float = 0.0) -> None:
        cpu(count * nd.local_meta)
        if fsyncs > 0 and sc.fsync:
            sg.this_actor.sleep_for(fsyncs * nd.local_fsync)

    def metadata(ops: int) -> None:
        if ops <= 0:
            return
        tally["pfs_meta_ops"] += ops
        service = sg.Comm.sendto_async(hosts[g], mds, ops)
        # each node waits its own round trips, one after another, its share of the service
        sg.this_actor.sleep_for(pfs.meta_latency * ops / max(k, 1))
        service.wait()

    def pfs_read(g: int, gr: Group) -> None:
        per: Dict[Tuple[int, bool], float] = {}
        ions = max(1, k // (pf.group_nodes() or k)) if ion_hosts else 0
        cached = 0  # bytes the group's I/O nodes send again from their page pool
        for f, off, length, copies in gr.reads:
            once = min(copies, ions) if ions else copies
            tally["pfs_bytes"] += length * once
            cached += length * (copies - once)
            for s, unit, nb in _stripes(f, off, length, pfs.stripe, pfs.servers):
                cold = not pfs.warm and (f, unit) not in seen
                seen.add((f, unit))
                per[(s, cold)] = per.get((s, cold), 0) + nb * once
        comms = [sg.Comm.sendto_async(servers[s][0 if cold else 1], hosts[g], int(nb))
                 for (s, cold), nb in per.items() if nb > 0]
        if cached:
            comms.append(sg.Comm.sendto_async(ion_hosts[g], hosts[g], int(cached)))
        if comms:
            sg.Comm.wait_all(comms)

    def read(g: int, r: Round) -> None:
        gr = r.groups.get(g)
        if gr is None:
            return
        timed(g, "metadata", metadata, gr.opens * OPEN_OPS)
        timed(g, "read", pfs_read, g, gr)
        timed(g, "checksum", cpu, gr.hash_read / nd.hash_bw)

    def post(g: int, r: Round) -> List[Any]:
        gr = r.groups.get(g)
        if gr is None:
            return []
        acts: List[Any] = []
        if senders:  # a few nodes send it all (aggregators): their own links only
            senders[g].set_bandwidth((gr.senders or k) * pf.injection_bw())
        for h, nb in gr.sends.items():
            tally["sent"] += nb
            if not nd.shared_host:
                acts.append(sg.Comm.sendto_async(hosts[g], hosts[h], int(nb)))
        if nd.shared_host and gr.sends:
            # one host: the exchange is a memcpy through the shared window, CPU work
            acts.append(sg.this_actor.exec_async(sum(gr.sends.values()) / nd.copy_bw * FLOP))
        if gr.messages and nd.message_cpu > 0:
            acts.append(sg.this_actor.exec_async(gr.messages * nd.message_cpu * FLOP))
        return acts

    def write(g: int, r: Round) -> None:
        gr = r.groups.get(g)
        if gr is None:
            return
        timed(g, "checksum", cpu, gr.hash_write / nd.hash_bw)
        if gr.write:
            tally["written"] += gr.write
            if nd.shared_host:
                # tmpfs: the writer's CPU copies the bytes into page-cache pages
                timed(g, "write", cpu, gr.write / nd.local_write_bw)
            else:
                timed(g, "write", disks[g].write, int(gr.write))
        timed(g, "commit", local_ops, gr.commits * LOCAL_OPS["copy"],
              gr.commits / max(k, 1) * FSYNCS["copy"])

    def wait(acts: List[Any]) -> None:
        for a in acts:
            a.wait()

    def phase(g: int, name: str, body: Any, steps: int = 0, nbytes: float = 0.0) -> None:
        body()
        coll(steps, nbytes)
        barrier.wait()
        if g == 0:
            marks[name] = sg.Engine.clock

    def actor(g: int) -> None:
        def plan() -> None:
            if g == 0:
                # rank 0 alone, one operation after another
                tally["pfs_meta_ops"] += sc.plan_ops
                sg.Comm.sendto(hosts[0], mds, sc.plan_ops)
                sg.this_actor.sleep_for(pfs.meta_latency * sc.plan_ops)
            # options, run id and plan: three broadcasts from rank 0 (binomial trees)
            coll(3 * tree, tree * sc.plan_bytes)

        phase(g, "plan", plan)
        phase(g, "lock and resume", lambda: local_ops(k * sc.roots * LOCAL_OPS["root"]),
              2 * tree)
        phase(g, "capacity", lambda: local_ops(k * sc.roots), 2 * tree)
        phase(g, "prepare", lambda: local_ops(k * sc.dirs * LOCAL_OPS["dir"]), 2 * tree)

        def transfer() -> None:
            rounds = sc.collective
            if rounds and sc.method != "readall":
                read(g, rounds[0])
                for i, r in enumerate(rounds):
                    acts = post(g, r)
                    if i + 1 < len(rounds):
                        read(g, rounds[i + 1])
                    if i >= 1:
                        write(g, rounds[i - 1])
                    timed(g, "exchange", wait, acts)
                    timed(g, "wait", barrier.wait)
                    coll(r.steps)
                write(g, rounds[-1])
            else:
                for r in rounds:  # readall: read, exchange (two-phase), hash, agree, write
                    gr = r.groups.get(g)
                    if gr is not None:
                        timed(g, "metadata", metadata, gr.opens * OPEN_OPS)
                        timed(g, "read", pfs_read, g, gr)
                        timed(g, "exchange", wait, post(g, r))
                        timed(g, "checksum", cpu, gr.hash_read / nd.hash_bw)
                    timed(g, "wait", barrier.wait)
                    coll(r.steps)
                    write(g, r)
            for r in sc.solo:  # no job-wide wait: a holder set's exchange is its own
                read(g, r)
                timed(g, "exchange", wait, post(g, r))
                write(g, r)
            # the whole-file checksums of multi-piece files, from their reference leaders
            coll(tree, n * 16.0 * min(sc.files, 1024))

        t0 = sg.Engine.clock
        phase(g, "transfer", transfer, 2 * tree)
        if g == 0:
            marks["transfer start"] = t0
        phase(g, "record", lambda: local_ops(k * sc.roots * LOCAL_OPS["record"],
                                             sc.roots * FSYNCS["record"]),
              2 * tree, n * 100.0)

    def other_job() -> None:
        sg.Actor.self().daemonize()  # ends when the stage's actors end
        while True:
            sg.this_actor.execute(1e12)

    for g in range(G):
        sg.Actor.create(f"group{g}", hosts[g], actor, g)
    if nd.shared_host:
        for i in range(int(round(nd.background))):
            sg.Actor.create(f"other{i}", hosts[0], other_job)
    engine.run()
    times, last = {}, 0.0
    for name in PHASES:
        times[name] = marks[name] - last
        last = marks[name]
    return {"phases": times, "seconds": times["transfer"],
            "total_seconds": last + nd.startup, "startup": nd.startup,
            "busy": busy, **tally}


def main() -> None:
    """``python -m stager.simulate.twin``: a pickled ``(Scenario, Platform)`` on stdin, the
    pickled result on stdout (SimGrid's own notes on stderr are dropped)."""
    import os
    import pickle
    import sys
    import time

    sc, pf = pickle.loads(sys.stdin.buffer.read())
    out = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing but the result on stdout
    t = time.perf_counter()
    res = run_scenario(sc, pf)
    res["wall_seconds"] = time.perf_counter() - t
    with os.fdopen(out, "wb") as f:
        f.write(pickle.dumps(res))


if __name__ == "__main__":
    main()
