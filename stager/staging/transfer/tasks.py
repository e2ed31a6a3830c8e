"""Pure arithmetic of a transfer: files -> tasks -> pieces, with every count < 2**31.

A *task* is what one collective round moves: either one chunk of a large file
or a batch of whole small files. It is laid out in one buffer of at most
``chunk_size`` bytes and cut into *pieces*, each read by one leader (its
``owner``). The pieces a leader owns are contiguous in the buffer, so one
``Allgatherv`` (stripe) or ``Bcast`` (bcast) completes the buffer on every
leader.

* large file (``size >= small_file_threshold``): one task per chunk; the
  chunk is split into ``n`` near-equal stripes, stripe ``r`` owned by leader
  ``r`` (``stripe``), or one piece owned by leader 0 (``bcast``);
* small files: consecutive files are packed into batches of at most
  ``chunk_size`` bytes and ``max_batch_files`` files; inside a batch the files
  are split among leaders into contiguous runs of near-equal bytes, so each
  small file is opened by exactly one rank in the whole job.

Nothing here imports MPI; the tests check the invariants directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

__all__ = ["MAX_COUNT", "Piece", "Task", "split_even", "chunk_ranges", "owners_by_bytes",
           "make_tasks"]

#: Largest count or displacement passed to MPI (int32).
MAX_COUNT = 2**31 - 1


@dataclass(frozen=True)
class Piece:
    """``length`` bytes of file ``file`` at ``offset``, read by leader ``owner``
    into the task buffer at ``buf_offset``."""

    file: int
    offset: int
    length: int
    owner: int
    buf_offset: int


@dataclass(frozen=True)
class Task:
    """One collective round: its pieces (in buffer order) and per-leader layout."""

    pieces: Tuple[Piece, ...]
    nbytes: int
    counts: Tuple[int, ...]
    displs: Tuple[int, ...]


def split_even(length: int, n: int) -> List[Tuple[int, int]]:
    """``(start, stop)`` of ``n`` contiguous near-equal parts of ``range(length)``."""
    return [(length * r // n, length * (r + 1) // n) for r in range(n)]


def chunk_ranges(size: int, chunk_size: int) -> List[Tuple[int, int]]:
    """``(offset, length)`` of each chunk of a file of ``size`` bytes (one empty chunk if 0)."""
    if size == 0:
        return [(0, 0)]
    return [(off, min(chunk_size, size - off)) for off in range(0, size, chunk_size)]


def owners_by_bytes(sizes: Sequence[int], n: int) -> List[int]:
    """Owner of each file: contiguous runs, monotone, near-equal bytes per owner.

    A file goes to the owner whose share of the batch contains the file's
    midpoint, which keeps runs contiguous and balances bytes; batches of only
    empty files are split by count.
    """
    total = sum(sizes)
    if total == 0:
        return [i * n // max(len(sizes), 1) for i in range(len(sizes))]
    owners, pos = [], 0
    for s in sizes:
        mid2 = 2 * pos + s  # twice the midpoint, to stay in integers
        owners.append(min(n - 1, (mid2 * n) // (2 * total)))
        pos += s
    return owners


def _layout(pieces: List[Piece], n: int) -> Task:
    counts = [0] * n
    displs = [0] * n
    seen = [False] * n
    for p in pieces:
        if not seen[p.owner]:
            displs[p.owner] = p.buf_offset
            seen[p.owner] = True
        counts[p.owner] += p.length
    nbytes = sum(p.length for p in pieces)
    # owners with nothing to send still need a displacement inside the buffer
    for r in range(n):
        if not seen[r]:
            displs[r] = min(nbytes, displs[r - 1] + counts[r - 1]) if r else 0
    assert nbytes <= MAX_COUNT
    return Task(tuple(pieces), nbytes, tuple(counts), tuple(displs))


def make_tasks(sizes: Sequence[int], n: int, chunk_size: int, small_file_threshold: int,
               max_batch_files: int = 8192, single_reader: bool = False) -> List[Task]:
    """Cut files of ``sizes`` (in order) into tasks for ``n`` leaders.

    Parameters
    ----------
    sizes : sequence of int
        File sizes, by file index.
    n : int
        Number of leaders.
    chunk_size : int
        Largest task buffer, ``1 <= chunk_size <= MAX_COUNT``.
    small_file_threshold : int
        Files strictly smaller are batched.
    max_batch_files : int
        Cap on files per batch (bounds the per-batch status message).
    single_reader : bool
        Leader 0 reads every piece (``bcast``) instead of stripes.

    Returns
    -------
    list of Task
        Large-file chunks and small-file batches in file order.
    """
    if not 1 <= chunk_size <= MAX_COUNT:
        raise ValueError(f"chunk_size must be in 1..{MAX_COUNT}, got {chunk_size}")
    if n < 1:
        raise ValueError("need at least one leader")
    tasks: List[Task] = []
    batch: List[int] = []
    batch_bytes = 0

    def flush() -> None:
        nonlocal batch, batch_bytes
        if not batch:
            return
        own = [0] * len(batch) if single_reader else owners_by_bytes([sizes[i] for i in batch], n)
        pieces, off = [], 0
        for i, o in zip(batch, own):
            pieces.append(Piece(i, 0, sizes[i], o, off))
            off += sizes[i]
        tasks.append(_layout(pieces, n))
        batch, batch_bytes = [], 0

    for i, size in enumerate(sizes):
        if size < small_file_threshold and size <= chunk_size:
            if batch and (batch_bytes + size > chunk_size or len(batch) >= max_batch_files):
                flush()
            batch.append(i)
            batch_bytes += size
            continue
        flush()
        for off, length in chunk_ranges(size, chunk_size):
            if single_reader:
                pieces = [Piece(i, off, length, 0, 0)]
            else:
                pieces = [Piece(i, off + a, b - a, r, a)
                          for r, (a, b) in enumerate(split_even(length, n)) if b > a]
                if not pieces:
                    pieces = [Piece(i, off, 0, 0, 0)]
            tasks.append(_layout(pieces, n))
    flush()
    return tasks
