"""Detector simulators: P producers x S sectors over the native protocol, and Stream V2.

What a test or a rehearsal needs from a detector, with the faults it needs to see:
frames from a numpy stack, an HDF5 dataset or a synthetic 4D-STEM generator;
P producers that each send some sectors of every frame (sector s of frame f goes
from producer ``(f * S + s) mod P``, so P = S is the NCEM layout: one producer per
sector); a chosen rate; frames withheld, sectors dropped, ``end`` messages
omitted and malformed messages injected on request. The same frames can be
served by :class:`streams.protocols.stream2.simulator.StreamV2Simulator`, which
binds a PUSH socket as a DECTRIS detector does; ``--protocol NAME`` hands over to the
``simulator`` module of that protocol's folder (``dectris-legacy``: the legacy stream or
a dump for LiberTEM-live; ``merlin``: a Merlin's data port or a MIB file).

``python -m streams.simulate --help`` runs either from the shell.
"""
from __future__ import annotations

import argparse
import importlib
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import numpy as np

from streams.errors import StreamError
from streams.protocol import Reason, ScanGeometry
from streams.protocols import ROWS
from streams.protocols.native.headers import encode_data
from streams.protocols.frames import array_source, hdf5_source, synthetic_frame
from streams.protocols.native.producer import Producer
from streams.protocols.native.rendezvous import Rendezvous, wait_for_rendezvous
from streams.protocols.stream2.simulator import StreamV2Simulator

__all__ = ["SimulatedScan", "synthetic_frame", "run_producer", "run_producers",
           "malformed_messages", "array_source", "hdf5_source", "main"]


@dataclass(frozen=True)
class SimulatedScan:
    """One scan to stream, and the faults to inject.

    ``source(f)`` gives frame f (default :func:`synthetic_frame`); ``encoding`` is
    ``raw``, ``lz4`` or ``bslz4``; ``rate`` frames per second over the scan (None: as
    fast as taken); ``withhold`` frames no producer sends, ``drop`` (frame, sector)
    pairs not sent, ``no_end`` producers that never send ``end``; ``inject`` names of
    :func:`malformed_messages` producer 0 sends receiver 0 after its ``begin``.
    """

    geometry: ScanGeometry
    source: Optional[Callable[[int], np.ndarray]] = None
    encoding: str = "raw"
    rate: Optional[float] = None
    withhold: FrozenSet[int] = frozenset()
    drop: FrozenSet[Tuple[int, int]] = frozenset()
    no_end: FrozenSet[int] = frozenset()
    inject: Tuple[str, ...] = ()
    seed: int = 0

    def producer_of(self, frame: int, sector: int) -> int:
        return (frame * self.geometry.sectors + sector) % self.geometry.producers

    def frame(self, index: int) -> np.ndarray:
        g = self.geometry
        if self.source is not None:
            return np.asarray(self.source(index), dtype=np.dtype(g.dtype))
        return synthetic_frame(index, g.shape, g.scan_shape, g.dtype, self.seed)

    def sent_by(self, producer: int) -> List[Tuple[int, int]]:
        """The (frame, sector) pairs ``producer`` sends, in sending order."""
        S = self.geometry.sectors
        return [(f, s) for f in range(self.geometry.frames) for s in range(S)
                if self.producer_of(f, s) == producer and f not in self.withhold
                and (f, s) not in self.drop]


def malformed_messages(scan: str, geometry: ScanGeometry
                       ) -> Dict[str, Tuple[List[bytes], str, bool]]:
    """Broken messages by name -> (frames, the reason a receiver must give, counted), all
    aimed at receiver 0's frame 0; ``counted``: the producer counts it in ``sent``."""
    import msgpack

    r0, r1 = geometry.sector_rows(0)
    good = (r1 - r0) * geometry.shape[1] * geometry.itemsize
    hdr = encode_data(scan, 0, 0, (r0, r1))
    return {
        "not_msgpack": ([b"\xc1 this is not msgpack", b""], Reason.MALFORMED.value, False),
        "not_a_map": ([msgpack.packb([1, 2, 3]), b""], Reason.MALFORMED.value, False),
        "missing_field": ([msgpack.packb({"kind": "data", "scan": scan, "frame": 0,
                                          "rows": [r0, r1], "encoding": "raw"}), b"\0" * good],
                          Reason.MALFORMED.value, True),
        "one_frame": ([hdr], Reason.MALFORMED.value, False),
        "wrong_payload_size": ([hdr, b"\0" * (good + 1)], Reason.PAYLOAD_SIZE.value, True),
        "unknown_encoding": ([msgpack.packb({"kind": "data", "scan": scan, "frame": 0,
                                             "sector": 0, "rows": [r0, r1],
                                             "encoding": "zstd"}), b"\0" * good],
                             Reason.ENCODING.value, True),
        "unknown_scan": ([encode_data("no-such-scan", 0, 0, (r0, r1)), b"\0" * good],
                         Reason.UNKNOWN_SCAN.value, False),
        "corrupt_lz4": ([encode_data(scan, 0, 0, (r0, r1), "lz4"),
                         good.to_bytes(8, "big") + good.to_bytes(4, "big") + b"\0\0\0\x09junk!"],
                        Reason.CORRUPT.value, True),
    }


