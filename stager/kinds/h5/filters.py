"""HDF5 filter pipelines of copies: the set-up values, and what a copy must keep.

The table of filters (names, which hdf5plugin provides, which are lossy, their version
fields) and their availability are :mod:`kernels.io.h5filters`, shared with the
readers; they are re-exported here. What goes wrong with filters when a dataset is
copied, and what a user sees, is docs/hook-spec.md ("Filter pipelines", "Filters
available by default"); here, how:

* :func:`ensure_available` imports hdf5plugin the first time a dataset needs a filter
  HDF5 does not ship; one still missing is a :class:`MissingFilter`. The advice is
  ``pip install --no-deps hdf5plugin`` (it declares ``h5py``, and pip would install
  PyPI's serial h5py over the MPI build), not ``HDF5_PLUGIN_PATH`` at its plugin folder
  (HDF5 then reads, but creating a dataset fails in the filter's set-up).
* ``H5Pset_filter`` takes *user* values and the filter's ``set_local`` stores others
  (bitshuffle user ``(0, 2)`` is stored ``(0, 4, 4, 0, 2)``); passing stored values back
  doubled the prefix and the copies did not decode. :func:`setup_values` finds the user
  values whose set-up reproduces the stored ones *by trying them* on an in-memory
  dataset (about 0.1 ms a candidate: the stored values, their suffixes, their
  prefixes), so it is right for filters nobody listed here too.
* Bitshuffle, Blosc, Blosc2 and LZF record their library's version in their first two
  values; the encoded chunks do not depend on it. :func:`pipeline_difference` ignores
  exactly those fields.
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from kernels.io.h5filters import (FILTER_NAMES, HDF5PLUGIN_FILTERS, LOSSY_FILTERS,
                                   VERSION_FIELDS, ensure_available, filter_name,
                                   import_hdf5plugin)
from stager.kinds.h5.types import Filter

__all__ = ["FILTER_NAMES", "HDF5PLUGIN_FILTERS", "VERSION_FIELDS", "MissingFilter",
           "LOSSY_FILTERS", "filter_name", "lossy_filter", "ensure_available",
           "import_hdf5plugin", "missing_advice", "setup_values", "pipeline_difference",
           "stored_pipeline"]

class MissingFilter(Exception):
    """A filter this process's HDF5 can neither decode nor encode (message: what to do)."""


def missing_advice(code: int, name: str) -> str:
    """What to do about filter ``code`` missing here (a fix that works)."""
    have = import_hdf5plugin()
    what = f"HDF5 filter {code} ({name})"
    if code in HDF5PLUGIN_FILTERS and have is None:
        return (f"{what} is not available: install hdf5plugin, which provides it, on every "
                "node without replacing the MPI build of h5py: pip install --no-deps "
                "hdf5plugin (the stager imports it when a file needs it; pointing "
                "HDF5_PLUGIN_PATH at hdf5plugin's plugin folder is not enough: HDF5 can then "
                "read but not create such datasets)")
    found = f"hdf5plugin {have} is installed but does not provide it" if have else \
        "hdf5plugin does not provide it"
    return (f"{what} is not available ({found}): install an HDF5 plugin for filter {code} "
            "built for this HDF5 in a folder named by HDF5_PLUGIN_PATH on every node, or "
            "stage the whole file with a 'files' block, which copies its bytes without "
            "decoding them")


def lossy_filter(filters: Iterable[Filter]) -> Optional[Filter]:
    """The first lossy stage of a pipeline, or None. Pure.

    zfp, SZ, SZ3 and SPERR are lossy (zfp's reversible mode too is treated so:
    its mode is not readable from the values alone); scale-offset is lossy for
    floats (D- and E-scale) and for integers with a fixed number of bits.
    Re-encoding their decoded values would lose precision a second time, so
    such datasets may only move as stored chunks.
    """
    for f in filters:
        if f.code in LOSSY_FILTERS:
            return f
        if f.code == 6 and len(f.values) >= 2 and \
                (f.values[0] in (0, 1) or (f.values[0] == 2 and f.values[1] > 0)):
            return f
    return None


def stored_pipeline(dcpl: Any) -> Tuple[Filter, ...]:
    """The pipeline stored in a dataset creation property list (setup not known yet)."""
    out = []
    for i in range(dcpl.get_nfilters()):
        code, flags, values, name = dcpl.get_filter(i)
        out.append(Filter(int(code), int(flags), tuple(int(v) for v in values),
                          filter_name(int(code), name)))
    return tuple(out)


