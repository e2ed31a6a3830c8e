"""Counting thresholds from sampled frames, computed the way stempy computes them.

stempy (``calculateThresholds`` in OpenChemistry/stempy ``electronthresholds.cpp``)
takes ``number_of_samples`` frames, subtracts the dark reference (truncated to an
integer), and from all their pixel values ``s``:

- ``mean``, the sample variance (``ddof=1``), ``std_dev``;
- X-ray threshold ``mean + xray_sigma * std_dev``;
- a histogram of unit bins from ``max(min(s), int(mean - X * std_dev))`` to
  ``min(ceil(max(s)), int(mean + X * std_dev))`` (``X`` the X-ray threshold
  itself, as stempy writes it), fitted with a Gaussian ``a exp(-(b - mu)**2 / 2 sigma**2)``
  by Levenberg-Marquardt from ``(max count, mean, std_dev)`` (when that start does
  not converge -- X-ray hits make ``std_dev`` far wider than the background peak --
  we start again from the peak's position and half-width; stempy raises instead);
- background threshold ``mu + background_sigma * |sigma|``.

:func:`sampled_thresholds` does the same on the frames it is given; the choice of
frames differs: stempy draws them at random (another choice every run), we take
``samples`` frames evenly spaced over the scan (:func:`sample_indices`), so a
run is reproducible and every rank computes the same numbers. The values differ
in two places, on purpose: stempy keeps integer samples in uint16, so a pixel
below the dark wraps to ~65535 (with a dark reference above some pixels,
stempy 3.6 then fails with "cannot create std::vector larger than max_size()");
we keep the exact difference. With a gain map stempy samples
``frame / gain - dark`` but counts ``(frame - dark) / gain``; we sample what we
count, ``(frame - dark) / gain`` (float frames: not truncated).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from stem4d.errors import Stem4DError

__all__ = ["Thresholds", "sampled_thresholds", "sample_indices", "detector_events"]


@dataclass
class Thresholds:
    """The thresholds and the statistics behind them (stempy's metadata names)."""

    background_threshold: float
    x_ray_threshold: float
    threshold_calculated: bool = False
    number_of_samples: int = 0
    min_sample: float = 0.0
    max_sample: float = 0.0
    mean: float = 0.0
    variance: float = 0.0
    std_dev: float = 0.0
    number_of_bins: int = 0
    x_ray_threshold_n_sigma: float = 0.0
    background_threshold_n_sigma: float = 0.0
    optimized_mean: float = 0.0
    optimized_std_dev: float = 0.0

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def sample_indices(frames: int, samples: int) -> np.ndarray:
    """``min(samples, frames)`` distinct frame indices evenly spaced over ``frames``."""
    n = max(1, min(int(samples), int(frames)))
    return np.unique(np.linspace(0, frames - 1, n).round().astype(np.int64))


def sampled_thresholds(frames: np.ndarray, dark: Any = 0.0, gain: Optional[np.ndarray] = None,
                       background_sigma: float = 4.0, xray_sigma: float = 10.0
                       ) -> Thresholds:
    """Background and X-ray thresholds of the sampled ``frames`` (k, rows, cols).

    Raises
    ------
    Stem4DError
        Values without spread (nothing to fit), or a fit that does not converge.
    """
    from scipy.optimize import least_squares

    frames = np.asarray(frames)
    dark_a = np.broadcast_to(np.asarray(dark, np.float64), frames.shape[1:])
    if gain is None and frames.dtype.kind in "ui":
        s = frames.astype(np.float64) - np.trunc(dark_a)
    else:
        s = frames.astype(np.float64) - dark_a
        if gain is not None:
            s = s / np.asarray(gain, np.float64)
    s = s.ravel()
    n = s.size
    mean = float(s.mean())
    variance = float(s.var(ddof=1)) if n > 1 else 0.0
    std = float(np.sqrt(max(variance, 0.0)))
    xray = mean + xray_sigma * std
    min_sample = float(s.min())
    max_sample = float(np.ceil(s.max()))
    max_bin = min(int(max_sample), int(mean + xray * std))
    min_bin = max(int(min_sample), int(mean - xray * std))
    nbins = max_bin - min_bin
    if nbins < 3 or std == 0:
        raise Stem4DError(f"thresholds='sampled': the {len(frames)} sampled frames have no "
                          f"spread to fit (values {min_sample:g} .. {max_sample:g}); give "
                          "background_threshold and xray_threshold (thresholds='fixed')")
    idx = np.trunc(s - min_bin).astype(np.int64)
    idx = idx[(idx >= 0) & (idx < nbins)]
    hist = np.bincount(idx, minlength=nbins).astype(np.float64)
    bins = np.arange(min_bin, max_bin, dtype=np.float64)

    def resid(p: np.ndarray) -> np.ndarray:
        return p[0] * np.exp(-0.5 * ((bins - p[1]) / p[2]) ** 2) - hist

    fit = least_squares(resid, [hist.max(), mean, std], method="lm", max_nfev=5000)
    if not fit.success:
        # stempy's start (the mean and spread of all values, X-ray hits included) can
        # be far from a narrow background peak: start again from the peak itself
        peak = int(np.argmax(hist))
        half = hist >= hist[peak] / 2
        width = max(1.0, float(half.sum()) / 2.355)
        fit = least_squares(resid, [hist[peak], bins[peak], width], method="lm",
                            max_nfev=5000)
    if not fit.success:
        raise Stem4DError(f"thresholds='sampled': the Gaussian fit of the background did not "
                          f"converge ({fit.message}); give fixed thresholds")
    mu, sigma = float(fit.x[1]), abs(float(fit.x[2]))
    return Thresholds(mu + background_sigma * sigma, xray, True, int(len(frames)),
                      min_sample, max_sample, mean, variance, std, int(nbins),
                      float(xray_sigma), float(background_sigma), mu, sigma)


def detector_events(frames: Any) -> Tuple[np.ndarray, np.ndarray]:
    """A counting detector's frames as electron events ``(counts (k,), flat)``: a pixel of
    value v is v entries of its flat index, frame after frame, pixels increasing. CSR
    frames (:class:`analyses.sparse.CSRFrames`) are taken as they are; dense ones must
    hold non-negative integers (the same frames, spilled and read offline)."""
    from analyses.sparse import CSRFrames

    k = len(frames)
    if isinstance(frames, CSRFrames):
        row = np.repeat(np.arange(k, dtype=np.int64), np.diff(frames.indptr))
        order = np.argsort(row * (frames.shape[1] * frames.shape[2]) + frames.indices,
                           kind="stable")
        row, pix, val = row[order], frames.indices[order], frames.values[order]
    else:
        if np.dtype(frames.dtype).kind not in "ui":
            raise Stem4DError(f"stem4d: events='detector' takes counts; the frames are "
                              f"{np.dtype(frames.dtype).name}")
        flat = np.asarray(frames).reshape(k, -1)
        row, pix = np.nonzero(flat)
        val = flat[row, pix]
        if len(val) and int(val.min()) < 0:
            raise Stem4DError("stem4d: events='detector' takes counts; a pixel is negative")
    val = val.astype(np.int64)
    counts = np.bincount(row, weights=val, minlength=k).astype(np.int64)
    return counts, np.repeat(pix, val).astype(np.uint32)
