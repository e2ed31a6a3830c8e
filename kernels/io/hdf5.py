"""HDF5/NeXus frame stacks (h5py): NXmx and Eiger masters, VDS, any frame axis.

Which dataset and which axis are decided by :mod:`kernels.io.nexus`; filters by
:mod:`kernels.io.h5filters`.  Before the first frame is read, everything that
would otherwise fail late or silently is checked:

* an external link (Eiger ``data_NNNNNN``) whose target file is missing;
* a virtual dataset whose source file is missing -- HDF5 returns the fill value
  for those frames without an error, so this check is the only guard;
* a filter this HDF5 cannot decode (after trying hdf5plugin);
* a dtype that is not a frame dtype, a null dataspace, zero frames.

An Eiger master's ``data_NNNNNN`` parts are read as one stack, in order.  HDF5
is opened with the default (serial) driver, which Debian's MPI build of h5py
also supports; no MPI here.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import ReaderError
from .base import FrameSource
from .h5filters import require_filters
from .nexus import _is_nxmx, find_signal, frame_axis

__all__ = ["HDF5Stack"]


def _source_file(fname: str, holder: str) -> str | None:
    """Where HDF5 finds a VDS source / external-link target named ``fname`` from file
    ``holder``: absolute, ``HDF5_VDS_PREFIX``/``HDF5_EXT_PREFIX``, the holder's folder,
    the working directory; None if nowhere."""
    if os.path.isabs(fname):
        return fname if os.path.exists(fname) else None
    prefixes = [os.environ.get(v) for v in ("HDF5_VDS_PREFIX", "HDF5_EXT_PREFIX")]
    for base in [p for p in prefixes if p] + [os.path.dirname(os.path.abspath(holder)), "."]:
        cand = os.path.join(base, fname)
        if os.path.exists(cand):
            return cand
    return None


class HDF5Stack(FrameSource):
    """Frames of an HDF5 dataset (2-D: one frame; 3-D: a stack along ``frame_axis``).

    Parameters
    ----------
    path : str
    dataset : str, optional
        The dataset (or NXdata group); default: found from NeXus attributes
        (see :mod:`kernels.io.nexus`).
    frame_axis : int, optional
        Axis counting frames; default from NeXus attributes, NXmx or chunks, else
        a ``ReaderError`` (never a guess from axis sizes).
    dtype, overflow : output dtype and overflow rule (:mod:`kernels.io.convert`)

    Raises
    ------
    ReaderError
        Missing file, dataset, link target or VDS source; missing filter; an
        ambiguous frame axis; data that are not frames.
    """

    def __init__(self, path, dataset: str | None = None, frame_axis: int | None = None,
                 dtype=None, overflow: str = "error"):
        self.path = os.fspath(path)
        self.dataset = dataset
        self._file = None
        f = self._open()
        kind, target = find_signal(f, dataset, self.path)
        paths = target if kind == "eiger" else [target]
        nxmx = None
        parts, axes, shapes, dtypes = [], [], set(), set()
        for p in paths:
            where = f"{self.path}:{p}"
            dset = self._follow(f, p, where)
            if nxmx is None:
                nxmx = kind == "eiger" or _is_nxmx(dset)
            self._check_dataset(dset, where)
            axis = self._axis_of(dset, frame_axis, where, nxmx)
            n = 1 if axis is None else int(dset.shape[axis])
            if n == 0:
                raise ReaderError(f"{where} {tuple(dset.shape)} has no frames")
            shape = tuple(s for i, s in enumerate(dset.shape) if i != axis)
            parts.append((p, n))
            axes.append(axis)
            shapes.add(shape)
            dtypes.add(dset.dtype.newbyteorder("="))
        if len(shapes) != 1 or len(dtypes) != 1:
            raise ReaderError(f"{self.path}: the parts {[p for p, _ in parts]} differ in frame "
                              f"shape/dtype ({sorted(shapes)}, {sorted(map(str, dtypes))})")
        if kind == "eiger":
            self._check_eiger_numbers(f, parts)
        self.parts = parts
        self._axes = axes
        self._starts = np.cumsum([0] + [n for _, n in parts])
        self.n_frames = int(self._starts[-1])
        self.shape = tuple(int(s) for s in shapes.pop())
        self.file_dtype = dtypes.pop()
        self.frame_axis = axes[0]
        self._set_output(dtype, overflow)

    # -- opening and checks -------------------------------------------------
    def _open(self):
        import h5py

        if self._file is None:
            try:
                self._file = h5py.File(self.path, "r")
            except (OSError, ValueError) as exc:
                raise ReaderError(f"HDF5 file {self.path!r} cannot be opened: {exc}") from exc
        return self._file

    def _follow(self, f, path: str, where: str):
        """The dataset at ``path``, after checking every external link on the way."""
        import h5py

        seen = set()
        current = path
        while current not in seen:
            seen.add(current)
            link = f.get(current, getlink=True)
            if isinstance(link, h5py.SoftLink):
                current = link.path
                continue
            if isinstance(link, h5py.ExternalLink):
                if _source_file(link.filename, f.filename) is None:
                    raise ReaderError(
                        f"{where} is an external link to {link.filename}:{link.path}, and "
                        f"{link.filename!r} does not exist next to {self.path!r}; copy the "
                        "data files with the master file")
            break
        try:
            obj = f[path]
        except KeyError as exc:
            raise ReaderError(f"{where} cannot be opened: {exc}") from exc
        if not isinstance(obj, h5py.Dataset):
            raise ReaderError(f"{where} is a group, not a dataset; pass the frames' dataset")
        return obj

    def _check_dataset(self, dset, where: str) -> None:
        from h5py import h5d

        from .convert import check_dtype

        if dset.shape is None:
            raise ReaderError(f"{where} has no data (null dataspace)")
        check_dtype(dset.dtype, where)
        if len(dset.shape) < 2:
            raise ReaderError(f"{where} is {dset.dtype} {dset.shape}, not a 2-D frame or a "
                              "3-D stack")
        plist = dset.id.get_create_plist()
        if plist.get_layout() == h5d.VIRTUAL:
            import h5py

            for i in range(plist.get_virtual_count()):
                fname = plist.get_virtual_filename(i)
                dname = plist.get_virtual_dsetname(i)
                if fname == ".":
                    continue
                found = _source_file(fname, dset.file.filename)
                if found is None:
                    raise ReaderError(
                        f"{where} is a virtual dataset whose source {fname}:{dname} is missing "
                        "(HDF5 would silently return fill values for its frames); copy the "
                        "data files with the master file")
                with h5py.File(found, "r") as src:
                    if dname in src:
                        require_filters(src[dname], f"{where} (source {fname}:{dname})")
        else:
            require_filters(dset, where)

    @staticmethod
    def _axis_of(dset, explicit, where, nxmx):
        return frame_axis(dset, explicit, where, nxmx=nxmx)

    def _check_eiger_numbers(self, f, parts) -> None:
        """``image_nr_low`` of each part continues the previous part (1-based)."""
        expected = 1
        for p, n in parts:
            low = f[p].attrs.get("image_nr_low")
            if low is not None and int(np.asarray(low).ravel()[0]) != expected:
                raise ReaderError(f"{self.path}:{p} starts at image {int(low)}, expected "
                                  f"{expected}: a data file is missing or out of order")
            expected += n

    # -- reading -------------------------------------------------------------
    def _locate(self, index: int):
        k = int(np.searchsorted(self._starts, index, side="right")) - 1
        return k, index - int(self._starts[k])

    def _read_band(self, index, r0, r1, out):
        k, local = self._locate(index)
        path, _ = self.parts[k]
        axis = self._axes[k]
        f = self._open()
        if axis is None:
            sel = (slice(r0, r1), slice(None))
        else:
            sel_list: list = [slice(None)] * 3
            sel_list[axis] = local
            sel_list[[i for i in range(3) if i != axis][0]] = slice(r0, r1)
            sel = tuple(sel_list)
        try:
            f[path].read_direct(out, sel)
        except (OSError, ValueError, TypeError) as exc:
            raise ReaderError(f"{self.path}:{path} frame {index} cannot be read or decoded: "
                              f"{exc}") from exc

    def _where(self, index: int) -> str:
        k, _ = self._locate(index)
        return f"{self.path}:{self.parts[k][0]} frame {index}"

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_file"] = None
        return state