def pipeline_difference(want: Sequence[Filter], got: Sequence[Filter],
                        same_chunks: bool = True) -> Optional[str]:
    """How pipeline ``got`` differs from ``want``, or None when they are the same. Pure.

    Ids, order and flags must be equal; client values too, except the version
    fields of :data:`VERSION_FIELDS`. With ``same_chunks=False`` (the copy's
    chunks were clamped to a short selection) values that set-up derives from
    the chunk shape may differ legitimately, so only ids and flags are compared.
    """
    ids = [(f.code, f.flags) for f in want]
    if ids != [(f.code, f.flags) for f in got]:
        return (f"filters {[(f.code, f.name, f.flags) for f in got]} instead of "
                f"{[(f.code, f.name, f.flags) for f in want]}")
    if not same_chunks:
        return None
    for a, b in zip(want, got):
        skip = VERSION_FIELDS.get(a.code, 0)
        if a.values[skip:] != b.values[skip:]:
            return f"filter {a.code} ({a.name}) stores {b.values} instead of {a.values}"
    return None


def _candidates(values: Tuple[int, ...]) -> Iterable[Tuple[int, ...]]:
    n = len(values)
    seen = set()
    for cand in itertools.chain([values], (values[k:] for k in range(1, n + 1)),
                                (values[:k] for k in range(n - 1, 0, -1))):
        if cand not in seen:
            seen.add(cand)
            yield cand


class _Probe:
    """An in-memory HDF5 file (core driver, no backing store) to try set-ups in."""

    def __init__(self) -> None:
        from h5py import h5f, h5p

        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fapl_core(backing_store=False)
        self.fid = h5f.create(f"stager-probe-{id(self)}".encode(), h5f.ACC_TRUNC, fapl=fapl)
        self.n = 0

    def stored(self, tid: Any, chunks: Tuple[int, ...], pipeline: Sequence[Tuple[int, int,
               Tuple[int, ...]]]) -> Optional[Tuple[Filter, ...]]:
        """The pipeline HDF5 stores for ``pipeline`` (code, flags, setup), or None if refused."""
        from h5py import h5d, h5p, h5s

        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk(tuple(chunks))
        for code, flags, setup in pipeline:
            dcpl.set_filter(code, flags, setup)
        self.n += 1
        try:
            ds = h5d.create(self.fid, f"p{self.n}".encode(), tid, h5s.create_simple(chunks),
                            dcpl=dcpl)
        except Exception:  # the filter's can_apply/set_local refused these values
            return None
        try:
            return stored_pipeline(ds.get_create_plist())
        finally:
            ds.close()

    def close(self) -> None:
        self.fid.close()


_cache: Dict[Tuple[bytes, Tuple[int, ...], Tuple[Filter, ...]], Tuple[Filter, ...]] = {}


def setup_values(h5type: bytes, chunks: Tuple[int, ...],
                 filters: Tuple[Filter, ...]) -> Tuple[Filter, ...]:
    """``filters`` with ``setup`` filled: the values whose set-up stores ``values`` again.

    Parameters
    ----------
    h5type : bytes
        ``H5Tencode`` of the dataset's file type (set-up depends on it).
    chunks : tuple
        The chunk shape (set-up may depend on it).
    filters : tuple of Filter
        The stored pipeline, in order; every filter must be available here.

    Raises
    ------
    ValueError
        No candidate reproduces a filter's stored values (the message names it).
    """
    key = (h5type, tuple(chunks), filters)
    if key in _cache:
        return _cache[key]
    from h5py import h5t

    tid = h5t.decode(h5type)
    probe = _Probe()
    try:
        done: List[Filter] = []
        for i, flt in enumerate(filters):
            chosen = None
            for cand in _candidates(flt.values):
                got = probe.stored(tid, chunks, [(f.code, f.flags, f.setup) for f in done] +
                                   [(flt.code, flt.flags, cand)])
                if got is not None and len(got) == i + 1 and \
                        pipeline_difference(filters[i:i + 1], got[i:i + 1]) is None:
                    chosen = cand
                    break
            if chosen is None:
                raise ValueError(f"HDF5 filter {flt.code} ({flt.name}) stores parameters "
                                 f"{flt.values} that its set-up here does not reproduce from "
                                 "any of them, so a copy could not be decoded")
            done.append(Filter(flt.code, flt.flags, flt.values, flt.name, chosen))
    finally:
        probe.close()
    out = tuple(done)
    _cache[key] = out
    return out
