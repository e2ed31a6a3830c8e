"""HDF5 filters a dataset needs, and a ReaderError that names a missing one and a fix that works.

Detector files are compressed with filters HDF5 does not ship (Eiger:
bitshuffle+LZ4, id 32008).  hdf5plugin provides them; it is imported only when
a dataset needs a filter this HDF5 lacks.  Install it without letting pip
replace Debian's MPI build of h5py: ``pip install --no-deps hdf5plugin``
(it declares ``h5py>=3``).  ``HDF5_PLUGIN_PATH`` pointed at hdf5plugin's
``plugins`` folder also works for *reading* (not for creating datasets).
"""
from __future__ import annotations

from ..errors import ReaderError

__all__ = ["FILTER_NAMES", "needed_filters", "missing_filters", "require_filters"]

# The HDF Group's registered filter identifiers for the filters detector files use.
FILTER_NAMES = {
    1: "deflate (gzip)", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
    6: "scaleoffset", 305: "LZO", 307: "bzip2", 32000: "LZF", 32001: "Blosc",
    32004: "LZ4", 32008: "bitshuffle", 32013: "zfp", 32015: "Zstandard", 32017: "SZ",
    32018: "FCIDECOMP", 32024: "SZ3", 32026: "Blosc2", 32028: "SPERR",
}


def needed_filters(dset) -> list:
    """``[(id, name)]`` of the filter pipeline of an h5py dataset (empty if unchunked)."""
    plist = dset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        fid, _flags, _values, name = plist.get_filter(i)
        out.append((int(fid), FILTER_NAMES.get(int(fid)) or name.decode(errors="replace") or "?"))
    return out


def _hdf5plugin_filters() -> dict | None:
    """hdf5plugin's {id: name} after importing it (registers its filters), None if absent."""
    try:
        import hdf5plugin
    except ImportError:
        return None
    return {fid: name for name, fid in hdf5plugin.FILTERS.items()}


def missing_filters(dset) -> list:
    """Filters of ``dset`` this process cannot decode, after trying hdf5plugin."""
    from h5py import h5z

    missing = [(fid, name) for fid, name in needed_filters(dset) if not h5z.filter_avail(fid)]
    if missing and _hdf5plugin_filters() is not None:
        missing = [(fid, name) for fid, name in missing if not h5z.filter_avail(fid)]
    return missing


def require_filters(dset, where: str) -> None:
    """Raise a ReaderError naming each filter of ``dset`` that cannot be decoded here.

    Raises
    ------
    ReaderError
        With the filter id and name, and a fix: ``pip install --no-deps hdf5plugin``
        when hdf5plugin provides the filter, or installing the filter's HDF5 plugin.
    """
    missing = missing_filters(dset)
    if not missing:
        return
    plugin = _hdf5plugin_filters()
    names = ", ".join(f"{fid} ({name})" for fid, name in missing)
    if plugin is None:
        fix = ("install hdf5plugin without replacing the MPI h5py: pip install --no-deps "
               "hdf5plugin (it is imported automatically when needed; HDF5_PLUGIN_PATH="
               "<hdf5plugin>/plugins also works for reading)")
    else:
        fix = ("no installed package provides it (hdf5plugin is installed but has no such "
               "filter): install the filter's HDF5 plugin into a folder named by "
               "HDF5_PLUGIN_PATH")
    raise ReaderError(f"{where} needs HDF5 filter {names}, which this HDF5 cannot decode; {fix}")
