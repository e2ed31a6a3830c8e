"""A synthetic area detector with ground truth, for tests, demos and benchmarks.

Every frame is a pure function of ``(model, frame index)``: a fixed per-pixel
background pattern (smooth gradient + fixed-pattern noise + hot pixels),
planted spots (2-D pseudo-Voigt; ``eta=0`` is a Gaussian) and Poisson-like
noise (Gaussian with variance ``gain * mean``, which is fast and, at these
count levels, indistinguishable for the kernels).  So frames can be generated
in any order, by any process, and always agree.

NF design: a spot persists over ``frames_per_spot`` consecutive frames (a
grain crossing an omega range) and spots keep ``min_separation`` pixels apart
across *all* frames, so any pixel carries spot signal in at most
``frames_per_spot < n_frames / 2`` frames and the per-pixel median over the
stack is a clean background estimate.  FF: ``frames_per_spot=1``.

Signal-to-noise of a spot: ``snr = amplitude / sqrt(gain * background)``,
its peak height over the background noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .errors import KernelArgumentError

__all__ = ["DetectorModel", "TRUTH_DTYPE", "plant_spots", "background_pattern",
           "render_frame", "render_dark", "frames", "frame_truth", "match_points"]

TRUTH_DTYPE = np.dtype([
    ("spot", np.int32), ("first_frame", np.int32), ("n_frames", np.int32),
    ("row", np.float64), ("col", np.float64), ("amplitude", np.float64),
    ("sigma", np.float64), ("eta", np.float64), ("integrated", np.float64),
    ("snr", np.float64)])


@dataclass(frozen=True)
class DetectorModel:
    """Everything that determines the synthetic frames (a value: hashable, picklable)."""

    shape: tuple = (256, 256)
    n_frames: int = 20
    seed: int = 0
    background: float = 100.0        # mean background counts
    pattern: float = 20.0            # amplitude of the fixed background pattern
    gain: float = 1.0                # noise variance = gain * mean
    n_hot: int = 10                  # hot pixels (part of the fixed pattern)
    hot_value: float = 4000.0
    n_spots: int = 40
    amplitude: tuple = (100.0, 600.0)  # spot peak height above background, uniform
    sigma: tuple = (0.8, 1.5)          # spot Gaussian sigma (px), uniform
    eta: float = 0.0                   # pseudo-Voigt Lorentzian fraction
    frames_per_spot: int = 3
    min_separation: float = 10.0     # px between any two spot centres

    def __post_init__(self):
        h, w = self.shape
        if h < 1 or w < 1:
            raise KernelArgumentError(f"shape must be positive, got {self.shape}")
        if not 1 <= self.frames_per_spot <= self.n_frames:
            raise KernelArgumentError(
                f"frames_per_spot={self.frames_per_spot} must be in 1..n_frames={self.n_frames}")
        if self.frames_per_spot > 1 and 2 * self.frames_per_spot >= self.n_frames:
            raise KernelArgumentError(
                "frames_per_spot must be < n_frames / 2 so the per-pixel median stays "
                f"background; got {self.frames_per_spot} of {self.n_frames}")
        if not 0.0 <= self.eta <= 1.0:
            raise KernelArgumentError(f"eta must be in [0, 1], got {self.eta}")
        if self.background - self.pattern <= 0:
            raise KernelArgumentError("background must exceed pattern (counts stay positive)")

    @property
    def noise(self) -> float:
        """Background noise standard deviation (counts)."""
        return math.sqrt(self.gain * self.background)


def _rng(model: DetectorModel, *stream: int) -> np.random.Generator:
    return np.random.default_rng([model.seed, *stream])


def plant_spots(model: DetectorModel) -> np.ndarray:
    """The ground truth: one :data:`TRUTH_DTYPE` record per spot.

    Positions are uniform over the whole frame (spots may touch or be cut by
    the border) subject to ``min_separation``; fewer than ``n_spots`` are
    returned only if the frame cannot hold them (after 100 tries per spot).
    ``integrated`` is the noise-free sum of the spot over the detector pixels.
    """
    rng = _rng(model, 1)
    h, w = model.shape
    pr = np.empty(model.n_spots)
    pc = np.empty(model.n_spots)
    n = 0
    sep2 = model.min_separation ** 2
    for _ in range(model.n_spots):
        for _ in range(100):
            r, c = rng.uniform(0, h - 1), rng.uniform(0, w - 1)
            if not n or ((pr[:n] - r) ** 2 + (pc[:n] - c) ** 2).min() >= sep2:
                pr[n], pc[n] = r, c
                n += 1
                break
    truth = np.zeros(n, dtype=TRUTH_DTYPE)
    truth["spot"] = np.arange(n)
    truth["n_frames"] = model.frames_per_spot
    truth["first_frame"] = rng.integers(0, model.n_frames - model.frames_per_spot + 1, n)
    truth["row"] = pr[:n]
    truth["col"] = pc[:n]
    (a_lo, a_hi), (s_lo, s_hi) = model.amplitude, model.sigma
    truth["amplitude"] = rng.uniform(a_lo, a_hi, n)
    truth["sigma"] = rng.uniform(s_lo, s_hi, n)
    truth["eta"] = model.eta
    truth["snr"] = truth["amplitude"] / model.noise
    for t in truth:
        _, _, patch = _spot_patch(t, model.shape)
        t["integrated"] = float(patch.sum())
    return truth


def _spot_patch(t, shape):
    """(row slice, col slice, values) of one spot's noise-free contribution."""
    sigma, eta = float(t["sigma"]), float(t["eta"])
    half = int(math.ceil(4 * sigma + 8 * sigma * eta))
    r0 = max(int(math.floor(t["row"])) - half, 0)
    r1 = min(int(math.floor(t["row"])) + half + 2, shape[0])
    c0 = max(int(math.floor(t["col"])) - half, 0)
    c1 = min(int(math.floor(t["col"])) + half + 2, shape[1])
    rr = np.arange(r0, r1)[:, None] - t["row"]
    cc = np.arange(c0, c1)[None, :] - t["col"]
    d2 = rr * rr + cc * cc
    gauss = np.exp(-0.5 * d2 / sigma ** 2)
    gamma2 = 2 * math.log(2) * sigma ** 2          # same FWHM as the Gaussian
    lorentz = 1.0 / (1.0 + d2 / gamma2)
    vals = t["amplitude"] * ((1 - eta) * gauss + eta * lorentz)
    return slice(r0, r1), slice(c0, c1), vals


