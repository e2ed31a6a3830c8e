"""What the NF- and FF-HEDM workflows share: per-worker caches, tables.

* **Node-local paths.** Staged inputs and node-local results live under
  destinations holding ``%n`` (the node name, as in hook specs). A task
  resolves ``%n`` for the node it runs on with
  :func:`workflows.node.on_this_node`: the runtime knows where a task runs,
  the application does not need to.
* **Task-level caching** (the paper's trick to cut input time to zero after
  the first task): :func:`cached` keeps what a worker process already read --
  the background image, the dark, opened readers -- keyed by ``(path, mtime,
  size)``, so a changed file is read again and an unchanged one never twice.
* **Tables.** Per-frame results are dicts of structured arrays;
  :func:`merge_tables` concatenates two (the tree reduction's merge).
"""
from __future__ import annotations

import collections
import os
import threading
from contextlib import contextmanager
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Tuple

import numpy as np

from analyses.sources.frames import is_series
from workflows.errors import WorkflowError

__all__ = ["output_file", "cached", "is_series", "merge_tables", "split_rows",
           "as_records"]


@contextmanager
def output_file(path: str, binary: bool = False) -> Iterator[IO[Any]]:
    """An open file (text as written, or ``binary``) replacing ``path`` when the block ends
    without an error: :class:`core.localfs.AtomicFile`'s (an unpredictable name beside
    ``path`` made ``O_EXCL|O_NOFOLLOW``, renamed into place; a link at ``path`` refused), so
    readers never see half an output and an error leaves ``path`` as it was. The mode is a
    plain ``open``'s (``0666`` less the umask, which localfs read at its import)."""
    from core import localfs

    with localfs.AtomicFile(os.path.abspath(path), mode=0o666 & ~localfs._UMASK,
                            hash=False) as af:
        assert af.fd is not None
        fd = os.dup(af.fd)
        fh: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="")
        with fh:
            yield fh
        af.commit()


# -- per-worker cache ----------------------------------------------------------
_CACHE: collections.OrderedDict[Tuple, Any] = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 8


def cached(path: str, load: Callable[[str], Any], kind: str = "") -> Tuple[Any, bool]:
    """``load(path)``, or what this process loaded before for the same unchanged file.

    The key is ``(kind, realpath, st_mtime_ns, st_size)``: a file replaced or
    rewritten is loaded again. The least recently used of more than a few
    entries is dropped (a worker needs one background or dark at a time).

    Returns
    -------
    (value, hit) : the loaded object and whether it came from the cache.
    """
    st = os.stat(path)
    key = (kind, os.path.realpath(path), st.st_mtime_ns, st.st_size)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key], True
    value = load(path)
    with _CACHE_LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return value, False


# -- tables ---------------------------------------------------------------------
def merge_tables(a: Mapping[str, Any], b: Mapping[str, Any]) -> Dict[str, Any]:
    """Concatenate two result tables key by key (arrays by ``np.concatenate``, lists by ``+``).

    Associative and order-keeping, so an ordered ``reduce_tree`` gives the
    frames in order on every executor.
    """
    if a.keys() != b.keys():
        raise WorkflowError(f"cannot merge tables with keys {sorted(a)} and {sorted(b)}")
    out: Dict[str, Any] = {}
    for k in a:
        x, y = a[k], b[k]
        out[k] = np.concatenate([x, y]) if isinstance(x, np.ndarray) else list(x) + list(y)
    return out


def split_rows(n_rows: int, parts: int) -> List[Tuple[int, int]]:
    """``parts`` contiguous, nearly equal row bands covering ``0..n_rows`` (no empty band)."""
    parts = max(1, min(parts, n_rows))
    edges = [n_rows * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


def as_records(rows: List[Tuple], dtype: np.dtype) -> np.ndarray:
    """A structured array of ``dtype`` from a list of tuples (empty list -> empty array)."""
    return np.array(rows, dtype=dtype) if rows else np.empty(0, dtype=dtype)
