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

__all__ = ["FILTER_NAMES", "HDF5PLUGIN_FILTERS", "LOSSY_FILTERS", "VERSION_FIELDS",
           "filter_name", "import_hdf5plugin", "ensure_available", "needed_filters",
           "missing_filters", "require_filters"]

# The one table of HDF5 filters (the stager's HDF5 staging uses it too).
#: The HDF Group's registered filter identifiers for the filters detector files use.
FILTER_NAMES = {
    1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
    6: "scaleoffset", 305: "LZO", 307: "bzip2", 32000: "LZF", 32001: "Blosc",
    32004: "LZ4", 32008: "bitshuffle", 32013: "zfp", 32015: "Zstandard", 32017: "SZ",
    32018: "FCIDECOMP", 32024: "SZ3", 32026: "Blosc2", 32028: "SPERR", 32033: "HTJ2K",
}
#: Filters the hdf5plugin package provides (7.x).
HDF5PLUGIN_FILTERS = frozenset({307, 32001, 32004, 32008, 32013, 32015, 32017, 32018, 32024,
                                32026, 32028, 32033})
#: Lossy compressors (registered ids): values they decode differ from what was encoded.
LOSSY_FILTERS = frozenset({32013, 32017, 32024, 32028})
#: Leading client values that record the set-up library's version, per filter id.
VERSION_FIELDS = {32000: 2, 32001: 2, 32008: 2, 32026: 2}


def filter_name(code: int, stored=b"") -> str:
    """A readable name: the registry's, else the name stored in the file, else '?'."""
    if code in FILTER_NAMES:
        return FILTER_NAMES[code]
    if isinstance(stored, bytes):
        stored = stored.decode(errors="replace")
    return str(stored or "?")


def import_hdf5plugin():
    """Import hdf5plugin once (it registers its filters with HDF5); its version, or None."""
    try:
        import hdf5plugin
    except ImportError:
        return None
    return str(getattr(hdf5plugin, "version", "?"))


def ensure_available(codes) -> list:
    """Make filters ``codes`` available, importing hdf5plugin if one is missing.

    Returns the codes still unavailable afterwards (empty when all are there).
    """
    from h5py import h5z

    missing = [c for c in dict.fromkeys(codes) if not h5z.filter_avail(c)]
    if missing:
        import_hdf5plugin()
        missing = [c for c in missing if not h5z.filter_avail(c)]
    return missing


def needed_filters(dset) -> list:
    """``[(id, name)]`` of the filter pipeline of an h5py dataset (empty if unchunked)."""
    plist = dset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        fid, _flags, _values, name = plist.get_filter(i)
        out.append((int(fid), filter_name(int(fid), name)))
    return out


def missing_filters(dset) -> list:
    """Filters of ``dset`` this process cannot decode, after trying hdf5plugin."""
    names = dict(needed_filters(dset))
    return [(fid, names[fid]) for fid in ensure_available(names)]


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
    names = ", ".join(f"{fid} ({name})" for fid, name in missing)
    if import_hdf5plugin() is None:
        fix = ("install hdf5plugin without replacing the MPI h5py: pip install --no-deps "
               "hdf5plugin (it is imported automatically when needed; HDF5_PLUGIN_PATH="
               "<hdf5plugin>/plugins also works for reading)")
    else:
        fix = ("no installed package provides it (hdf5plugin is installed but has no such "
               "filter): install the filter's HDF5 plugin into a folder named by "
               "HDF5_PLUGIN_PATH")
    raise ReaderError(f"{where} needs HDF5 filter {names}, which this HDF5 cannot decode; {fix}")