def run_producer(scan: SimulatedScan, endpoints: Union[Rendezvous, Sequence[str]], producer: int,
                 t0: Optional[float] = None, **options: Any) -> Dict[str, Any]:
    """Be producer ``producer`` of ``scan``: begin, its sectors in frame order, end.

    ``endpoints``: a Rendezvous (CURVE with its keys) or plain endpoints; ``options``
    go to :class:`~streams.protocols.native.producer.Producer`. Returns messages per
    receiver, seconds, and seconds blocked in sends.
    """
    g = scan.geometry
    t0 = time.perf_counter() if t0 is None else t0
    with Producer(endpoints, producer, **options) as p:
        p.begin(g)
        if producer == 0 and scan.inject:
            bad = malformed_messages(g.scan, g)
            for name in scan.inject:
                parts, _, counted = bad[name]
                p.send_parts(0, list(parts))
                p.sent[g.scan][0] += counted
        cached: Tuple[int, Optional[np.ndarray]] = (-1, None)
        for f, s in scan.sent_by(producer):
            if scan.rate:
                delay = t0 + f / scan.rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            if cached[0] != f:
                cached = (f, scan.frame(f))
            p.send_sector(g.scan, f, s, cached[1], scan.encoding)  # type: ignore[arg-type]
        if producer not in scan.no_end:
            p.end(g.scan)
        sent = list(p.sent[g.scan])
        blocked = p.blocked_s
    return {"producer": producer, "sent": sent, "seconds": time.perf_counter() - t0,
            "blocked_s": blocked}


def run_producers(scan: SimulatedScan, endpoints: Union[Rendezvous, Sequence[str]],
                  wait: bool = True,
                  **options: Any) -> Any:
    """Run every producer of ``scan`` in its own thread: their results (``wait``), or the
    threads, a result list that fills and the errors."""
    results: List[Any] = [None] * scan.geometry.producers
    errors: List[BaseException] = []
    t0 = time.perf_counter()

    def one(p: int) -> None:
        try:
            results[p] = run_producer(scan, endpoints, p, t0=t0, **options)
        except BaseException as e:   # noqa: B036 -- carried to the caller
            errors.append(e)

    threads = [threading.Thread(target=one, args=(p,), daemon=True,
                                name=f"producer-{p}") for p in range(scan.geometry.producers)]
    for t in threads:
        t.start()
    if not wait:
        return threads, results, errors
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def default_scan_name() -> str:
    """``sim-YYYYMMDD-HHMMSS-xxxxxx``: a new name at every run (a receiving job refuses a
    ``begin`` for a name it has already served, so runs into one job need their own)."""
    return f"sim-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m streams.simulate``: stream a synthetic or recorded scan (Ctrl-C: one
    line, exit 130)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("python -m streams.simulate: interrupted by SIGINT; what was sent is the "
              "job's (its report counts the rest missing)", file=sys.stderr, flush=True)
        return 130


