"""Results to HDF5: one dataset from per-rank arrays (collective), or from rank 0.

:func:`write_collective` is the parallel path: every rank holds some rows of a
result; one ``allgather`` of the row counts gives each rank its offset, the
file is opened with h5py's ``driver='mpio'`` and every rank writes its rows
with one collective write. A rank with no rows still takes part (h5py's
``dset[a:a] = x`` returns without calling ``H5Dwrite``, which would hang the
others, so the write goes through the low-level ``DatasetID.write`` with an
empty selection).

:func:`write_gathered` is the plain path: rows gathered to rank 0, written
with serial h5py (no parallel HDF5 needed), e.g. for results already on the
root of a workflow.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from core.mpi.agree import agreed

from .errors import ResultsError

__all__ = ["write_collective", "write_gathered", "write_arrays", "row_offsets"]


def row_offsets(counts: Sequence[int]) -> np.ndarray:
    """Start row of each rank given every rank's row count (exclusive prefix sum)."""
    arr = np.asarray(counts, dtype=np.int64)
    if (arr < 0).any():
        raise ResultsError(f"negative row counts: {arr.tolist()}")
    return np.concatenate([[0], np.cumsum(arr)[:-1]]).astype(np.int64)


def _agree_layout(comm: Any, local: Any, path: str, name: str):
    """Collective over `comm`: every rank must call. Check every rank's rows fit together.

    Each rank converts its rows and describes them (rows, trailing shape, dtype)
    inside the agreement idiom -- a conversion that fails on one rank (a ragged
    list) fails every rank instead of leaving the others in the ``allgather``;
    then every rank checks the same gathered list. Returns
    ``(counts, row_shape, dtype, this rank's array)``.
    """
    arr = None
    mine: Any = None
    with agreed(comm, f"writing {path}:{name}", base=ResultsError, default=ResultsError):
        if np.ndim(local) == 0:  # before ascontiguousarray, which makes a scalar 1-d
            mine = "scalar"
        else:
            arr = np.ascontiguousarray(local)
            mine = (arr.shape[0], tuple(arr.shape[1:]), arr.dtype.str)
    gathered = comm.allgather(mine)
    scalars = [r for r, d in enumerate(gathered) if d == "scalar"]
    if scalars:
        raise ResultsError(f"{path}:{name}: results must be arrays of rows, got a scalar on "
                           f"rank(s) {scalars}")
    shapes = {d[1] for d in gathered}
    dtypes = {d[2] for d in gathered}
    if len(shapes) > 1 or len(dtypes) > 1:
        raise ResultsError(
            f"{path}:{name}: ranks disagree on the result layout (trailing shape, dtype) "
            f"{[(d[1], d[2]) for d in gathered]}; give every rank arrays of one dtype and "
            "row shape (an empty rank still needs the right shape, e.g. np.empty((0, 5)))"
        )
    counts = [d[0] for d in gathered]
    return counts, gathered[0][1], np.dtype(gathered[0][2]), arr


