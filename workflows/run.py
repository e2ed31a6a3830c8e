"""``python -m workflows run FLOW.py``: stage, run a workflow on an executor, report -- in one job.

Under ``mpirun`` every rank runs this module: all stage collectively (``--stage SPEC``)
and run the startup leader hook; then the flow runs on the mpi executor over the same
communicator (rank 0 runs ``main``, the others serve tasks, ``docs/DISPATCH.md``), or
with ``--executor local|inline|parsl`` on rank 0 while the others wait without
spinning; then the flow's ``finalize``, the drain of its node-local results and the
shutdown hook. Every rank exits with rank 0's status: 0 if all tasks succeeded, 1 if any
failed (with a summary naming each), 2 for bad input (also an error the flow's ``main``
raises before launching any task). Every step is collective or agreed, so a failure
anywhere ends the job on all ranks instead of hanging it.

Time limits and crashes (``--timeout``, ``--task-timeout``, ``--isolate``) are
docs/guide/workflows.md, "When things go wrong": a worker stuck past a limit in code no
interrupt reaches is given up, the summary printed and the job ended with ``MPI_Abort``.

What a flow file defines, and the ``args`` its ``main`` is given: :mod:`workflows.flow`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import stager
from core.errors import JobError, MpistageError
from core.job import Job
from core.mpi.agree import agree, agreed, bcast_result, quiet_barrier
from core.mpi.launcher import first_rank_speaks
from core.mpi.launcher import under_mpi_launcher as under_mpirun
from core.nodes import add_node_id_flags, local_node_name, node_id_of, resolve_node_id
from hooks import SpecError
from stager.errors import PlanError
from core.outputs import run_directory

from .errors import FlowError, WorkflowError
from .executors import NAMES, ROWS, make
from .flow import DRIVEN, drive, flow_namespace, load_flow
from .leader import leader_hooks_from, run_leader_hook
from .drain import drain_results
from .node import on_this_node, set_node

__all__ = ["main", "build_parser", "drain_results"]

ENV_EXECUTOR = "WORKFLOWS_EXECUTOR"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m workflows run",
        description="Stage (optional), then run a workflow file's main(args) on an executor.",
        epilog="Arguments after -- (and unknown options) go to the flow.")
    add = p.add_argument
    add("flow", help="workflow file defining main(args), or its module name (e.g. analyses.runner)")
    add("--executor", choices=NAMES,
        help=f"where tasks run (default: ${ENV_EXECUTOR}, else mpi under mpirun, else local)")
    add("--workers", type=int, help="workers for local/parsl (default: CPUs)")
    add("--parsl-config", choices=("htex-local", "threads"),
        help="Parsl configuration for --executor parsl (default htex-local)")
    add("--debug", action="store_true",
        help="inline executor: pickle every task and result round-trip")
    add("--stage", metavar="SPEC", help="hook spec file to stage collectively before the workflow")
    add_node_id_flags(p)  # --node-id HOW, or one of its older spellings
    add("--out", metavar="DIR",
        help="output directory (default: a new directory FOLDER-FLOW-out-DATE-TIME here)")
    add("--overwrite", action="store_true",
        help="results may replace existing files mpistage did not write (never an input)")
    for when, where in (("startup", "before"), ("shutdown", "after")):
        add(f"--leader-hook-{when}", metavar="HOOK",
            help=f"spec file or module:function run once per node {where} tasks "
            f"(default $STAGER_LEADER_HOOK_{when.upper()})")
    add("--timeout", type=float, metavar="SECONDS",
        help="time limit of the flow (main and every task): tasks still running then are "
        "interrupted and fail, the run ends with its summary and exit 1")
    add("--task-timeout", type=float, metavar="SECONDS",
        help="timeout of each task whose app sets none (@app(timeout=...))")
    add("--isolate", action="store_true",
        help="run every task in a forked child of its worker, so a task that kills its "
        "process fails alone (named, with the signal) instead of ending the job")
    add("--dispatch", choices=("central", "nodes"),
        help="mpi executor: one dispatcher (central) or one task server per node (nodes); "
        "default $WORKFLOWS_MPI_DISPATCH, else central")
    add("--report", metavar="JSON", help="write counts and phase times of the run as JSON (rank 0)")
    return p


def _split_argv(argv: List[str]) -> Tuple[List[str], List[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m workflows run``; returns the exit status (same on all ranks)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, flow_argv = _split_argv(argv)
    parser = build_parser()
    with first_rank_speaks(exit_quietly=True):  # under mpirun: a usage error said once
        opts, unknown = parser.parse_known_args(own)
    flow_argv = unknown + flow_argv
    # Everything up to here, and loading the flow, is identical on every rank.
    name = opts.executor or os.environ.get(ENV_EXECUTOR) or ("mpi" if under_mpirun() else "local")
    if name not in NAMES:
        print(
            f"error: {ENV_EXECUTOR}={name!r}: expected one of {', '.join(NAMES)}", file=sys.stderr
        )
        return 2
    hooks = leader_hooks_from(opts.leader_hook_startup, opts.leader_hook_shutdown)
    needs_mpi = name == "mpi" or opts.stage or hooks.startup or hooks.shutdown or under_mpirun()
    comm = None
    if needs_mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    rank = comm.Get_rank() if comm is not None else 0
    try:
        module = load_flow(opts.flow)
        with first_rank_speaks():
            ns = flow_namespace(module, opts.flow, flow_argv)
        out = os.path.abspath(opts.out) if opts.out else ""
        if out and "%n" not in out:  # a per-node template: made on each node, once named
            os.makedirs(out, exist_ok=True)
        if opts.stage and not os.path.isfile(opts.stage):
            raise FlowError(f"--stage {opts.stage}: no such hook spec file")
        for flag, value in (("--timeout", opts.timeout), ("--task-timeout", opts.task_timeout)):
            if value is not None and not (0 < value < float("inf")):
                raise FlowError(f"{flag} {value:g}: expected a positive number of seconds")
        local_error: Optional[BaseException] = None
    except (MpistageError, OSError) as exc:
        local_error = exc
    except SystemExit as exc:  # the flow's own argument parser: its --help, or an error
        if exc.code in (0, None):
            return 0    # the same on every rank: the flow's help was printed (once)
        local_error = FlowError(f"bad flow arguments (exit {exc.code})")
    mine = str(local_error) if local_error else None  # the first rank's error, on every rank
    bad = next((e for e in comm.allgather(mine) if e), None) if comm is not None else mine
    if not bad and not out:     # a new directory named for the run, made once (rank 0)
        flow_file = getattr(module, "__file__", None) or opts.flow
        path = os.path.splitext(os.path.abspath(flow_file))[0]
        stem = f"{os.path.basename(os.path.dirname(path))}-{os.path.basename(path)}"
        try:
            out = bcast_result(comm, run_directory, stem) if comm is not None \
                else run_directory(stem)
        except (MpistageError, OSError) as exc:
            bad = f"cannot make the results directory: {exc}; give --out DIR"
    if bad:
        if rank == 0:
            print(f"error: {bad}", file=sys.stderr)
        return 2
    ns.overwrite = bool(opts.overwrite)
    ns.out, ns.executor, ns.ranks, ns.stage_report = out, name, comm.Get_size() if comm else 1, None
    ns.stage_spec = None
    from core import interrupt

    # Ctrl-C (SIGINT; under mpirun every rank's SIGTERM, SIGKILL a second later): no
    # traceback from every process, one line from rank 0 saying what is kept, at once.
    with interrupt.Handling(grace=0.0, emergency=lambda signum: _interrupted(ns, rank, signum)):
        code = _run(opts, module, ns, name, comm, hooks)
    if code == 2 and not opts.out and rank == 0:
        try:        # a refused run leaves nothing behind: not even its empty directory
            os.rmdir(out)
        except OSError:
            pass    # not empty: something was written, keep it
    return code


def _kept(ns: argparse.Namespace) -> str:
    """What an interrupted run keeps, and how to go on."""
    kept = f"kept: {ns.out} (what the finished tasks wrote)"
    if getattr(ns, "stage_spec", None):
        kept += (f" and the staged copies on the nodes (`mpirun stager clean "
                 f"{ns.stage_spec}` removes them)")
    return kept + "; unfinished tasks are lost: run it again to redo them"


def _interrupted(ns: argparse.Namespace, rank: int, signum: int) -> None:
    """The end of a run interrupted by ``signum`` (in the watchdog thread of
    :class:`core.interrupt.Handling`, which then exits 128 + ``signum``): rank 0 says what
    was interrupted and what is kept; the local pool's workers are ended."""
    import multiprocessing

    from core.interrupt import signal_name

    if rank == 0:
        rt = DRIVEN.get("runtime")
        done = (f"{rt.succeeded} of {rt.launched} launched tasks had finished" if rt is not None
                else "no task had started")
        print(f"workflows run {os.path.basename(ns.flow)}: interrupted by "
              f"{signal_name(signum)}; {done}; {_kept(ns)}", file=sys.stderr, flush=True)
    for child in multiprocessing.active_children():  # the local executor's workers
        child.kill()


