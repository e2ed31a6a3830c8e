"""The MPIExecutor: tasks on the ranks of the communicator that staged, through our own dispatcher.

Rank ``root`` runs the workflow's ``main`` and submits tasks; every other rank serves:
as a worker, or (``dispatch="nodes"``) as its node's task server. As with mpi4py's
``MPICommExecutor``, entering the context returns the executor on the root and -- only
after the root shut it down -- ``None`` on the other ranks::

    with MPIExecutor(comm) as ex:
        if ex is not None:          # root: build the graph, wait for results
            print(main(args).result())
    # every rank continues here once all tasks are done

Why not ``MPICommExecutor``, the roles and the protocol: ``docs/DISPATCH.md``;
measurements in ``bench/results/dispatch.md``. When a worker rank dies, ``mpirun`` ends
every rank with ``SIGTERM`` about a second later; the root and the node servers then
print which tasks were in which worker's hands and the run's counts before they exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional, Union

from core.job import Job
from core.mpi.agree import agreed, bcast_result
from core.mpi.link import Link
from core.options import Option, parse_bool, parse_choice, parse_int, parse_number, resolve

from ...errors import ExecutorError
from ...tasks import TaskCall
from ..base import Executor
from .roles import MODES, Roles, plan_roles
from .server import NodeServer, Options
from .term import TermReport

__all__ = ["MPIExecutor", "OPTIONS", "resolve_options", "ENV_DISPATCH", "ENV_MAX_CHUNK",
           "ENV_LOCALITY_WAIT", "LOCALITY_WAIT", "ENV_ARRAYS"]

ENV_DISPATCH = "WORKFLOWS_MPI_DISPATCH"
ENV_MAX_CHUNK = "WORKFLOWS_MPI_MAX_CHUNK"
ENV_WINDOW = "WORKFLOWS_MPI_WINDOW"
ENV_ARRAYS = "WORKFLOWS_MPI_ARRAYS"
ENV_LOCALITY_WAIT = "MPISTAGE_LOCALITY_WAIT"

#: Default locality wait (s) of soft-placed tasks (delay scheduling, Zaharia et
#: al., EuroSys 2010; Spark's ``spark.locality.wait`` is 3 s). With balanced
#: nodes a task's own node frees a worker within about one task time, so the
#: wait must exceed the tasks' typical duration: the analysis tasks this toolkit
#: places (a few frames' peak search, one grain's fit) take 0.01-1 s here. It
#: bounds what delay costs when a node really is overloaded: its tasks start
#: elsewhere at most 1 s late -- small against the long tasks for which that
#: happens, and against the job. Spark's 3 s is tuned for tasks of tens of seconds.
LOCALITY_WAIT = 1.0


class MPIExecutor(Executor):
    """Tasks on the job's ranks other than ``root`` (collective context manager).

    Parameters
    ----------
    job : core.job.Job or mpi4py.MPI.Intracomm, optional
        The job (its node layout serves ``nodes`` dispatch and placement,
        ``app.on(node)``); a communicator (default ``MPI.COMM_WORLD``) is made a job
        on entering (:meth:`core.job.Job.of`). With one rank, tasks run in a thread
        of that rank.
    root : int
        The rank that runs the workflow's main.
    dispatch : str, optional
        ``central`` (the root serves every worker) or ``nodes`` (one task
        server per node, fed by the root; see :mod:`.roles`). Default:
        ``$WORKFLOWS_MPI_DISPATCH``, else ``central``.
    max_chunk : int, optional
        Most tasks in one batch to a worker (default ``$WORKFLOWS_MPI_MAX_CHUNK``,
        else 64).
    window : int, optional
        Tasks a node server keeps queued (default ``$WORKFLOWS_MPI_WINDOW``,
        else 8 per worker, at least 64).
    arrays : bool, optional
        Send the ready tasks of one ``foreach`` (``App.map``) as task arrays:
        one queue entry per chunk, pickled once, resolved from one result
        message (``docs/DISPATCH.md``). Default ``$WORKFLOWS_MPI_ARRAYS``
        (``0`` turns them off), else True.
    locality_wait : float, optional
        Seconds a soft-placed task (``app.on(node)``) waits in its server's
        queue for a worker of its node before a worker of another node may
        take it or another server steal it (delay scheduling). Hard-placed
        tasks never move; free tasks never wait; 0 lets others take soft tasks
        at once. Default ``$MPISTAGE_LOCALITY_WAIT``, else :data:`LOCALITY_WAIT`
        (1 s, why: see there).
    abort_on_lost : bool
        When a worker had to be given up (stuck past its time limit), end the
        job with ``MPI_Abort(1)`` on leaving the context (the stuck rank can
        never join a collective). ``workflows run`` passes False and aborts
        itself after printing its summary.
    """

    name = "mpi"

    @classmethod
    def run_options(cls, opts: Any, job: Any = None) -> Dict[str, Any]:
        # workflows run aborts itself, after its summary, when a worker was lost
        return {"dispatch": opts.dispatch, "abort_on_lost": False}

    def __init__(self, job: Any = None, root: int = 0, dispatch: Optional[str] = None,
                 max_chunk: Optional[int] = None, window: Optional[int] = None,
                 locality_wait: Optional[float] = None, abort_on_lost: bool = True,
                 arrays: Optional[bool] = None):
        super().__init__()
        comm = job.comm if isinstance(job, Job) else job
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        if comm.Is_inter():
            raise ExecutorError("MPIExecutor needs an intracommunicator")
        if not (0 <= root < comm.Get_size()):
            raise ExecutorError(f"root={root}: expecting root in range({comm.Get_size()})")
        # the keywords, resolved against rank 0's environment on entering
        self._options: Dict[str, Any] = dict(dispatch=dispatch, max_chunk=max_chunk,
                                             window=window, locality_wait=locality_wait,
                                             arrays=arrays)
        resolve_options(env={}, **self._options)  # checked here, by the environment's parsers
        self.comm = comm
        self.root = root
        self._job = job
        self.abort_on_lost = abort_on_lost
        self.arrays = True
        self.roles: Optional[Roles] = None
        self._dup: Any = None
        self._link: Optional[Link] = None
        self._root_server: Any = None
        self._thread: Optional[threading.Thread] = None
        self._entered = False
        self._term: Optional[TermReport] = None
        #: what a terminated run keeps (the root's SIGTERM report says it; the runner sets it)
        self.kept: Optional[Callable[[], str]] = None
        self._refs: dict = {}  # function -> FunctionRef (submit() of the same function)
        self.stats: dict = {}

    # -- properties -----------------------------------------------------------------
    @property
    def workers(self) -> int:
        if self.roles is None:
            return max(1, self.comm.Get_size() - 1)
        return max(1, len(self.roles.workers))

    @property
    def dispatch(self) -> str:
        return self.roles.mode if self.roles else (self._options["dispatch"] or "central")

    @property
    def nodes(self):
        if self.roles is None:
            return super().nodes
        return self.roles.names

    @property
    def default_node(self) -> Optional[int]:  # type: ignore[override]
        return self.roles.node_of[self.root] if self.roles else None

    def node_index(self, node: Union[int, str], hard: bool = False) -> int:
        index = super().node_index(node)
        if hard and self.roles is not None and self.roles.workers:
            if index not in self.roles.nodes_with_workers():
                raise ValueError(
                    f"node {self.roles.names[index]!r} has no worker rank (only the root runs "
                    "there): a task placed there with hard=True could never run"
                )
        return index

    @property
    def lost_workers(self) -> List[str]:
        """Workers given up during the run (stuck past a time limit), described."""
        rs = self._root_server
        if rs is None:
            return []
        lost = dict(rs.lost_notes)
        lost.update(rs.lost)  # the root's own words for its own workers
        return [lost[r] for r in sorted(lost)]

    # -- the collective context -------------------------------------------------------
    def __enter__(self) -> Optional[MPIExecutor]:
        """Collective over `comm`: every rank must call. Root gets the executor, others None."""
        if self._entered or self._closed:
            raise ExecutorError("an MPIExecutor can be entered only once")
        self._entered = True
        comm = self.comm
        # keyword > rank 0's environment > default; every rank gets rank 0's answer
        o = bcast_result(comm, resolve_options, **self._options)
        self.arrays = o["arrays"]
        self._dup = comm.Dup()
        with agreed(comm, "mpi executor: node layout", base=ExecutorError,
                    default=ExecutorError), Job.of(self._job or comm) as job:
            self.roles = roles = plan_roles(job.node_of, job.names, self.root, o["dispatch"])
        # its messages hold pickled tasks and results (bytes), never arrays to send apart
        link = self._link = Link(self._dup, "executor", out_of_band=None)
        opts = Options(max_chunk=o["max_chunk"], window=o["window"],
                       locality_wait=o["locality_wait"])
        rank = comm.Get_rank()
        role = roles.role(rank)
        if role == "root":
            from .root import RootServer

            self._root_server = RootServer(link, roles, opts)
            self._thread = threading.Thread(target=self._root_server.run,
                                            name="workflows-mpi-dispatcher", daemon=True)
            self._thread.start()
            self._install_term_report()
            super().__enter__()  # active, as every executor (Executor.__enter__)
            return self
        old = os.environ.get("WORKFLOWS_WORKER")
        os.environ["WORKFLOWS_WORKER"] = "1"
        try:
            if role == "server":
                server = NodeServer(link, roles, rank, opts)
                self._serve_or_abort(server.run, server.in_flight_lines)
            else:
                from .worker import serve_worker

                self._serve_or_abort(lambda: serve_worker(link, roles.server_of[rank]), None)
        finally:
            if old is None:
                os.environ.pop("WORKFLOWS_WORKER", None)
            else:
                os.environ["WORKFLOWS_WORKER"] = old
        self._closed = True
        self._free()
        return None

    def _serve_or_abort(self, loop, lines) -> None:
        term = None
        if lines is not None:
            term = TermReport(f"task server rank {self.comm.Get_rank()}", lines)
            term.install()
        try:
            loop()
        except BaseException:
            # A serving rank must never leave the others waiting: a bug here ends the job.
            traceback.print_exc()
            sys.stderr.write(f"mpi executor: rank {self.comm.Get_rank()} failed while serving "
                             "tasks; aborting the job\n")
            sys.stderr.flush()
            self.comm.Abort(1)
        finally:
            if term is not None:
                term.uninstall()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._root_server is None:  # a serving rank: nothing left to do
            return None
        try:
            super().__exit__(exc_type, exc, tb)
        finally:
            lost = self.lost_workers
            if lost and self.abort_on_lost:
                sys.stderr.write("mpi executor: worker(s) lost (stuck past a time limit, or "
                                 f"died): {'; '.join(lost)}; ending the job (MPI_Abort)\n")
                sys.stderr.flush()
                self.comm.Abort(1)
        return None

    # -- tasks ----------------------------------------------------------------------
    def submit(self, fn, *args: Any, **kwargs: Any):
        """``fn(*args, **kwargs)`` on a worker; returns a future of its result."""
        from concurrent.futures import Future

        from ...tasks import FunctionRef, TaskCall

        self._check_root()
        fut: Future = Future()
        try:
            target = self._refs[fn]
        except (KeyError, TypeError):  # not seen yet, or unhashable (then made every time)
            target = FunctionRef.of(fn) if hasattr(fn, "__qualname__") else fn
            with contextlib.suppress(TypeError):
                self._refs[fn] = target
        call = TaskCall(getattr(fn, "__name__", "task"), target, args, kwargs)

        def done(outcome) -> None:
            if not fut.set_running_or_notify_cancel():
                return
            if outcome.error is None:
                fut.set_result(outcome.value)
            else:
                from ...errors import failure_class

                fut.set_exception(failure_class(outcome.error)(call.name, "...", outcome.error, 1))

        self._root_server.launch(call, done)
        return fut

    def submit_call(self, call: TaskCall):
        raise ExecutorError("MPIExecutor runs tasks through launch_call")  # pragma: no cover

    def launch_call(self, call: TaskCall, done) -> None:
        self._check_root()
        self._root_server.launch(call, done)

    def launch_array(self, calls: List[TaskCall], dones: List[Any]) -> None:
        """Ready calls of one app as task arrays (``docs/DISPATCH.md``); ``dones[i]`` per call."""
        self._check_root()
        if not self.arrays:
            for call, done in zip(calls, dones):
                self._root_server.launch(call, done)
            return
        self._root_server.launch_array(calls, dones)

    def _check_root(self) -> None:
        self._check_open()
        if self._root_server is None:
            raise ExecutorError(
                "MPIExecutor.submit outside its context: use `with MPIExecutor(comm) as ex:` "
                "and submit on the root only (ex is None on the other ranks)"
            )
        if self._root_server.finished.is_set():
            raise ExecutorError(f"the mpi executor's dispatcher stopped: {self._root_server.error}")

    def _shutdown(self, wait: bool) -> None:
        rs = self._root_server
        if rs is None:
            return
        rs.request_stop(cancel=not wait)
        if self._thread is not None:
            self._thread.join()
        self.stats = {
            "messages_sent": self._link.sent if self._link else 0,
            "messages_received": self._link.received if self._link else 0,
            "bytes_sent": self._link.bytes_sent if self._link else 0,
            "bytes_received": self._link.bytes_received if self._link else 0,
            "tasks": rs.tasks_done,
            "stolen_by_root": rs.stolen_tasks,
            "array_entries": rs.array_entries,
            "array_tasks": rs.array_tasks,
            "dispatch": self.dispatch,
            "workers": self.workers,
            "servers": len(self.roles.servers) - 1 if self.roles else 0,
        }
        if self._term is not None:
            self._term.uninstall()
            self._term = None
        if not self.lost_workers:
            self._free()

    def _free(self) -> None:
        if self._dup is not None:
            if self._link is not None:
                self._link.flush(timeout=5.0)
            self._dup.Free()
            self._dup = None

    def _install_term_report(self) -> None:
        rs = self._root_server
        self._term = TermReport("workflow run (root)", rs.in_flight_report,
                                lambda: self.runtime.summary(limit=3), self.kept)
        self._term.install(wakeup=True)
        rs.term_poll = self._term.poll
        rs.summary = lambda: self.runtime.summary(limit=0)


#: The executor's options, each declared once: keyword > environment variable > default.
OPTIONS = (
    Option("dispatch", "central", parse_choice(*MODES), ENV_DISPATCH),
    Option("max_chunk", 64, parse_int(1), ENV_MAX_CHUNK),
    Option("window", 0, parse_int(1), ENV_WINDOW),  # 0: 8 per worker, at least 64
    Option("locality_wait", LOCALITY_WAIT, parse_number(0), ENV_LOCALITY_WAIT),  # s, finite
    Option("arrays", True, parse_bool, ENV_ARRAYS),
)


def resolve_options(env: Optional[Any] = None, **kwargs: Any) -> dict:
    """:data:`OPTIONS` from keywords, then environment, then defaults. Local.

    Raises
    ------
    ExecutorError
        A value that does not parse (naming the keyword or variable).
    """
    try:
        return resolve(OPTIONS, kwargs, env, what="mpi executor option")
    except ValueError as e:
        raise ExecutorError(str(e)) from None

