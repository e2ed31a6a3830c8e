"""The job context (core/job.py): made once, any rank count, passed down and reused."""
import os
import shutil

import pytest

from tests.mpiutil import assert_all, shared_tmpdir

pytestmark = pytest.mark.mpi


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _blocks(size, k):
    """Node index of each rank in k contiguous blocks (the emulation rule, written out)."""
    return [next(i for i in range(k) if i * size // k <= r < (i + 1) * size // k)
            for r in range(size)]


def test_emulated_nodes_at_every_count():
    from core.job import Job

    comm = _comm()
    for k in range(1, comm.size + 1):
        job = Job.from_comm(comm, node_id=f"emulate:{k}")
        old = Job.from_comm(comm, emulate_nodes=k)  # the older keyword, same layout
        try:
            want = _blocks(comm.size, k)
            me = want[comm.rank]
            leaders = tuple(want.index(i) for i in range(k))
            ok = (job.node_id == f"emulate:{k}" and list(job.node_of) == want
                  and job.index == me and job.name == f"node{me}"
                  and job.names == tuple(f"node{i}" for i in range(k))
                  and job.is_leader == (comm.rank in leaders) and job.leader_ranks == leaders
                  and job.node_comm.size == want.count(me)
                  and (job.leader_comm.size == k if job.is_leader else job.leader_comm is None)
                  and (old.node_id, old.node_of, old.names) ==
                      (job.node_id, job.node_of, job.names))
            assert_all(comm, ok, f"k={k}: {job}")
        finally:
            old.free()
            job.free()


def test_environment_identifies_nodes(monkeypatch):
    from core.job import Job

    comm = _comm()
    monkeypatch.setenv("MPISTAGE_TEST_JOB_NODE", f"n{comm.rank % 2}")
    job = Job.from_comm(comm, node_id="env:MPISTAGE_TEST_JOB_NODE")
    try:
        want = [r % 2 for r in range(comm.size)]
        ok = (job.name == f"n{comm.rank % 2}" and list(job.node_of) == want
              and job.n_nodes == min(2, comm.size) and job.is_leader == (comm.rank < 2)
              and job.node_id == "env:MPISTAGE_TEST_JOB_NODE")
        assert_all(comm, ok, str(job))
    finally:
        job.free()


def test_node_id_from_rank_0_environment(monkeypatch):
    from core.job import Job

    comm = _comm()
    # Only rank 0's environment counts: the others could never disagree.
    monkeypatch.setenv("STAGER_NODE_ID", f"emulate:{comm.size}" if comm.rank == 0 else "host")
    job = Job.from_comm(comm)
    try:
        assert_all(comm, job.node_id == f"emulate:{comm.size}" and job.n_nodes == comm.size,
                   job.node_id)
    finally:
        job.free()
    monkeypatch.setenv("STAGER_NODE_ID", "emulate:0")
    with pytest.raises(ValueError, match="STAGER_NODE_ID"):
        Job.from_comm(comm)
    monkeypatch.delenv("STAGER_NODE_ID")
    with pytest.raises(ValueError, match="emulate_nodes must be an integer in 1"):
        Job.from_comm(comm, node_id=f"emulate:{comm.size + 1}")


@pytest.fixture
def staged_dir():
    comm = _comm()
    d = shared_tmpdir(comm, "mpistage-job-")
    if comm.rank == 0:
        os.makedirs(os.path.join(d, "src"))
        for i in range(3):
            with open(os.path.join(d, "src", f"{i}.bin"), "wb") as f:
                f.write(os.urandom(1000 + i))
        with open(os.path.join(d, "stage.hook"), "w") as f:
            f.write(f"broadcast to {d}/nodes/%n/data files {{\n  {d}/src/*.bin\n}}\n")
    comm.Barrier()
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def test_one_layout_passed_down(staged_dir, monkeypatch):
    """stage, verify, drain, clean and the executor's roles reuse the job: no new layout."""
    import stager
    import core.job as jobmod
    from core.job import Job
    from workflows.executors.mpi.roles import layout_roles

    comm = _comm()
    k = min(2, comm.size)
    made = []
    real = jobmod.node_layout

    def counting(*args, **kwargs):  # the real layout, counted
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(jobmod, "node_layout", counting)
    d = staged_dir
    job = Job.from_comm(comm, node_id=f"emulate:{k}")
    try:
        spec = os.path.join(d, "stage.hook")
        rep = stager.stage(spec, job=job, progress=False)
        stager.verify(spec, job)                      # the job in place of comm
        before = len(made)
        stager.verify(spec, comm, emulate_nodes=k)    # without a job: one made, freed
        ok = len(made) == before + 1
        del made[-1]
        if job.is_leader:
            res = os.path.join(d, "res", job.name)
            os.makedirs(res)
            with open(os.path.join(res, "out.txt"), "w") as f:
                f.write(job.name)
        comm.Barrier()
        drained = stager.drain(os.path.join(d, "res", "%n"), os.path.join(d, "shared"), comm,
                               job=job)
        roles = layout_roles(comm, 0, "nodes", job=job)
        stager.clean(spec, job=job, emulate_nodes=k)  # agreeing keywords are accepted
        left = os.path.exists(os.path.join(d, "nodes", job.name, "data", "0.bin"))
        got = (rep.files, drained.files, list(roles.node_of), len(made),
               sorted(n for n in os.listdir(os.path.join(d, "shared")) if n[0] != "."))
        want = (3, k, list(job.node_of), 1, [f"node{i}" for i in range(k)])  # 1: from_comm's
        assert_all(comm, ok and got == want and not left, f"got {got}, want {want}")
        with pytest.raises(ValueError, match="node options ask for"):
            stager.drain(os.path.join(d, "res", "%n"), os.path.join(d, "shared2"), job=job,
                         node_id_env="HOSTNAME")
    finally:
        job.free()
