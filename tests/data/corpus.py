"""The conformance corpus: detector files laid out as other people's specifications say.

Our own synthetic files agreed with our own code; real Eiger and NeXus files
broke it.  This module writes small files format-faithfully from the public
specifications, plus real files that installed packages ship, and a manifest
that says, machine-readably, what each file holds and what a reader or the
stager must return or raise.

Build it::

    python -m tests.data.corpus DIR          # writes DIR/... and DIR/manifest.json

    from tests.data.corpus import build, load
    manifest = build(dir)                    # or load(dir) for a built one

and in tests the session fixture ``corpus`` (:mod:`tests.data.fixtures`).

Sources
-------
* NeXus NXmx application definition (nexusformat/definitions,
  ``applications/NXmx.nxdl.xml``): ``/entry/definition = "NXmx"``,
  ``NXdata/data[np, i, j]`` (frame number first), ``NXdetector`` fields
  (``pixel_mask`` bit 0 = gap, ``saturation_value``, ``bit_depth_readout``,
  ``sensor_material``...), ``/entry/source/name``.
* NeXus NXdata base class (``base_classes/NXdata.nxdl.xml``): ``@signal``,
  ``@axes`` (one name per dimension, ``"."`` for none), ``AXISNAME_indices``,
  the ``@default`` chain from the root; ``@interpretation`` on the signal.
* DECTRIS Eiger file-writer layout as documented by the beamlines that use it
  (e.g. SPring-8's yamtbx EIGER notes, Global Phasing's autoPROC wiki):
  ``*_master.h5`` with ``/entry/data/data_NNNNNN`` external links to
  ``*_data_NNNNNN.h5`` holding ``/entry/data/data`` (bitshuffle+LZ4, HDF5
  filter 32008, one chunk per frame, ``image_nr_low``/``image_nr_high``),
  ``bit_depth_image``, and ``2**bit_depth - 1`` in pixels the detector marks
  inactive.
* HDF5 file format specification (datatypes: string padding and character
  sets, enums, compounds, arrays, opaque, references; null/scalar dataspaces;
  compact/contiguous/chunked/virtual layouts) and the HDF Group's registered
  filter identifiers.
* TIFF 6.0 / BigTIFF (tifffile), GE raw with APS's blanked header (fabio's
  ``GEimage`` notes), EDF and CBF written by fabio when installed.

Real files used: the HDF5 files h5py ships in its tests (``h5py/tests/data_files``:
variable-length strings from an older HDF5, numbers and strings written on a
big-endian s390x).  fabio's and RosettaSciIO's test images are not in their
wheels (their test suites download them), so none are used here.

The manifest
------------
``{"version": 1, "root": DIR, "entries": [ENTRY, ...], "skipped": [...]}``; each ENTRY:

``name``, ``path`` (relative to DIR; the file a reader opens), ``format``
(hdf5, tiff, tiff-series, ge, edf, cbf), ``origin``, ``requires`` (optional
packages: hdf5plugin, fabio), ``files`` (every file of the item), ``datasets``
(HDF5 path -> shape, dtype, type_class, dataspace, layout, chunks, stored
``filters`` [{id, name, flags, values}], attrs, ``string`` {vlen, size, pad,
cset}, ``vds_sources``), ``links`` (path -> {kind: external/soft/hard, file,
path, target_exists}), ``reads`` (cases for :func:`kernels.open_frames`:
``options`` and either ``expect: "frames"`` with ``n_frames``, ``frame_shape``,
``dtype``, ``frame_axis``, ``sha256`` of the frames in order as little-endian
bytes (:func:`tests.data.h5util.frames_digest`), or ``expect: "error"`` with a
``match`` the ``ReaderError`` message contains), and ``stage`` (``expect``:
copy, refuse (with ``exit`` and ``match``) or translate-or-refuse; ``selections``
to stage; ``note``).
"""
from __future__ import annotations

import json
import os
import sys

VERSION = 1


def build(root: str) -> dict:
    """Write the corpus under ``root`` (created) and return its manifest.

    Entries that need hdf5plugin are left out (and listed under ``skipped``)
    when it is not installed; fabio's when fabio is not.
    """
    from . import h5kinds, layouts

    root = os.path.abspath(os.fspath(root))
    os.makedirs(root, exist_ok=True)
    entries, skipped = [], []
    try:
        import hdf5plugin  # noqa: F401  (Eiger/NXmx stacks are bitshuffle+LZ4)
    except ImportError:
        skipped.append({"part": "nxmx", "why": "hdf5plugin is not installed"})
    else:
        from . import nxmx

        entries += nxmx.entries(root)
    entries += h5kinds.entries(root)
    entries += layouts.entries(root)
    try:
        import fabio  # noqa: F401
    except ImportError:
        skipped.append({"part": "edf/cbf", "why": "fabio is not installed"})
    manifest = {"version": VERSION, "root": root, "entries": entries, "skipped": skipped}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


def load(root: str) -> dict:
    """The manifest of a corpus built by :func:`build` under ``root``."""
    with open(os.path.join(os.fspath(root), "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("version") != VERSION:
        raise ValueError(f"{root}: corpus manifest version {manifest.get('version')}, "
                         f"expected {VERSION}; rebuild it")
    return manifest


def entry(manifest: dict, name: str) -> dict:
    """The manifest entry called ``name``."""
    for e in manifest["entries"]:
        if e["name"] == name:
            return e
    raise KeyError(f"no corpus entry {name!r}; have {[e['name'] for e in manifest['entries']]}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tests.data.corpus DIR", file=sys.stderr)
        return 2
    manifest = build(argv[0])
    for e in manifest["entries"]:
        print(f"{e['name']:28s} {e['path']}")
    for s in manifest["skipped"]:
        print(f"skipped {s['part']}: {s['why']}")
    print(f"{len(manifest['entries'])} entries; manifest: "
          f"{os.path.join(manifest['root'], 'manifest.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