def background_pattern(model: DetectorModel) -> np.ndarray:
    """The fixed per-pixel mean background (float64), hot pixels included."""
    rng = _rng(model, 2)
    h, w = model.shape
    y = np.linspace(-1, 1, h)[:, None]
    x = np.linspace(-1, 1, w)[None, :]
    smooth = 0.5 * (x + y) / 2 + 0.5 * np.cos(math.pi * x) * np.cos(math.pi * y)
    fixed = rng.uniform(-0.5, 0.5, (h, w))
    pat = model.background + model.pattern * (smooth + fixed) / 1.5
    n_hot = min(model.n_hot, h * w)
    hot = rng.choice(h * w, n_hot, replace=False)
    pat.flat[hot] = model.hot_value
    return pat


def _noisy(model: DetectorModel, mean: np.ndarray, stream: int) -> np.ndarray:
    rng = _rng(model, stream)
    noise = rng.standard_normal(mean.shape)
    val = np.rint(mean + np.sqrt(model.gain * mean) * noise)
    return np.clip(val, 0, 65535).astype(np.uint16)


def frame_truth(truth: np.ndarray, index: int) -> np.ndarray:
    """The truth records of the spots present in frame ``index``."""
    on = (truth["first_frame"] <= index) & (index < truth["first_frame"] + truth["n_frames"])
    return truth[on]


def render_frame(model: DetectorModel, index: int, truth: np.ndarray | None = None,
                 pattern: np.ndarray | None = None) -> np.ndarray:
    """Frame ``index`` (uint16); pass ``truth``/``pattern`` to skip recomputing them."""
    if not 0 <= index < model.n_frames:
        raise KernelArgumentError(f"frame index {index} outside 0..{model.n_frames - 1}")
    truth = plant_spots(model) if truth is None else truth
    mean = (background_pattern(model) if pattern is None else pattern).copy()
    for t in frame_truth(truth, index):
        rs, cs, vals = _spot_patch(t, model.shape)
        mean[rs, cs] += vals
    return _noisy(model, mean, 1000 + index)


def render_dark(model: DetectorModel, index: int = 0,
                pattern: np.ndarray | None = None) -> np.ndarray:
    """A dark frame (background pattern and noise, no spots), uint16; its own noise stream."""
    mean = background_pattern(model) if pattern is None else pattern
    return _noisy(model, mean, 10_000_000 + index)


def frames(model: DetectorModel, indices=None) -> Iterator[np.ndarray]:
    """Yield the frames ``indices`` (default all), computing the truth once."""
    truth = plant_spots(model)
    pattern = background_pattern(model)
    for i in range(model.n_frames) if indices is None else indices:
        yield render_frame(model, i, truth, pattern)


def match_points(found: np.ndarray, true: np.ndarray, max_dist: float):
    """Greedy nearest matching of found to true (row, col) points.

    Returns
    -------
    (true_matched, found_matched) : two bool arrays
        Pairs are taken in increasing distance, each point used once, only
        pairs closer than ``max_dist``.
    """
    found = np.asarray(found, float).reshape(-1, 2)
    true = np.asarray(true, float).reshape(-1, 2)
    tm = np.zeros(len(true), bool)
    fm = np.zeros(len(found), bool)
    if len(found) and len(true):
        d = np.hypot(found[:, None, 0] - true[None, :, 0], found[:, None, 1] - true[None, :, 1])
        fi, ti = np.nonzero(d < max_dist)
        for k in np.argsort(d[fi, ti], kind="stable"):
            if not fm[fi[k]] and not tm[ti[k]]:
                fm[fi[k]] = tm[ti[k]] = True
    return tm, fm
