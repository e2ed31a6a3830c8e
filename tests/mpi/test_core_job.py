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
                  and job.leaders_share_host)     # every rank of this test runs on one host
            assert_all(comm, ok, f"k={k}: {job}")
        finally:
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
    with pytest.raises(ValueError, match="emulated nodes must be an integer in 1"):
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
    from workflows.executors.mpi.roles import plan_roles

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
        monkeypatch.setenv("STAGER_NODE_ID", f"emulate:{k}")
        stager.verify(spec, comm)                     # a communicator: a job made, freed
        monkeypatch.delenv("STAGER_NODE_ID")
        ok = len(made) == before + 1
        del made[-1]
        if job.is_leader:
            res = os.path.join(d, "res", job.name)
            os.makedirs(res)
            with open(os.path.join(res, "out.txt"), "w") as f:
                f.write(job.name)
        comm.Barrier()
        drained = stager.drain(os.path.join(d, "res", "%n"), os.path.join(d, "shared"), job)
        roles = plan_roles(job.node_of, job.names, 0, "nodes")
        stager.clean(spec, job)
        left = os.path.exists(os.path.join(d, "nodes", job.name, "data", "0.bin"))
        got = (rep.files, drained.files, list(roles.node_of), len(made),
               sorted(n for n in os.listdir(os.path.join(d, "shared")) if n[0] != "."))
        want = (3, k, list(job.node_of), 1, [f"node{i}" for i in range(k)])  # 1: from_comm's
        assert_all(comm, ok and got == want and not left, f"got {got}, want {want}")
    finally:
        job.free()


def test_job_of_uses_a_job_as_it_is_and_frees_only_what_it_made():
    from mpi4py import MPI

    from core.job import Job

    comm = _comm()
    with Job.from_comm(comm, f"emulate:{comm.size}") as job:
        with Job.of(job) as same:
            ok = same is job
        ok = ok and job.node_comm != MPI.COMM_NULL      # not freed by Job.of
        with Job.of(comm) as made:
            ok = ok and made is not job and made.comm is comm and made.node_id == "host"
            node_comm = made.node_comm
        ok = ok and node_comm == MPI.COMM_NULL           # freed on leaving
        assert_all(comm, ok, "Job.of")
    assert_all(comm, job.node_comm == MPI.COMM_NULL, "a job used as a context is freed")
