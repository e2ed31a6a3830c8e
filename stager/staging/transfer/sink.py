"""The writing side of a transfer, on each leader: pieces in, whole files out.

Pieces of a file arrive in offset order. The first opens an
:class:`~core.localfs.AtomicFile` at the node's destination; each piece is
checked against the digest its reader computed when it read it (so a corrupt
exchange is caught by every writer against what it writes); the last piece
commits the file (mode, mtime, atomic rename) and records the whole-file
checksum, computed incrementally over the verified bytes. Files this node
already has (resume) are passed over. :meth:`abort` removes every temporary
file still open.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from core import checksum
from core.errors import Interrupted
from stager.errors import TransferError
from core.localfs import AtomicFile
from stager.planning.plan import FileEntry
from stager.staging.report import Progress

__all__ = ["Sink"]


class Sink:
    """Writes pieces to this node's destinations.

    Parameters
    ----------
    jobs : sequence of FileEntry
        The planned files (source identity, size, mode, mtime).
    dests : sequence of str or None
        Concrete destination of each job on this node; ``None``: this node
        already has the file (skip).
    progress : Progress, optional
    fsync : bool

    Notes
    -----
    Which leader computes the whole-file checksum of a file that arrives in
    several verified pieces is set by :meth:`share_checksums`: by default
    every leader does (``readall``, ``naive``); the piece exchange makes leader
    ``i % n`` the only one, which saves each writer a full extra pass over
    the data (hashing was a quarter of a stripe leader's time here), and then
    hands the digests to the others with :meth:`take_checksums`.
    """

    def __init__(self, jobs: Sequence[FileEntry], dests: Sequence[Optional[str]],
                 progress: Optional[Progress] = None, fsync: bool = False) -> None:
        self.jobs = jobs
        self.dests = dests
        self.progress = progress
        self.fsync = fsync
        self.open: Dict[int, AtomicFile] = {}
        self.done: Dict[int, str] = {}   # job index -> hex checksum of committed copies
        self.pending: List[int] = []     # committed, checksum computed by another leader
        self.hashers: Dict[int, checksum.Hasher] = {}  # reference hashes of files not written
        self.digests: Dict[int, str] = {}  # checksums this leader computed as the reference
        self.bytes_written = 0
        self._me, self._n = 0, 1

    def share_checksums(self, me: int, n: int) -> None:
        """Leader ``me`` of ``n`` hashes whole multi-piece files ``i`` with ``i % n == me``."""
        self._me, self._n = me, n

    def _reference(self, i: int) -> bool:
        return i % self._n == self._me

    def take_checksums(self, digests: Dict[int, str]) -> None:
        """Fill in checksums of committed files computed by their reference leaders."""
        for i in self.pending:
            if i in digests:
                self.done[i] = digests[i]
        self.pending.clear()

    def write(self, i: int, offset: int, data: memoryview,
              source_digest: Optional[bytes] = None, own: bool = False) -> None:
        """Write one piece of file ``i``; commit the file when it is complete.

        ``source_digest`` is the digest its reader computed; the piece is
        checked against it unless ``own`` (this rank read it into this very
        buffer and computed that digest itself a moment ago).
        """
        dest = self.dests[i]
        size = self.jobs[i].size
        whole = offset == 0 and len(data) == size and source_digest is not None
        last = offset + len(data) == size
        if dest is None:
            if not whole and self._reference(i):
                # not written here, but this leader still owes the others the checksum
                h = self.hashers.setdefault(i, checksum.new())
                h.update(data)
                if last:
                    self.digests[i] = self.hashers.pop(i).hexdigest()
            return
        if source_digest is not None and not own and checksum.digest(data) != source_digest:
            raise TransferError(
                f"checksum mismatch writing {dest} (bytes {offset}..{offset + len(data)} of "
                f"{self.jobs[i].source}): the data changed between read and write; stage again")
        f = self.open.get(i)
        if f is None:
            if offset != 0:
                raise TransferError(f"internal error: piece at {offset} before start of {dest}")
            job = self.jobs[i]
            try:
                # a file that is one verified piece already has its checksum: no second pass
                f = AtomicFile(dest, mode=job.mode, mtime_ns=job.mtime_ns, fsync=self.fsync,
                               hash=not whole and self._reference(i), precheck=False)
            except OSError as e:
                raise TransferError(f"cannot create {dest}: {e.strerror}") from e
            self.open[i] = f
        if offset != f.nbytes:
            raise TransferError(f"internal error: piece of {dest} out of order")
        try:
            f.write(data)
        except OSError as e:
            raise TransferError(f"writing {dest} failed: {e.strerror}") from e
        self.bytes_written += len(data)
        if self.progress is not None:
            self.progress.update(len(data))
        if last:
            del self.open[i]
            if whole:
                digest: Optional[str] = source_digest.hex()  # type: ignore[union-attr]
            elif f.hasher is not None:
                digest = self.digests[i] = f.hexdigest()
            else:
                digest = None  # the reference leader sends it (take_checksums)
            committed = False
            try:
                f.commit(checksum=digest)  # journaled with it before the rename
                committed = True
            except Interrupted:
                committed = True  # raised once the copy was in place and recorded
                raise
            except OSError as e:
                f.abort()
                raise TransferError(f"finishing {dest} failed: {e.strerror}") from e
            finally:
                if committed and digest is not None:
                    self.done[i] = digest
                elif committed:
                    self.pending.append(i)

    def abort(self) -> List[str]:
        """Remove every unfinished temporary file; return their destinations."""
        names = []
        for f in self.open.values():
            f.abort()
            names.append(f.dest)
        self.open.clear()
        return names
