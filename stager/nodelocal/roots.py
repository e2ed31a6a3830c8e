"""Which destination roots a node holds for a spec, and the set-up verify and clean share."""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

from core.mpi.agree import agreed, bcast_result
from core.job import Job
from stager.errors import KEPT, StagerError
from stager.nodelocal.lock import Holder
from stager.nodelocal.state import RootState
from core.options import ENV_PREFIX, Option, parse_seconds, resolve
from stager.planning.api import load
from core.nodes import expand_node

#: Seconds to wait for another run holding a root's lock (negative: forever): keyword >
#: ``STAGER_WAIT`` > 0. One of the staging options too (``stager.staging.options``).
WAIT = Option("wait", 0.0, parse_seconds, ENV_PREFIX + "WAIT")

__all__ = ["node_roots", "open_roots", "Staged", "locked_roots", "lock_roots", "release"]

Held = List[Tuple[str, Optional[RootState], Optional[str]]]


def node_roots(templates: List[str], node: str) -> List[str]:
    """Distinct concrete destination roots on ``node``, in spec order. Pure."""
    return list(dict.fromkeys(os.path.normpath(expand_node(t, node)) for t in templates))


@dataclass
class Staged:
    """What ``verify`` and ``clean`` work from: the node's roots for a spec and its key."""

    roots: List[str]
    key: str
    spec: str
    run: str
    wait: float
    job: Job


def _describe(spec: Any) -> Tuple[List[str], str, str]:
    from stager.planning import spec_key

    s = load(spec)  # a Spec or a Plan: its blocks, no globbing
    path = getattr(s, "path", None) or getattr(s, "spec_path", "")
    shown = os.path.realpath(path) if path and os.path.isfile(path) else (path or "<spec>")
    return [b.dest for b in s.blocks], spec_key(s), shown


def _wait(wait: Any) -> float:
    return float(resolve([WAIT], {"wait": wait})["wait"])


def open_roots(spec: Any, job: Job, wait: Any = None) -> Staged:
    """Collective over `job`: every rank must call. The set-up ``verify`` and ``clean`` share.

    Rank 0 resolves ``wait`` (keyword > ``STAGER_WAIT``) and reads the spec's
    destination templates and record key (no globbing: ``verify`` and
    ``clean`` work from the records, not the sources); every rank gets them.
    The job says where each rank is.
    """
    comm = job.comm
    wait_s = bcast_result(comm, _wait, wait)
    templates, key, shown = bcast_result(comm, _describe, spec)
    run = comm.bcast(secrets.token_hex(6) if comm.rank == 0 else None, root=0)
    return Staged(node_roots(templates, job.name), key, shown, run, wait_s, job)


@contextmanager
def locked_roots(spec: Any, job: Any, wait: Any, what: str) -> Iterator[Tuple[Staged, Held]]:
    """Collective over `job` (a Job or a communicator): every rank must call.
    :func:`open_roots`, then every leader locks its node's roots (:func:`lock_roots`,
    agreed on all ranks); yields the opened roots and the leader's held states (empty
    elsewhere), released on leaving."""
    with Job.of(job) as j:
        staged = open_roots(spec, j, wait)
        held: Held = []
        try:
            with agreed(j.comm, f"{what} (locking destinations)", node=j.name, quiet=True,
                        base=KEPT, default=StagerError):
                if j.is_leader:
                    held = lock_roots(staged)
            yield staged, held
        finally:
            release(held)


def lock_roots(staged: Staged) -> Held:
    """On a leader: lock every root of its node; ``(root, state, skip)`` for each.

    ``state`` is the root's open, locked state directory -- the caller closes it
    (which releases the lock) only after a collective that follows the locking of
    every node, so two nodes sharing a root cannot both lock it in turn -- or
    ``None`` with ``skip`` saying why: nothing was staged there, the root is not to
    be trusted (``Untrusted``'s message), or another node of this run holds it (a
    shared root: that node handles it). On an error every lock taken is released.

    Raises
    ------
    LockBusy
        Another run holds a root.
    """
    from core.trusted import Untrusted

    holder = Holder.here(staged.run, staged.job.name, staged.spec)
    out: Held = []
    try:
        for root in sorted(staged.roots):
            try:
                state = RootState.open(root)
            except Untrusted as e:
                out.append((root, None, str(e)))
                continue
            if state is None:
                out.append((root, None, "nothing staged here"))
                continue
            try:
                other = state.take_lock(holder, staged.wait)
            except BaseException:
                state.close()
                raise
            if other is not None:
                state.close()
                out.append((root, None, f"shared with node {other.node}, which handles it"))
                continue
            out.append((root, state, None))
    except BaseException:
        release(out)
        raise
    return out


def release(held: Held) -> None:
    """Close (and unlock) every state of :func:`lock_roots`."""
    for _, state, _ in held:
        if state is not None:
            state.close()
