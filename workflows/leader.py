"""Leader hooks: run something once per node before tasks start (and after they end).

As Swift/T's ``TURBINE_LEADER_HOOK_STARTUP``/``_SHUTDOWN``: on the leader rank of each
node, with a barrier so no task starts before every node is ready. A hook
(``--leader-hook-startup``/``--leader-hook-shutdown``, or ``STAGER_LEADER_HOOK_STARTUP``/
``_SHUTDOWN``) is ``module:function``, called on each leader with a
:class:`HookContext`, or a hook spec file: staged at startup (one copy per node),
cleaned at shutdown. Every rank calls :func:`run_leader_hook`; resolving the hook,
agreeing on its kind and running it are each agreed, so a failure on any leader is the
same :class:`~workflows.errors.HookError` on every rank.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from core.mpi.agree import agreed
from core.job import Job
from core.table import load_object

from .errors import HookError, WorkflowError

__all__ = ["HookContext", "LeaderHooks", "leader_hooks_from", "resolve_hook", "run_leader_hook"]

ENV_STARTUP = "STAGER_LEADER_HOOK_STARTUP"
ENV_SHUTDOWN = "STAGER_LEADER_HOOK_SHUTDOWN"
PHASES = ("startup", "shutdown")

Hook = Union[str, Callable[["HookContext"], Any]]


@dataclass(frozen=True)
class HookContext:
    """What a ``module:function`` hook is told about where it runs."""

    phase: str
    node: str
    node_index: int
    n_nodes: int
    rank: int
    host: str


@dataclass(frozen=True)
class LeaderHooks:
    """The startup and shutdown hooks of a run (``None``: no hook)."""

    startup: Optional[str] = None
    shutdown: Optional[str] = None


def leader_hooks_from(startup: Optional[str] = None, shutdown: Optional[str] = None,
                      env: Optional[Mapping[str, str]] = None) -> LeaderHooks:
    """Hooks from arguments, else from ``STAGER_LEADER_HOOK_*`` (empty means none)."""
    env = os.environ if env is None else env
    return LeaderHooks(startup or env.get(ENV_STARTUP) or None,
                       shutdown or env.get(ENV_SHUTDOWN) or None)


def resolve_hook(hook: Hook) -> Union[Callable, str]:
    """Turn a hook name into a callable, or the absolute path of a hook spec file.

    Raises
    ------
    workflows.errors.HookError
        If the name is neither an existing file nor an importable ``module:function``.
    """
    if callable(hook):
        return hook
    if not isinstance(hook, str) or not hook.strip():
        raise HookError(f"leader hook {hook!r}: expected a hook spec file or module:function")
    if os.path.isfile(hook):
        return os.path.abspath(hook)
    module, sep, func = hook.partition(":")
    if not sep or not module or not func:
        raise HookError(f"leader hook {hook!r}: no such file, and not of the form module:function")
    try:
        obj = load_object(hook)
    except Exception as exc:
        # Not only ImportError: a SyntaxError or any error raised while the
        # module runs must also become a HookError, or it skips the agreement.
        raise HookError(
            f"leader hook {hook!r}: cannot import it: {type(exc).__name__}: {exc}; check "
            "that the module imports on every node (PYTHONPATH) and names the function"
        ) from exc
    if not callable(obj):
        raise HookError(f"leader hook {hook!r} is not callable")
    return obj


def run_leader_hook(hook: Optional[Hook], job: Any = None, phase: str = "startup", *,
                    stage_options: Optional[Mapping[str, Any]] = None) -> Optional[HookContext]:
    """Collective over `job`: every rank must call. Run ``hook`` once per node, then barrier.

    Parameters
    ----------
    hook : str, callable or None
        See the module docstring; ``None`` does nothing (no collective).
    job : core.job.Job or mpi4py.MPI.Intracomm, optional
        The job's node layout, made once; a communicator (default ``MPI.COMM_WORLD``)
        is made a job here (:meth:`core.job.Job.of`).
    phase : str
        ``"startup"`` or ``"shutdown"``.
    stage_options : mapping, optional
        Extra keyword arguments for ``stager.stage`` / ``stager.clean`` (spec-file hooks).

    Returns
    -------
    HookContext or None
        This rank's context on a leader that ran a ``module:function`` hook,
        else ``None``.

    Raises
    ------
    workflows.errors.HookError
        On every rank, naming the node(s), rank(s) and host(s) that failed.
    """
    if hook is None:
        return None
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    with Job.of(job) as job:
        comm = job.comm
        what = f"{phase} leader hook"
        target: Any = None
        with agreed(comm, what, base=WorkflowError, default=HookError):
            target = resolve_hook(hook)
            if isinstance(target, str):
                # imported here, inside the agreement: a node whose install is broken fails
                # every rank with its message instead of leaving the others in stage()
                import stager

                target = (target, stager.stage if phase == "startup" else stager.clean)
        # A spec file visible on some nodes only would send ranks down different
        # collective paths (stage() versus the layout): agree on the kind first.
        kinds = comm.allgather(isinstance(target, tuple))
        if len(set(kinds)) > 1:
            seen = [r for r, k in enumerate(kinds) if k]
            raise HookError(
                f"{phase} leader hook {hook!r} is a file on ranks {seen} only and a "
                f"module:function elsewhere; put the hook spec on a filesystem every node sees"
            )

        ctx = None
        if isinstance(target, tuple):
            path, fn = target
            # Collective and agreed inside: the spec is read and planned on rank 0 only.
            fn(path, job, **dict(stage_options or {}))
            return None
        # Ranks wait (sleeping, not spinning) while the leaders run the hook.
        with agreed(comm, what, base=WorkflowError, default=HookError, node=job.name, quiet=True):
            if job.is_leader:
                ctx = HookContext(phase, job.name, job.index, job.n_nodes,
                                  comm.Get_rank(), socket.gethostname())
                try:
                    target(ctx)
                except Exception as exc:
                    raise HookError(f"{type(exc).__name__}: {exc}") from exc
        return ctx
