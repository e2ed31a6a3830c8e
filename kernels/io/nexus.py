"""Which HDF5 dataset holds the frames, and which of its axes counts them.

Both are decided from what the file says (NeXus attributes, the NXmx
definition, the chunk layout) or from the caller; never from the sizes of the
axes, which is how a Velox (16, 16, 5) stack once became 16 "frames" of
(16, 5).

Dataset (:func:`find_signal`), first that applies:

1. the ``dataset`` argument (a dataset, or an NXdata group: its ``@signal``);
2. the NeXus ``@default`` chain: root ``@default`` -> NXentry ``@default`` ->
   NXdata ``@signal``;
3. ``/entry/data/data``;
4. DECTRIS Eiger masters: ``/entry/data/data_NNNNNN`` external links, in order,
   read as one stack;
5. ``/entry/data``'s ``@signal``;

otherwise a ``ReaderError`` listing the 2-D/3-D numeric datasets to choose from.

Frame axis of a 3-D dataset (:func:`frame_axis`), first that applies:

1. the ``frame_axis`` argument;
2. ``@interpretation = "image"`` on the dataset (NXdata): the image is the last
   two axes, so frames are axis 0 (any other interpretation: not frames);
3. the NXdata group's ``@axes`` (or a legacy ``@axes="a:b:c"`` on the dataset)
   naming exactly one axis, the others ``"."``: that axis (``AXISNAME_indices``
   honoured);
4. an NXentry whose ``definition`` is ``NXmx``: ``data[np, i, j]``, axis 0;
5. chunks of one frame: exactly one chunk dimension is 1 and the others are
   larger: that axis (one frame per chunk is how a writer lays frames out);

otherwise the layout is ambiguous: ``ReaderError`` asking for ``frame_axis``.
A 2-D dataset is one frame.
"""
from __future__ import annotations

import re

from ..errors import ReaderError

__all__ = ["find_signal", "frame_axis", "eiger_parts"]

_EIGER_PART = re.compile(r"^data_\d{6}$")


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "shape") and getattr(value, "shape", None) == ():
        return _text(value[()])
    if isinstance(value, str):
        return value
    return None


def _names(value) -> list | None:
    """An ``@axes`` value as a list of names (array of strings, or 'a:b:c' / 'a,b')."""
    if value is None:
        return None
    text = _text(value)
    if text is not None:
        return [t.strip() for t in re.split(r"[:,]", text)]
    try:
        return [_text(v) or "" for v in list(value)]
    except TypeError:
        return None


def _nx_class(obj) -> str | None:
    return _text(obj.attrs.get("NX_class"))


def eiger_parts(group) -> list:
    """Names of ``data_NNNNNN`` members of an Eiger master's ``/entry/data``, sorted."""
    return sorted(n for n in group.keys() if _EIGER_PART.match(n))


def _candidates(f) -> list:
    import h5py

    found = []

    def visit(name, obj):
        if (isinstance(obj, h5py.Dataset) and obj.shape is not None and len(obj.shape) in (2, 3)
                and obj.dtype.kind in "uif" and min(obj.shape) > 1):
            found.append("/" + name)
    f.visititems(visit)
    return found[:10]