def _run(opts, module, ns, name: str, comm: Any, hooks) -> int:
    rank = comm.Get_rank() if comm is not None else 0
    times: Dict[str, float] = {}
    t_start = time.perf_counter()
    status: Dict[str, Any] = {"ok": False, "error": None}
    job: Optional[Job] = None
    try:
        # The node layout, once for the whole run: staging, the node name every task
        # sees (%n: the directory the stager wrote), leader hooks, the executor, drain.
        if comm is None:
            set_node(local_node_name(resolve_node_id(None, node_id_of(opts))))
        else:
            job = Job.from_comm(comm, node_id_of(opts))
            set_node(job.name)
        if "%n" in ns.out:
            # Each node's own results directory (the flow resolves the template where it
            # writes, with workflows.on_this_node), so drain finds one per node.
            if comm is None:
                os.makedirs(on_this_node(ns.out), exist_ok=True)
            else:
                with agreed(comm, "--out"):
                    os.makedirs(on_this_node(ns.out), exist_ok=True)
        if opts.stage:
            t = time.perf_counter()
            # The spec is read and planned on rank 0 only, inside stage().
            ns.stage_report = stager.stage(opts.stage, job)
            ns.stage_spec = opts.stage
            times["stage"] = time.perf_counter() - t
            if rank == 0:
                print(ns.stage_report.summary())
        if hooks.startup:
            t = time.perf_counter()
            run_leader_hook(hooks.startup, job, "startup")
            times["startup_hook"] = time.perf_counter() - t
    except Exception as exc:  # agreed: raised on every rank
        if rank == 0:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if job is not None:
            job.free()
        # bad input (an unset --node-id-env variable, a spec error): 2; a failed staging: 1
        return 2 if isinstance(exc, (JobError, PlanError, SpecError, ValueError)) else 1

    t = time.perf_counter()
    options = ROWS.load(name).run_options(opts, job)  # the executor's own
    if name == "mpi":
        from .executors.mpi import MPIExecutor

        mpi_ex = MPIExecutor(job, **options)
        mpi_ex.kept = lambda: _kept(ns)     # said by the root's report of a SIGTERM
        with mpi_ex as ex:
            if ex is not None:
                status = drive(module, ns, ex, opts)
        if mpi_ex.lost_workers:
            # A worker stuck in a task past its limit never joins another
            # collective: report now, on the root, and end the job.
            times["flow"] = time.perf_counter() - t
            status["error"] = (status.get("error") or "") + (
                "; worker rank(s) lost (stuck past a time limit, or died): "
                + "; ".join(mpi_ex.lost_workers) + " -- ending the job (MPI_Abort)"
            ).lstrip("; ")
            _report(opts, ns, name, status, times, 1)
            sys.stdout.flush()
            sys.stderr.flush()
            comm.Abort(1)
    elif rank == 0:
        try:
            with make(name, **options) as active:
                assert active is not None  # only MPIExecutor yields None (on workers)
                status = drive(module, ns, active, opts)
        except Exception as exc:
            # Any error (a Parsl or process-pool start-up failure too) must
            # reach the barrier below, or the other ranks wait there forever.
            status = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if comm is not None and name != "mpi":
        quiet_barrier(comm)
    if comm is not None:
        status = comm.bcast(status if rank == 0 else None, root=0)
    times["flow"] = time.perf_counter() - t

    code = 0 if status.get("ok") else 2 if status.get("bad_input") else 1
    if callable(getattr(module, "finalize", None)):  # e.g. a collective HDF5 write
        code = max(code, _agreed_step(module.finalize, ns, job, rank, "finalize"))
    if getattr(ns, "results", None) and getattr(ns, "drain", True):
        t = time.perf_counter()
        code = max(code, _agreed_step(drain_results, ns, job, rank, "drain",
                                      getattr(module, "RUN_RECORD", None)))
        times["drain"] = time.perf_counter() - t
    if hooks.shutdown:
        t = time.perf_counter()
        try:
            run_leader_hook(hooks.shutdown, job, "shutdown")
        except Exception as exc:
            if rank == 0:
                print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
        times["shutdown_hook"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t_start
    if job is not None:
        job.free()
    if rank == 0:
        _report(opts, ns, name, status, times, code)
    return code


def _agreed_step(step: Any, ns: argparse.Namespace, job: Optional[Job], rank: int,
                 what: str, *more: Any) -> int:
    """Collective over `job`: ``step(ns, job, *more)`` on every rank; any rank's error is
    every rank's, said once by rank 0: 1, else 0."""
    error = None
    try:
        step(ns, job, *more)
    except Exception as exc:
        error = exc
    if job is not None:
        try:
            agree(job.comm, error, what, base=WorkflowError, default=WorkflowError)
        except WorkflowError as exc:
            error = exc
    if error is not None:
        if rank == 0:
            print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def _report(
    opts, ns, name: str, status: Dict[str, Any], times: Dict[str, float], code: int
) -> None:
    tasks = status.get("tasks") or {}
    print(
        f"workflow {os.path.basename(opts.flow)} on {name} "
        f"({status.get('workers', '?')} workers, {ns.ranks} ranks): "
        f"{tasks.get('launched', 0)} tasks, {tasks.get('succeeded', 0)} succeeded, "
        f"{tasks.get('failed', 0)} failed, {tasks.get('not_run', 0)} not run; "
        f"{times.get('flow', 0.0):.2f} s; output in {ns.out}"
    )
    if status.get("result"):
        print(f"result: {status['result']}")
    if status.get("error"):
        print(f"error: {status['error']}", file=sys.stderr)
    if code and status.get("summary") and (tasks.get("failed") or tasks.get("not_run")):
        print(f"FAILED: {status['summary']}", file=sys.stderr)
    for msg in status.get("failed_results") or []:
        if not tasks.get("failed"):
            print(f"FAILED: {msg}", file=sys.stderr)
    if opts.report:
        report = {
            "flow": os.path.abspath(opts.flow),
            "executor": name,
            "ranks": ns.ranks,
            "workers": status.get("workers"),
            "tasks": tasks,
            "seconds": times,
            "exit_code": code,
            "out": ns.out,
        }
        stage = getattr(ns, "stage_report", None)
        if stage is not None and hasattr(stage, "to_dict"):
            report["stage"] = stage.to_dict()
        with open(opts.report, "w") as fh:
            json.dump(report, fh, indent=2)
