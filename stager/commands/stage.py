"""``stager stage SPEC [options]``: stage a spec's files to every node (run under mpirun/srun).

Every rank runs the command. Exit 0 on success, 1 on a staging failure (one
line on stderr from rank 0, the same error on every rank, saying how many copies
are complete and recorded), 2 on a spec error, a bad option or a destination that
overlaps a source, 130/143 when interrupted by SIGINT/SIGTERM (one line from rank
0: what was interrupted, how much is complete, the command that resumes). Rank 0
prints the one-line summary (and a progress bar while staging when stderr is a
terminal).
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
from typing import Any, Callable, List

import stager
from hooks import SpecError
from core.errors import Interrupted, JobError, MpistageError
from stager.errors import PlanError
from core.job import add_node_id_arguments, job_of


def _wait_value(text: str) -> str:
    """``--wait``'s value: seconds or ``forever`` (a spec path after a bare ``--wait`` is
    refused here rather than taken for a number)."""
    from core.options import parse_seconds

    try:
        parse_seconds(text, "--wait")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (write SPEC before --wait, or give SECONDS)") \
            from None
    return text


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    """The node arguments and ``--wait`` (shared with verify and clean)."""
    add_node_id_arguments(p)
    p.add_argument("--wait", nargs="?", const="forever", default=None, metavar="SECONDS",
                   type=_wait_value,
                   help="if another stager run is using a destination, wait for it (for at "
                        "most SECONDS, default: as long as it takes) instead of failing at "
                        "once, naming it")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from stager.staging.transfer import METHODS

    p.add_argument("spec", metavar="SPEC", help="hook spec file")
    p.add_argument("--method", choices=METHODS.names(), default=None,
                   help="transfer method (default: stripe, or $STAGER_METHOD)")
    p.add_argument("--chunk-size", metavar="BYTES", default=None,
                   help="bytes per collective round, e.g. 33554432 or 32M (default 32M)")
    p.add_argument("--small-file-threshold", metavar="BYTES", default=None,
                   help="files below this size travel in batches (default 1M)")
    add_node_arguments(p)
    p.add_argument("--json", metavar="FILE", default=None, help="write the report as JSON")
    p.add_argument("--force", action="store_true", default=None,
                   help="re-stage files already staged and unchanged")
    p.add_argument("--verify-source", action="store_true", default=None,
                   help="after staging, read every source again and compare its checksum with "
                        "the copies (one more read of the data; for users who need certainty)")
    p.add_argument("--fsync", action="store_true", default=None,
                   help="flush every copy and record line to the device (survives a node crash "
                        "or power loss, not only a killed job)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar")


#: the line of an interrupt was said (by the command or by its emergency path: once)
_SAID: List[int] = []
#: what an interrupted command keeps (its records say which part is done)
_KEPT = {
    "stage": "every complete copy is kept and recorded",
    "verify": "verify changes nothing",
    "clean": "what was removed is gone with its records; the rest is still staged and recorded",
    "drain": "every file drained so far is whole in the destination and in the drain's "
             "journal; the rest is still on the nodes",
}


def run_collective(name: str, body: Callable[[Any], int]) -> int:
    """Run ``body(comm)`` and map errors to exit codes, printing on rank 0 only."""
    from mpi4py import MPI

    from core import interrupt

    comm = MPI.COMM_WORLD

    def emergency(signum: int) -> None:    # the ranks did not stop together in the grace
        if comm.rank == 0 and not _SAID:
            _SAID.append(signum)
            print(f"stager {name}: interrupted by {interrupt.signal_name(signum)}: "
                  f"{_KEPT.get(name, _KEPT['stage'])}; to resume, "
                  f"{resume_command(sys.argv[1:])}", file=sys.stderr, flush=True)

    try:
        with interrupt.Handling(emergency=emergency):
            return body(comm)
    except Interrupted as e:
        return _interrupted(name, comm, e)
    except (SpecError, MpistageError, ValueError, TypeError) as e:
        if comm.rank == 0:
            print(e.render() if isinstance(e, SpecError) else f"stager {name}: {e}",
                  file=sys.stderr)
        # bad input: 2; any other of the stager's, the job's, an untrusted local path: 1
        return 2 if isinstance(e, (SpecError, PlanError, JobError, ValueError, TypeError)) else 1


def resume_command(argv: List[str]) -> str:
    """How to resume an interrupted run of ``stager ARGV``: run it again. Pure.

    Never with ``--force``: a resumed run skips every copy already complete, which
    ``--force`` would stage all over again."""
    cmd = " ".join(["stager"] + [shlex.quote(a) for a in argv if a != "--force"])
    if "--force" in argv:
        return f"run it again without --force (which would stage everything again): {cmd}"
    return f"run the same command again: {cmd}"


def _interrupted(name: str, comm: Any, e: Interrupted) -> int:
    """One line on rank 0 (what, how much is done, how to resume); exit 128 + signal."""
    from core import interrupt

    signum = interrupt.pending() or e.signum or signal.SIGTERM
    if comm.rank == 0 and not _SAID:
        _SAID.append(signum)
        note = getattr(e, "progress_note", None) or (
            "nothing was transferred yet" if name == "stage" else _KEPT.get(name, ""))
        print(f"stager {name}: interrupted by {interrupt.signal_name(signum)}: {note}; to "
              f"resume, {resume_command(sys.argv[1:])}", file=sys.stderr, flush=True)
    return 128 + int(signum)


def run(args: argparse.Namespace) -> int:
    def body(comm: Any) -> int:
        report = stager.stage(args.spec, job_of(args, comm), method=args.method,
                       chunk_size=args.chunk_size, small_file_threshold=args.small_file_threshold,
                       json=args.json, force=args.force, progress=args.progress,
                       wait=args.wait, verify_source=args.verify_source, fsync=args.fsync)
        if comm.rank == 0:
            print(report.summary())
        return 0

    return run_collective("stage", body)
