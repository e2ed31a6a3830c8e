"""External links and virtual datasets: where their files are, and what the copy holds.

An Eiger ``*_master.h5`` has external links to its ``*_data_NNNNNN.h5`` files; an NXmx
master may hold ``/entry/data/data`` as a virtual dataset (VDS) over several. Both are
followed on the planning rank, and the copy holds the data as a *regular* dataset at the
link's path, so each node's file is self-contained (docs/hook-spec.md, "Links"). A
missing target is refused at planning: for a VDS it is the only guard, as HDF5 silently
returns the fill value for frames whose file is missing.

:func:`find_file` looks for a relative target where HDF5 1.10-1.14 does
(``HDF5_EXT_PREFIX`` or ``HDF5_VDS_PREFIX``, the linking file's directory, the working
directory), so the stager reads what HDF5 would. A VDS has no stored chunks of its own:
its values are read through HDF5's VDS machinery and written through the copy's filters.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from stager.kinds.h5.filters import stored_pipeline
from stager.kinds.h5.types import Filter

__all__ = ["find_file", "LinkedFiles", "VdsSource", "vds_sources", "vds_storage"]


def find_file(name: str, holder: str, env_var: str) -> Tuple[Optional[str], List[str]]:
    """Where HDF5 finds file ``name`` named by a link in file ``holder``. Local.

    Returns
    -------
    (path or None, places looked)
    """
    looked: List[str] = []
    if os.path.isabs(name):
        looked.append(name)
        if os.path.isfile(name):
            return name, looked
        name = os.path.basename(name)  # HDF5 then tries the name without its folders
    prefixes = [p for p in os.environ.get(env_var, "").split(os.pathsep) if p]
    holder_dir = os.path.dirname(os.path.abspath(holder))
    for base in prefixes + [holder_dir, os.getcwd()]:
        cand = os.path.normpath(os.path.join(base, name))
        if cand not in looked:
            looked.append(cand)
        if os.path.isfile(cand):
            return cand, looked
    return None, looked


@dataclass
class LinkedFiles:
    """Files opened while planning one source (external targets, VDS sources), by path."""

    handles: Dict[str, Any] = field(default_factory=dict)

    def open(self, path: str) -> Any:
        import h5py

        f = self.handles.get(path)
        if f is None:
            f = self.handles[path] = h5py.File(path, "r")
        return f

    def close(self) -> None:
        for f in self.handles.values():
            f.close()
        self.handles.clear()


@dataclass(frozen=True)
class VdsSource:
    """One mapping of a virtual dataset: the file and dataset it names, and where they are."""

    file: str                    # as written in the mapping ("." = the VDS's own file)
    dataset: str
    path: Optional[str]          # the file found, or None
    looked: Tuple[str, ...]


def vds_sources(dcpl: Any, holder: str) -> List[VdsSource]:
    """The distinct source (file, dataset) pairs of a VDS's creation property list. Local."""
    out: Dict[Tuple[str, str], VdsSource] = {}
    for i in range(dcpl.get_virtual_count()):
        fname = dcpl.get_virtual_filename(i)
        dname = dcpl.get_virtual_dsetname(i)
        if (fname, dname) in out:
            continue
        if fname == ".":
            out[(fname, dname)] = VdsSource(fname, dname, os.path.abspath(holder), ())
            continue
        path, looked = find_file(fname, holder, "HDF5_VDS_PREFIX")
        out[(fname, dname)] = VdsSource(fname, dname, path, tuple(looked))
    return list(out.values())


def vds_storage(sources: List[Any], shape: Tuple[int, ...],
                maxshape: Tuple[Optional[int], ...]) -> Tuple[str, Optional[Tuple[int, ...]],
                                                            Tuple[Filter, ...]]:
    """``(layout, chunks, stored filters)`` of a VDS's copy, from its source datasets. Pure
    but for reading the sources' creation properties (see the module docstring).

    Parameters
    ----------
    sources : list of h5py.Dataset
        The VDS's source datasets, opened.
    shape, maxshape : tuple
        The VDS's.
    """
    from h5py import h5d

    kinds = set()
    for ds in sources:
        dcpl = ds.id.get_create_plist()
        chunked = dcpl.get_layout() == h5d.CHUNKED
        kinds.add((tuple(dcpl.get_chunk()) if chunked else None,
                   stored_pipeline(dcpl) if chunked else ()))
    if len(kinds) == 1:
        chunks, filters = kinds.pop()
        if chunks is not None and len(chunks) == len(shape):
            return "chunked", chunks, filters
    if shape and any(m is None for m in maxshape):
        return "chunked", (1,) + tuple(max(n, 1) for n in shape[1:]), ()
    return "contiguous", None, ()