def _main(argv: Optional[Sequence[str]] = None) -> int:
    # --protocol NAME: a protocol folder's own simulator (its simulator.main) takes over
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--protocol")
    known, rest = pre.parse_known_args(argv)
    if known.protocol not in (None, "native", "stream2"):
        return _protocol_simulator(known.protocol)(rest)
    ap = argparse.ArgumentParser(prog="python -m streams.simulate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", help="native (default), stream2 (as --stream2-bind), or a "
                    "protocol of streams.protocols with a simulator (" +
                    ", ".join(n for n in ROWS if n not in ("native", "stream2")) +
                    "; --protocol NAME --help for its options)")
    ap.add_argument("--rendezvous", help="native protocol: the receivers' rendezvous file")
    ap.add_argument("--stream2-bind", help="Stream V2 instead: bind this PUSH address")
    ap.add_argument("--scan", default=None, help="scan name (default: sim-DATE-TIME-RANDOM, "
                    "new at every run)")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--sectors", type=int, default=4)
    ap.add_argument("--scan-shape", type=int, nargs=2, default=(16, 16), metavar=("NY", "NX"))
    ap.add_argument("--shape", type=int, nargs=2, default=(128, 128), metavar=("ROWS", "COLS"))
    ap.add_argument("--dtype", default="<u2")
    ap.add_argument("--encoding", default="raw", choices=("raw", "lz4", "bslz4"))
    ap.add_argument("--rate", type=float, help="frames per second (default: as fast as taken)")
    ap.add_argument("--hdf5", metavar="FILE:DATASET", help="replay frames from this dataset")
    ap.add_argument("--withhold", type=int, nargs="*", default=(), metavar="FRAME")
    ap.add_argument("--drop", nargs="*", default=(), metavar="FRAME:SECTOR")
    ap.add_argument("--wait", type=float, default=None, metavar="S",
                    help="seconds to wait for the rendezvous file to appear, or for a new "
                         "job's when it names a job that has ended (default: 600 for a "
                         "missing file; an ended job's file is an error)")
    ap.add_argument("--certificate", metavar="FILE", help="CURVE client certificate "
                    "(.key_secret; default: the one the rendezvous file names)")
    ap.add_argument("--trust-owner", metavar="USER", action="append",
                    help="also trust a rendezvous file of USER (default: only your own)")
    ap.add_argument("--insecure", action="store_true",
                    help="send in plain text to a job run --insecure (without it, a "
                         "rendezvous naming no CURVE key is refused)")
    a = ap.parse_args(argv)
    source = None
    if a.hdf5:
        path, _, dset = a.hdf5.rpartition(":")
        source = hdf5_source(path, dset)
    ny, nx = a.scan_shape
    if a.stream2_bind:
        with StreamV2Simulator(a.stream2_bind) as sim:
            print(f"Stream V2 on {sim.endpoint}", flush=True)
            gen = source or (lambda i: synthetic_frame(i, tuple(a.shape), (ny, nx), "<u2"))
            sim.send_series(1, gen, ny * nx, tuple(a.shape), rate=a.rate,
                            compression=None if a.encoding == "raw" else a.encoding,
                            scan_shape=(ny, nx), withhold=frozenset(a.withhold))
        return 0
    if not a.rendezvous:
        ap.error("give --rendezvous FILE (native) or --stream2-bind ADDRESS")
    a.scan = a.scan or default_scan_name()
    print(f"scan {a.scan}", flush=True)
    g = ScanGeometry(a.scan, a.producers, ny * nx, a.sectors, tuple(a.shape), a.dtype, (ny, nx))
    drop = frozenset(tuple(int(v) for v in d.split(":")) for d in a.drop)
    scan = SimulatedScan(g, source, a.encoding, a.rate, frozenset(a.withhold),
                         drop)  # type: ignore[arg-type]
    try:
        rv = wait_for_rendezvous(a.rendezvous, timeout=600.0 if a.wait is None else a.wait,
                                 trust_owner=a.trust_owner, wait_ended=a.wait is not None)
        results = run_producers(scan, rv, certificate=a.certificate, insecure=a.insecure)
    except (StreamError, ValueError) as e:
        print(f"python -m streams.simulate: {e}", file=sys.stderr, flush=True)
        return 1
    for r in results:
        print(f"producer {r['producer']}: sent {r['sent']} in {r['seconds']:.2f} s "
              f"({r['blocked_s']:.2f} s in sends)", flush=True)
    return 0


def _protocol_simulator(name: str) -> Callable[[Sequence[str]], int]:
    """The ``main`` of the ``simulator`` module beside protocol ``name``'s row."""
    row = ROWS.get(name)
    if not isinstance(row, str):
        raise SystemExit(f"--protocol {name}: no simulator (protocols: {', '.join(ROWS)})")
    package = row.split(":")[0]
    try:
        return importlib.import_module(package + ".simulator").main  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        raise SystemExit(f"--protocol {name}: {package} has no simulator") from None


if __name__ == "__main__":
    raise SystemExit(main())
