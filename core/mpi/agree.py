"""Failure agreement: an error on one rank becomes the same error on every rank.

A rank that fails alone and raises would leave the others blocked in the next
collective. So every local step that precedes a collective runs inside one
idiom, the context manager :func:`agreed`::

    with agreed(comm, "checking destinations", default=TransferError, node=layout.name):
        if layout.is_leader:
            risky_local_work()        # any Exception here ...
    next_collective(comm)             # ... is raised on every rank before this

On leaving the block every rank takes part in one ``allgather`` of "ok, or
what went wrong here"; if any rank failed, every rank raises the *same*
exception class with the *same* message, naming the rank(s), host(s), node and
the local messages (which name the file). ``BaseException`` that is not an
``Exception`` (``KeyboardInterrupt``, ``SystemExit``) is not caught: an
interrupted rank is ended by the launcher, not agreed on.

The class raised everywhere is the class of the first failing rank's error if
it derives from ``base`` (default: any error of ours, :class:`~core.errors.MpistageError`),
else ``default`` (callers pass their package's root: ``StagerError``, ``WorkflowError``).
The local cause is kept as ``__cause__`` on the rank where it happened.

Never use it inside code that only some ranks run: every rank of ``comm`` must
enter the same number of ``agreed`` blocks. The other helpers here:
:func:`bcast_result` (rank 0 computes, every rank gets the value or the
error), :func:`any_true` (a flag agreed inside a loop), :func:`quiet_barrier` and
:func:`wait_quietly` (waits that sleep instead of spinning).
"""
from __future__ import annotations

import pickle
import socket
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Tuple, Type, Union

from core.errors import MpistageError

__all__ = ["agree", "agreed", "any_true", "bcast_result", "describe", "format_failures",
           "quiet_barrier", "wait_quietly"]

#: The classes that keep their identity across ranks: one class or a tuple.
Kept = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
#: At most this many distinct messages are spelled out in the agreed error.
MAX_MESSAGES = 6


