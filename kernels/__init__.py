"""Analysis kernels for staged detector data (NF-HEDM reduction and orientation fitting,
FF-HEDM, 4D-STEM),
detector-file readers/writers (:mod:`kernels.io`) and a synthetic detector
with ground truth.

Every kernel is a flat ``@njit(cache=True, nogil=True)`` function (suffix
``_kernel``) taking its outputs from the caller; the names without the suffix
are thin wrappers that validate, allocate and call.  No kernel does I/O or
MPI.  Under MPI, warm a node-local numba cache first: see
:mod:`kernels.numba_cache`.

Importing this package is cheap: every public name is loaded from its
submodule on first use (PEP 562), so ``import kernels`` loads neither numba,
scipy, h5py nor tifffile -- at thousands of ranks each module imported is a
metadata lookup on the shared filesystem from every rank.  ``from kernels
import open_frames`` loads the readers (NumPy only) and still no numba.
"""
from __future__ import annotations

import lazy_loader

# public name -> submodule (relative to this package) that defines it
_EXPORTS = {
    "KernelError": "errors", "KernelArgumentError": "errors", "ReaderError": "errors",
    "CacheError": "errors",
    "median_filter": "filters", "log_filter": "filters", "log_weights": "filters",
    "zero_crossings": "filters",
    "label8": "label", "fill_holes": "label",
    "NFParams": "nf", "NFSpots": "nf", "NFWorkspace": "nf", "NF_SPOT_DTYPE": "nf",
    "median_background": "nf", "subtract_background": "nf", "reduce_frame": "nf",
    "FFParams": "ff", "PEAK_DTYPE": "ff", "find_peaks": "ff",
    "ring_mask": "stem", "circular_mask": "stem", "virtual_detector": "stem",
    "count_electrons": "stem", "count_stack": "stem", "frame_sums": "stem",
    "FRAME_DTYPES": "stem", "check_frame_dtype": "stem",
    "GEFile": "io", "TiffSeries": "io", "TiffStack": "io", "HDF5Stack": "io",
    "FrameSource": "io", "open_frames": "io",
    "write_tiff_series": "io", "write_ge": "io", "write_hdf5": "io",
    "DetectorModel": "synth", "TRUTH_DTYPE": "synth", "plant_spots": "synth",
    "background_pattern": "synth", "render_frame": "synth", "render_dark": "synth",
    "frames": "synth", "frame_truth": "synth", "match_points": "synth",
    # NF-HEDM stage 2: orientations, the forward model, confidence, fitting, ground truth
    "CUBIC_SYMMETRY": "crystal", "euler_to_matrix": "crystal", "matrix_to_euler": "crystal",
    "misorientation": "crystal", "random_orientations": "crystal",
    "rotation_matrix": "crystal", "fundamental_zone_grid": "crystal",
    "hkl_list": "hkl", "HKLList": "hkl",
    "NFGeometry": "nfgeometry", "ParamFileError": "nfgeometry",
    "predict_spots": "nfmodel", "SPOT_DTYPE": "nfmodel",
    "hex_grid": "nfgrid", "grid_vertices": "nfgrid", "within_radius": "nfgrid",
    "read_grid": "nfgrid", "write_grid": "nfgrid",
    "pack_images": "nfconfidence", "unpack_images": "nfconfidence",
    "confidence": "nfconfidence", "FitWorkspace": "nfconfidence",
    "fit_points": "nffit", "fit_point": "nffit", "FitOptions": "nffit", "FIT_DTYPE": "nffit",
    "seed_spots": "nffit", "SeedSpots": "nffit",
    "Microstructure": "microstructure", "voronoi_microstructure": "microstructure",
    "simulate_images": "microstructure", "ff_seeds": "microstructure",
    "FrameModel": "microstructure", "render_raw_frame": "microstructure",
    "frame_background": "microstructure",
    "warm_cache": "numba_cache", "use_cache_dir": "numba_cache", "WarmReport": "numba_cache",
}

__all__ = list(_EXPORTS)


# loaded on first use (lazy_loader, scientific-python's PEP 562 helper)
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    m: [n for n, k in _EXPORTS.items() if k == m] for m in set(_EXPORTS.values())})