def find_signal(f, dataset: str | None, where: str):
    """Resolve the frame data of open file ``f``: ``("dataset", path)`` or
    ``("eiger", [part paths])``.  External links are *not* dereferenced here."""
    import h5py

    def signal_of(group, why):
        name = _text(group.attrs.get("signal"))
        if name is None:
            return None
        if name not in group:
            raise ReaderError(f"{where}: {group.name} {why} names @signal={name!r}, which is "
                              "not in the group")
        return group.name.rstrip("/") + "/" + name

    if dataset is not None:
        if dataset not in f:
            raise ReaderError(f"{where}: no dataset {dataset!r}; candidates: {_candidates(f)}")
        link = f.get(dataset, getlink=True)
        if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
            return ("dataset", dataset)
        obj = f[dataset]
        if isinstance(obj, h5py.Group):
            sig = signal_of(obj, "")
            if sig:
                return ("dataset", sig)
            parts = eiger_parts(obj)
            if parts:
                return ("eiger", [f"{obj.name}/{p}" for p in parts])
            raise ReaderError(f"{where}: {dataset!r} is a group without @signal; pass the "
                              "dataset that holds the frames")
        return ("dataset", dataset)
    default = _text(f.attrs.get("default"))
    if default and isinstance(f.get(default), h5py.Group):
        entry = f[default]
        inner = _text(entry.attrs.get("default"))
        if inner and isinstance(entry.get(inner), h5py.Group):
            sig = signal_of(entry[inner], "(the @default NXdata)")
            if sig:
                return ("dataset", sig)
    if "/entry/data/data" in f or isinstance(f.get("/entry/data/data", getlink=True),
                                             h5py.ExternalLink):
        return ("dataset", "/entry/data/data")
    group = f.get("/entry/data")
    if isinstance(group, h5py.Group):
        parts = eiger_parts(group)
        if parts:
            return ("eiger", [f"/entry/data/{p}" for p in parts])
        sig = signal_of(group, "")
        if sig:
            return ("dataset", sig)
    raise ReaderError(f"{where}: no frame dataset found (no NeXus @default/@signal, no "
                      f"/entry/data/data); pass dataset=, one of {_candidates(f)}")


def _is_nxmx(dset) -> bool:
    node = dset.parent
    while True:
        if _nx_class(node) == "NXentry" and "definition" in node:
            d = node["definition"]
            return getattr(d, "shape", None) == () and _text(d[()]) == "NXmx"
        if node.name == "/":
            return False
        node = node.parent


def frame_axis(dset, explicit: int | None, where: str, nxmx: bool | None = None) -> int | None:
    """The frame axis of ``dset`` (None for a 2-D frame) by the module's rule."""
    ndim = len(dset.shape)
    if ndim == 2:
        if explicit not in (None,):
            raise ReaderError(f"{where} is one 2-D frame {dset.shape}; it has no frame axis "
                              f"(got frame_axis={explicit})")
        return None
    if ndim != 3:
        raise ReaderError(f"{where} is {ndim}-D {tuple(dset.shape)}; readers take 2-D frames "
                          "and 3-D stacks (4D-STEM scans: pass a 3-D dataset or reshape)")
    if explicit is not None:
        if not -3 <= int(explicit) < 3:
            raise ReaderError(f"{where}: frame_axis={explicit} is not an axis of a 3-D dataset")
        return int(explicit) % 3
    interp = _text(dset.attrs.get("interpretation"))
    if interp is not None:
        if interp == "image":
            return 0
        raise ReaderError(f"{where} has @interpretation={interp!r}: not image frames")
    group = dset.parent
    axes = _names(group.attrs.get("axes")) if _text(group.attrs.get("signal")) == \
        dset.name.rsplit("/", 1)[-1] else None
    if axes is None:
        axes = _names(dset.attrs.get("axes"))
    if axes is not None and len(axes) == ndim:
        named = [i for i, a in enumerate(axes) if a not in (".", "")]
        for i, a in list(enumerate(axes)):
            idx = group.attrs.get(f"{a}_indices") if a not in (".", "") else None
            if idx is not None and getattr(idx, "size", 1) == 1:
                named[named.index(i)] = int(idx if getattr(idx, "shape", ()) == () else idx[0])
        if len(named) == 1:
            return named[0]
        if named:
            raise ReaderError(f"{where}: @axes={axes} names {len(named)} axes, so which one "
                              "counts frames is ambiguous; pass frame_axis=")
    if nxmx if nxmx is not None else _is_nxmx(dset):
        return 0
    chunks = dset.chunks
    if chunks is not None:
        ones = [i for i, c in enumerate(chunks) if c == 1]
        if len(ones) == 1 and all(c > 1 for i, c in enumerate(chunks) if i != ones[0]):
            return ones[0]
    s = tuple(dset.shape)
    raise ReaderError(
        f"{where} is {s} with no NeXus @interpretation/@axes, no NXmx definition and no "
        f"one-frame chunks: the frame axis is ambiguous (frames first: {s[0]} frames of "
        f"{s[1:]}; frames last: {s[2]} frames of {s[:2]}); pass frame_axis=0 or frame_axis=2")
