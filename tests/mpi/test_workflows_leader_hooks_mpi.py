"""Leader hooks: once per node, barrier before tasks, failures agreed (``@pytest.mark.mpi``)."""
from __future__ import annotations

import os

import pytest

from tests.mpiutil import emulated
from workflows.leader import HookContext, run_leader_hook
from workflows import HookError

CALLS_DIR_ENV = "LEADER_HOOK_TEST_DIR"


def record(ctx: HookContext) -> None:
    """A hook: one file per call, named after the phase and node."""
    path = os.path.join(os.environ[CALLS_DIR_ENV], f"{ctx.phase}-{ctx.node}-{ctx.rank}")
    with open(path, "w") as fh:
        fh.write(f"{ctx.node_index}/{ctx.n_nodes}")


def broken(ctx: HookContext) -> None:
    raise OSError(f"scratch on {ctx.node} is read-only")


# -- mpi -----------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("nodes", [1, 2])
def test_runs_once_per_emulated_node(nodes, monkeypatch):
    from mpi4py import MPI

    from tests.mpiutil import assert_all, shared_tmpdir

    comm = MPI.COMM_WORLD
    k = min(nodes, comm.size)
    folder = shared_tmpdir(comm)
    monkeypatch.setenv(CALLS_DIR_ENV, folder)
    ctx = run_leader_hook("tests.mpi.test_workflows_leader_hooks_mpi:record", emulated(comm, k),
                          "startup")
    # The barrier: when any rank returns, every node's hook has finished.
    calls = sorted(os.listdir(folder))
    leaders = [r * comm.size // k for r in range(k)] if k > 1 else [0]
    expected = sorted(f"startup-node{i}-{leaders[i]}" for i in range(k))
    ok = calls == expected
    ok = ok and ((ctx is not None) == (comm.rank in leaders))
    assert_all(comm, ok, f"calls {calls}, expected {expected}")


@pytest.mark.mpi
def test_failing_hook_raises_on_every_rank():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    with pytest.raises(HookError, match="read-only"):
        run_leader_hook(broken, comm, "shutdown")


RANK_ONE_FAILS = """
import os
if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "1":
    raise RuntimeError("module broken on rank 1")

def hook(ctx):
    pass
"""


@pytest.mark.mpi
def test_hook_that_fails_to_import_on_one_rank_fails_on_every_rank(monkeypatch):
    from mpi4py import MPI

    from tests.mpiutil import shared_tmpdir

    comm = MPI.COMM_WORLD
    folder = shared_tmpdir(comm)
    if comm.rank == 0:
        with open(os.path.join(folder, "hookmod_rank1.py"), "w") as fh:
            fh.write(RANK_ONE_FAILS)
    comm.Barrier()
    monkeypatch.syspath_prepend(folder)
    if comm.size == 1:
        assert run_leader_hook("hookmod_rank1:hook", comm, "startup") is not None
        return
    with pytest.raises(HookError, match="module broken on rank 1"):
        run_leader_hook("hookmod_rank1:hook", comm, "startup")


@pytest.mark.mpi
def test_spec_file_on_some_ranks_only_fails_on_every_rank(monkeypatch):
    # The name is a (relative) spec file on rank 0 and a module:function on the
    # others: without agreeing on the kind, rank 0 entered stage() and the others
    # node_layout(), two different collectives.
    from mpi4py import MPI

    from tests.mpiutil import shared_tmpdir

    comm = MPI.COMM_WORLD
    folder = shared_tmpdir(comm)
    if comm.rank == 0:
        os.makedirs(os.path.join(folder, "rank0"))
        with open(os.path.join(folder, "rank0", "hookmod_kind:hook"), "w") as fh:
            fh.write(f"broadcast to {folder}/local/%n files {{ /etc/hostname }}\n")
        with open(os.path.join(folder, "hookmod_kind.py"), "w") as fh:
            fh.write("def hook(ctx):\n    pass\n")
    comm.Barrier()
    monkeypatch.syspath_prepend(folder)
    monkeypatch.chdir(os.path.join(folder, "rank0") if comm.rank == 0 else folder)
    if comm.size == 1:
        return
    with pytest.raises(HookError, match="a file on ranks \\[0\\] only"):
        run_leader_hook("hookmod_kind:hook", comm, "startup")


@pytest.mark.mpi
def test_spec_file_hook_stages_and_cleans():
    from mpi4py import MPI

    from tests.mpiutil import assert_all, shared_tmpdir

    comm = MPI.COMM_WORLD
    folder = shared_tmpdir(comm)
    src = os.path.join(folder, "src")
    if comm.rank == 0:
        os.makedirs(src)
        for i in range(3):
            with open(os.path.join(src, f"f{i}.dat"), "wb") as fh:
                fh.write(bytes([i]) * 1000)
        with open(os.path.join(folder, "stage.hook"), "w") as fh:
            fh.write(f"broadcast to {folder}/local/%n files {{ {src}/*.dat }}\n")
    comm.Barrier()
    spec = os.path.join(folder, "stage.hook")
    k = min(2, comm.size)
    run_leader_hook(spec, emulated(comm, k), "startup")
    staged = sorted(os.listdir(os.path.join(folder, "local")))
    files = sorted(n for n in os.listdir(os.path.join(folder, "local", "node0"))
                   if not n.startswith("."))  # the stager's own manifest is hidden
    ok = staged == [f"node{i}" for i in range(k)] and files == ["f0.dat", "f1.dat", "f2.dat"]
    comm.Barrier()
    run_leader_hook(spec, emulated(comm, k), "shutdown")
    left = [n for n in os.listdir(os.path.join(folder, "local", "node0"))
            if not n.startswith(".")] if os.path.isdir(os.path.join(folder, "local", "node0")) \
        else []
    ok = ok and left == []
    assert_all(comm, ok, f"staged {staged} files {files} left after clean {left}")
