"""Analysis kernels for staged detector data (NF-HEDM, FF-HEDM, 4D-STEM),
detector-file readers/writers and a synthetic detector with ground truth.

Every kernel is a flat ``@njit(cache=True, nogil=True)`` function (suffix
``_kernel``) taking its outputs from the caller; the names without the suffix
are thin wrappers that validate, allocate and call.  No kernel does I/O or
MPI.  Under MPI, warm a node-local numba cache first: see
:mod:`kernels.numba_cache`.
"""
from .errors import CacheError, KernelArgumentError, KernelError, ReaderError
from .ff import PEAK_DTYPE, FFParams, find_peaks
from .filters import log_filter, log_weights, median_filter, zero_crossings
from .label import fill_holes, label8
from .nf import (NF_SPOT_DTYPE, NFParams, NFSpots, NFWorkspace, median_background,
                 reduce_frame, subtract_background)
from .numba_cache import WarmReport, use_cache_dir, warm_cache
from .readers import GEFile, HDF5Stack, TiffSeries, open_frames
from .stem import count_electrons, ring_mask, virtual_detector
from .synth import (TRUTH_DTYPE, DetectorModel, background_pattern, frame_truth, frames,
                    match_points, plant_spots, render_dark, render_frame)
from .writers import write_ge, write_hdf5, write_tiff_series

__all__ = [
    "KernelError", "KernelArgumentError", "ReaderError", "CacheError",
    "median_filter", "log_filter", "log_weights", "zero_crossings", "label8", "fill_holes",
    "NFParams", "NFSpots", "NFWorkspace", "NF_SPOT_DTYPE", "median_background",
    "subtract_background", "reduce_frame",
    "FFParams", "PEAK_DTYPE", "find_peaks",
    "ring_mask", "virtual_detector", "count_electrons",
    "GEFile", "TiffSeries", "HDF5Stack", "open_frames",
    "write_tiff_series", "write_ge", "write_hdf5",
    "DetectorModel", "TRUTH_DTYPE", "plant_spots", "background_pattern", "render_frame",
    "render_dark", "frames", "frame_truth", "match_points",
    "warm_cache", "use_cache_dir", "WarmReport",
]
