"""A failure on one rank is one error on every rank, never a hang (``@pytest.mark.mpi``).

Each test makes exactly one rank fail in a local step that precedes a
collective and checks that
every rank raises the same error class naming the failing rank. Faults that
cannot be produced for real on one rank of one machine (an import broken on
one node, an exception type nobody expected) are injected on that rank only;
the rest is real. Every test has a deadline (pytest-timeout), so a regression
fails instead of hanging the suite.
"""
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.mpiutil import assert_all, emulated

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(90)]


@pytest.fixture
def tmp(mpi_tmpdir):
    return mpi_tmpdir


def _outcome(fn):
    try:
        fn()
    except Exception as e:
        return type(e).__name__, str(e)
    return None, ""


def _same_everywhere(comm, got, cls, *needles):
    """Every rank raised ``cls`` with one identical message holding every needle."""
    everyone = comm.allgather(got)
    assert_all(comm, len(set(everyone)) == 1, f"ranks disagree: {everyone}")
    name, msg = got
    assert_all(comm, name == cls, f"expected {cls}, got {name}: {msg}")
    missing = [n for n in needles if n not in msg]
    assert_all(comm, not missing, f"{missing} not in {msg!r}")


def _odd_rank(comm):
    return comm.size - 1  # a leader when every rank is its own node


# -- a spec-file leader hook whose stager cannot be loaded on one node ------------------

def test_spec_hook_that_cannot_load_the_stager_on_one_rank(comm, tmp, monkeypatch):
    import stager
    from workflows.leader import run_leader_hook

    spec = os.path.join(tmp, "h.hook")
    if comm.rank == 0:
        os.makedirs(os.path.join(tmp, "src"))
        Path(tmp, "src", "a").write_bytes(b"x")
        Path(spec).write_text(f"broadcast to {tmp}/dest/%n files {{ {tmp}/src/a }}\n")
    comm.Barrier()
    if comm.rank == _odd_rank(comm):  # e.g. a node whose install is broken
        monkeypatch.delitem(stager.__dict__, "stage", raising=False)
        monkeypatch.setitem(sys.modules, "stager.staging.pipeline", None)  # cannot import
    got = _outcome(lambda: run_leader_hook(spec, emulated(comm, comm.size), "startup"))
    _same_everywhere(comm, got, "HookError", f"rank {_odd_rank(comm)}",
                     "stager.staging.pipeline")


# -- drain and the capacity check, with an exception type nobody expected ---------------

def _results(comm, tmp):
    src = os.path.join(tmp, "local", "%n", "results")
    if comm.rank == 0:
        for i in range(comm.size):
            d = Path(tmp, "local", f"node{i}", "results")
            d.mkdir(parents=True)
            (d / f"r{i}.txt").write_text(f"node{i}\n")
    comm.Barrier()
    return src, os.path.join(tmp, "shared")


@pytest.mark.parametrize("where", ["list_results", "targets"])
def test_drain_step_failing_on_one_node_with_any_exception(comm, tmp, monkeypatch, where):
    import stager.stageout as so
    from stager import drain

    src, dest = _results(comm, tmp)
    if comm.rank == _odd_rank(comm):
        def broken(*a, **k):
            raise RuntimeError(f"bug in {where}")
        monkeypatch.setattr(so, where, broken)
    got = _outcome(lambda: drain(src, dest, emulated(comm, comm.size)))
    _same_everywhere(comm, got, "TransferError", f"rank {_odd_rank(comm)}",
                     f"RuntimeError: bug in {where}")
    ok = comm.rank != 0 or not any(Path(dest).rglob("*.txt"))
    assert_all(comm, ok, "a node copied its results although the drain failed")


def test_capacity_check_failing_on_one_leader_with_any_exception(comm, tmp, monkeypatch):
    import stager.staging.capacity as cap
    from stager import stage

    if comm.rank == 0:
        os.makedirs(os.path.join(tmp, "src"))
        Path(tmp, "src", "a").write_bytes(os.urandom(1000))
        Path(tmp, "s.hook").write_text(f"broadcast to {tmp}/dest/%n files {{ {tmp}/src/a }}\n")
    comm.Barrier()
    if comm.rank == _odd_rank(comm):
        def broken(path):
            raise ValueError("statvfs returned nonsense")
        monkeypatch.setattr(cap, "free_bytes", broken)
    got = _outcome(lambda: stage(os.path.join(tmp, "s.hook"), emulated(comm, comm.size),
                                 progress=False))
    _same_everywhere(comm, got, "CapacityError", f"rank {_odd_rank(comm)}",
                     "ValueError: statvfs returned nonsense")
    assert_all(comm, comm.rank != 0 or not Path(tmp, "dest").exists(),
               "something was written before the capacity check agreed")


# -- results and the HEDM drain -------------------------------------------------------

def test_rows_that_do_not_convert_on_one_rank(comm, tmp):
    from workflows import ResultsError
    from workflows.results import write_gathered

    rows = [[1.0, 2.0], [3.0]] if comm.rank == _odd_rank(comm) else np.ones((2, 2))
    got = _outcome(lambda: write_gathered(comm, os.path.join(tmp, "r.h5"), "x", rows))
    _same_everywhere(comm, got, ResultsError.__name__, f"rank {_odd_rank(comm)}")


def test_the_runners_drain_names_nodes_by_its_job_not_the_environment(comm, tmp, monkeypatch):
    from workflows.drain import drain_results
    from workflows import node

    src, dest = _results(comm, tmp)
    if comm.rank == _odd_rank(comm):  # a rank whose environment cannot name its node
        monkeypatch.setattr(node, "_NODE", None)
        monkeypatch.setenv("STAGER_NODE_ID", "env:MPISTAGE_TEST_UNSET_NODE_ID")
        monkeypatch.delenv("MPISTAGE_TEST_UNSET_NODE_ID", raising=False)
    args = SimpleNamespace(results=src, out=dest, drain=True)
    got = _outcome(lambda: drain_results(args, emulated(comm, comm.size), "run.json"))
    drained = sorted(p.name for p in Path(dest).glob("*.txt")) if comm.rank == 0 else []
    want = [f"r{i}.txt" for i in range(comm.size)] if comm.rank == 0 else []
    assert_all(comm, got == (None, "") and drained == want, f"{got}; drained {drained}")