def describe(exc: BaseException) -> str:
    """One line describing ``exc``: its message, prefixed by its type if it is not ours."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, MpistageError):
        return msg
    return f"{type(exc).__name__}: {msg}"


def format_failures(failures: List[Tuple[int, str, str]], what: str = "") -> str:
    """Render ``(rank, host, message)`` triples as one line; equal messages are merged."""
    by_msg: dict = {}
    for rank, host, msg in failures:
        by_msg.setdefault(msg, []).append((rank, host))
    parts = []
    for msg, where in list(by_msg.items())[:MAX_MESSAGES]:
        hosts = sorted({h for _, h in where})
        ranks = ",".join(str(r) for r, _ in where[:8]) + (",..." if len(where) > 8 else "")
        label = "rank" if len(where) == 1 else "ranks"
        parts.append(f"{label} {ranks} on {'/'.join(hosts)}: {msg}")
    if len(by_msg) > MAX_MESSAGES:
        parts.append(f"and {len(by_msg) - MAX_MESSAGES} more distinct error(s)")
    prefix = f"{what} failed: " if what else ""
    return prefix + "; ".join(parts)


def agree(comm: Any, error: Optional[BaseException], what: str = "", *,
          base: Kept = MpistageError,
          default: Type[BaseException] = MpistageError, node: Optional[str] = None,
          quiet: bool = False) -> None:
    """Collective over `comm`: every rank must call. Raise everywhere if any rank failed.

    Prefer :func:`agreed` around the local step; this is its engine, for the
    few places where the error is already in hand.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    error : BaseException or None
        This rank's failure, or ``None``.
    what : str
        Name of the phase, prefixed to the message ("staging failed: ...").
    base : exception class or tuple of them
        Errors deriving from it keep their class on every rank.
    default : exception class
        Class raised when the first failing rank's error is not a ``base``.
    node : str, optional
        This rank's node name, put in front of its message ("node n1: ...").
    quiet : bool
        Wait for every rank in :func:`quiet_barrier` first (ranks that finish
        early sleep instead of busy-polling inside MPI while others work).

    Raises
    ------
    base or default
        The same class and message on every rank, if any rank passed an error.
    """
    if quiet:
        quiet_barrier(comm)
    mine = None
    if error is not None:
        cls = type(error) if isinstance(error, base) else None
        text = describe(error)
        if node is not None and not text.startswith(f"node {node}:"):
            text = f"node {node}: {text}"
        mine = (cls, text, socket.gethostname())
    gathered = comm.allgather(mine)
    failures = [(r, g[2], g[1]) for r, g in enumerate(gathered) if g is not None]
    if not failures:
        return
    first = next(g for g in gathered if g is not None)
    cls_out = first[0] or default
    try:
        out = cls_out(format_failures(failures, what))
    except Exception:  # a class of ours that needs other arguments
        out = default(format_failures(failures, what))
    out.agreed_by = comm.Get_size()  # type: ignore[union-attr]  # every rank raises it
    raise out from error


@contextmanager
def agreed(comm: Any, what: str = "", *, base: Kept = MpistageError,
           default: Type[BaseException] = MpistageError, node: Optional[str] = None,
           quiet: bool = False) -> Iterator[None]:
    """Collective over `comm`: every rank must enter and leave. Agree on the block's outcome.

    An ``Exception`` raised in the block is caught and passed to :func:`agree`,
    which raises the agreed error on every rank when the block is left (also
    on ranks whose block succeeded). See the module docstring.
    """
    err: Optional[BaseException] = None
    try:
        yield
    except Exception as e:
        err = e
    agree(comm, err, what, base=base, default=default, node=node, quiet=quiet)


def any_true(comm: Any, flag: bool) -> bool:
    """Collective over `comm`: every rank must call. True on all ranks if ``flag`` on any.

    For loops that must stop together; the caller agrees on the details after.
    """
    from mpi4py import MPI

    return bool(comm.allreduce(int(bool(flag)), op=MPI.MAX))


def bcast_result(comm: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Collective over `comm`: every rank must call. ``fn(...)`` on rank 0; its result or
    error on every rank.

    Only rank 0 runs ``fn`` (planning reads the shared filesystem once, options
    come from rank 0's environment); one ``bcast`` carries the pickled result,
    or the exception, which every rank then raises. An exception that does not
    survive pickling travels as a ``MpistageError`` with its description.
    """
    payload = None
    if comm.rank == 0:
        try:
            payload = pickle.dumps(("ok", fn(*args, **kwargs)))
        except Exception as e:
            try:
                payload = pickle.dumps(("err", e))
                pickle.loads(payload)  # an error that does not round-trip is sent as text
            except Exception:
                payload = pickle.dumps(("err", MpistageError(describe(e))))
    kind, value = pickle.loads(comm.bcast(payload, root=0))
    if kind == "err":
        value.agreed_by = comm.Get_size()  # every rank raises it
        raise value
    return value


def quiet_barrier(comm: Any, max_sleep: float = 0.02) -> None:
    """Collective over `comm`: every rank must call. A barrier that sleeps instead of spinning.

    Ranks that wait a long time for others (non-leaders while the leaders
    stage) would otherwise busy-poll inside MPI and take CPU from the ranks
    doing the work when cores are shared. Polls ``Ibarrier`` with an
    exponential back-off up to ``max_sleep`` seconds.
    """
    wait_quietly([comm.Ibarrier()], max_sleep)


def wait_quietly(reqs: List[Any], max_sleep: float = 5e-4) -> None:
    """Wait for ``reqs`` testing them with a growing sleep in between, never spinning.

    For small synchronisation messages only: a large message moved in fragments
    needs both sides to keep progressing (that is the transfer engine's ``Waitall``).
    """
    from mpi4py import MPI

    pause = 2e-5
    while not MPI.Request.Testall(reqs):
        time.sleep(pause)
        pause = min(pause * 2, max_sleep)
