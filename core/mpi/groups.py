"""Sub-communicators of the leaders that hold the same scatter outputs.

A ``scatter`` output with ``replicas`` R > 1 is held by R of the N nodes. Moving it
over the whole leader communicator would deliver its bytes to every leader, N - R
of which throw them away. :func:`holder_groups` instead gives each distinct set
of holders its own communicator, created with ``MPI_Comm_create_group``, which is
collective over the *members of the group only*: the other leaders neither take
part nor wait. A transfer method then runs over that communicator as it would over
all leaders: each byte is still read once (by the group's members, in stripes),
and only holders receive it.

Deadlock freedom: every leader walks the sets in one global order (sorted) and
joins the ones it belongs to, so two leaders that share several sets meet in them
in the same order (the ordered-locks argument); each set has its own tag.
Failure: before a set's work, its members agree whether any of them already
failed (:func:`core.mpi.agree.any_true` over the group); if one did, the whole
group skips it -- so nobody waits in a group for a member that stopped -- and
the caller's failure is agreed over all leaders afterwards, as for any kind.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Tuple

from core.mpi.agree import any_true

__all__ = ["holder_groups"]


def holder_groups(comm: Any, sets: Iterable[Tuple[int, ...]],
                  failed: Callable[[], bool]) -> Iterator[Tuple[Tuple[int, ...], Any]]:
    """Collective over the members of each set only: ``(set, communicator)`` per set
    this rank belongs to, in the global order of ``sets``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The leader communicator; a set holds ranks of it (node indices).
    sets : iterable of tuple of int
        The holder sets (identical on every rank; duplicates are merged).
    failed : callable
        This rank's failure so far; a set whose members include one that failed is
        skipped by all of them.

    The communicator is freed when the caller asks for the next set. Iterate to the
    end, never ``break``: the other members of a later set wait in its creation.
    """
    for tag, members in enumerate(sorted(set(sets))):
        if comm.rank not in members:
            continue
        group = comm.group.Incl(list(members))
        try:
            sub = comm.Create_group(group, tag)
        finally:
            group.Free()
        try:
            if not any_true(sub, failed()):
                yield members, sub
        finally:
            sub.Free()