def write_collective(comm: Any, path: str, name: str, local: Any, *,
                     attrs: Optional[Mapping[str, Any]] = None, mode: str = "a") -> int:
    """Collective over `comm`: every rank must call. Write per-rank rows as one dataset.

    Rank ``r``'s rows land after the rows of ranks ``0..r-1``.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
    path : str
        HDF5 file (the same path on every rank, on a filesystem they share).
    name : str
        Dataset name (intermediate groups are made); must not exist yet.
    local : array_like
        This rank's rows, shape ``(n_r, *row_shape)``; ``n_r`` may be 0.
    attrs : mapping, optional
        Attributes set on the dataset (by rank 0's values; all ranks pass them).
    mode : str
        ``"a"`` (default: add to the file) or ``"w"`` (truncate).

    Returns
    -------
    int
        Total number of rows written.

    Raises
    ------
    ResultsError
        On every rank, if ranks disagree on dtype or row shape, or h5py is not
        built with MPI (then use :func:`write_gathered`).
    """
    import h5py
    from h5py import h5s

    if mode not in ("a", "w"):
        raise ResultsError(f"mode must be 'a' or 'w', got {mode!r}")
    if not h5py.get_config().mpi:
        raise ResultsError(
            "h5py is not built with MPI here (or not under mpirun): parallel HDF5 writes "
            "need Debian's python3-h5py-mpi run under mpirun; use write_gathered instead"
        )
    counts, row_shape, dtype, local = _agree_layout(comm, local, path, name)
    offset = int(row_offsets(counts)[comm.rank])
    total = int(sum(counts))
    shape = (total,) + row_shape
    with h5py.File(path, mode, driver="mpio", comm=comm) as f:
        # Structure and metadata changes are collective in parallel HDF5:
        # every rank creates the dataset and sets the attributes.
        dset = f.create_dataset(name, shape=shape, dtype=dtype)
        for key, value in (attrs or {}).items():
            dset.attrs[key] = value
        if total:
            n = local.shape[0]
            fspace = dset.id.get_space()
            if n:
                fspace.select_hyperslab((offset,) + (0,) * len(row_shape), (n,) + row_shape)
                mspace = h5s.create_simple(local.shape)
            else:
                fspace.select_none()
                mspace = h5s.create_simple((1,) + row_shape)
                mspace.select_none()
                local = np.zeros((1,) + row_shape, dtype=dtype)
            with dset.collective:
                dset.id.write(mspace, fspace, local.astype(dtype, copy=False), dxpl=dset._dxpl)
    return total


def write_gathered(
    comm: Any, path: str, name: str, local: Any, *, attrs: Optional[Mapping[str, Any]] = None,
    root: int = 0, mode: str = "a",
) -> int:
    """Collective over `comm`: every rank must call. Gather rows to ``root``, which writes them.

    Same layout and checks as :func:`write_collective`, with serial h5py on
    ``root`` only (works without parallel HDF5; ``comm=None`` means "just
    this process"). Returns the total number of rows on every rank.
    """
    if comm is None:
        if np.ndim(local) == 0:  # before ascontiguousarray, which makes a scalar 1-d
            raise ResultsError(f"{path}:{name}: results must be arrays of rows, got a scalar")
        local = np.ascontiguousarray(local)
        write_arrays(path, {name: local}, attrs={name: dict(attrs or {})}, mode=mode)
        return int(local.shape[0])
    counts, row_shape, dtype, local = _agree_layout(comm, local, path, name)
    parts = comm.gather(local, root=root)
    with agreed(comm, f"writing {path}:{name}", base=ResultsError, default=ResultsError):
        if comm.rank == root:
            rows = np.concatenate([p.astype(dtype, copy=False) for p in parts], axis=0)
            write_arrays(path, {name: rows}, attrs={name: dict(attrs or {})}, mode=mode)
    return int(sum(counts))


def write_arrays(path: str, arrays: Mapping[str, Any], *,
                 attrs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 file_attrs: Optional[Mapping[str, Any]] = None, mode: str = "a") -> str:
    """Write named arrays with serial h5py, atomically (temp file, then rename) for ``mode='w'``.

    Parameters
    ----------
    path : str
    arrays : mapping of dataset name to array
    attrs : mapping of dataset name to its attributes, optional
    file_attrs : attributes of the root group, optional
    mode : ``"w"`` (new file, replaced atomically) or ``"a"`` (add datasets).

    Returns
    -------
    str
        ``path``.
    """
    import h5py

    if mode not in ("a", "w"):
        raise ResultsError(f"mode must be 'a' or 'w', got {mode!r}")
    target = path + ".tmp" if mode == "w" else path
    try:
        with h5py.File(target, mode) as f:
            for key, value in arrays.items():
                dset = f.create_dataset(key, data=np.asarray(value))
                for k, v in ((attrs or {}).get(key) or {}).items():
                    dset.attrs[k] = v
            for k, v in (file_attrs or {}).items():
                f.attrs[k] = v
        if mode == "w":
            os.replace(target, path)
    except Exception as exc:
        if mode == "w":
            with contextlib.suppress(OSError):
                os.unlink(target)
        raise ResultsError(f"cannot write {path}: {type(exc).__name__}: {exc}") from exc
    return path
