"""2-D image filters: median (3x3, 5x5), Laplacian of Gaussian, zero-crossing edges.

Border handling (all filters here): ``mode='nearest'`` -- the image is
extended by repeating its edge pixels, exactly like ``scipy.ndimage``'s
``mode='nearest'``, which is the reference in the tests.

Raw kernels (``*_kernel``) take every output array from the caller; the
wrappers without the suffix validate, allocate and call them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .errors import KernelArgumentError, check_frame, check_out
from .sortnet import median_network

__all__ = [
    "median_filter", "median_filter_kernel", "MEDIAN_SIZES",
    "log_weights", "log_filter", "log_filter_kernel",
    "zero_crossings", "zero_crossings_kernel",
]

MEDIAN_SIZES = (3, 5)
_NET3 = median_network(9)
_NET5 = median_network(25)
# Column tile: size*size rows of TILE uint16 stay in L1 while the network runs.
_TILE = 256


@njit(cache=True, nogil=True)
def median_filter_kernel(img, size, lo, hi, out):
    """Median over a ``size`` x ``size`` window (edge pixels repeated) into ``out``.

    ``lo``/``hi`` is the median network for ``size * size`` inputs
    (:func:`kernels.sortnet.median_network`); each compare-exchange runs over a
    tile of columns at once so it vectorises.
    """
    h, w = img.shape
    rad = size // 2
    k_all = size * size
    mid = (k_all - 1) // 2
    padded = np.empty((size, w + 2 * rad), dtype=img.dtype)
    buf = np.empty((k_all, _TILE), dtype=img.dtype)
    for r in range(h):
        for dr in range(size):
            rr = min(max(r + dr - rad, 0), h - 1)
            row = padded[dr]
            for c in range(w):
                row[c + rad] = img[rr, c]
            for c in range(rad):
                row[c] = img[rr, 0]
                row[w + rad + c] = img[rr, w - 1]
        for c0 in range(0, w, _TILE):
            n = min(_TILE, w - c0)
            for dr in range(size):
                for dc in range(size):
                    dst = buf[dr * size + dc]
                    src = padded[dr]
                    for c in range(n):
                        dst[c] = src[c0 + c + dc]
            for t in range(lo.shape[0]):
                a = buf[lo[t]]
                b = buf[hi[t]]
                for c in range(n):
                    x = a[c]
                    y = b[c]
                    a[c] = min(x, y)
                    b[c] = max(x, y)
            m = buf[mid]
            for c in range(n):
                out[r, c0 + c] = m[c]


def median_filter(img: np.ndarray, size: int = 3, out: np.ndarray | None = None) -> np.ndarray:
    """Median filter of a uint16 image, equal to ``scipy.ndimage.median_filter(img,
    size, mode='nearest')``.

    Parameters
    ----------
    img : (H, W) uint16 array
    size : 3 or 5
        Window side.
    out : (H, W) uint16 array, optional

    Returns
    -------
    out : (H, W) uint16 array
    """
    check_frame("img", img, np.uint16)
    if size not in MEDIAN_SIZES:
        raise KernelArgumentError(f"median size must be one of {MEDIAN_SIZES}, got {size!r}")
    out = check_out("out", out, img.shape, np.uint16)
    lo, hi = _NET3 if size == 3 else _NET5
    median_filter_kernel(np.ascontiguousarray(img), size, lo, hi, out)
    return out


def log_weights(sigma: float, radius: int) -> tuple[np.ndarray, np.ndarray]:
    """1-D Gaussian (order 0) and second-derivative (order 2) weights, length ``2*radius+1``.

    With ``x = -radius..radius``::

        g0[x] = exp(-x**2 / (2 sigma**2)) / sum_x exp(-x**2 / (2 sigma**2))
        g2[x] = g0[x] * (x**2 - sigma**2) / sigma**4

    i.e. the sampled Gaussian normalised to unit sum, and its analytic second
    derivative on the same normalisation: the weights ``scipy.ndimage`` uses
    (``gaussian_filter1d(..., order=0/2, radius=radius)``, the tests' reference),
    so :func:`log_filter` reproduces ``scipy.ndimage.gaussian_laplace(x, sigma,
    mode='nearest', radius=radius)``.  Computed with NumPy so that importing
    this module does not load scipy.
    """
    if not (isinstance(sigma, (int, float)) and np.isfinite(sigma) and sigma > 0):
        raise KernelArgumentError(f"LoG sigma must be a positive number, got {sigma!r}")
    if not (isinstance(radius, (int, np.integer)) and radius >= 1):
        raise KernelArgumentError(f"LoG radius must be an integer >= 1, got {radius!r}")
    sigma2 = float(sigma) * float(sigma)
    x = np.arange(-int(radius), int(radius) + 1, dtype=np.float64)
    g0 = np.exp(-0.5 / sigma2 * x * x)
    g0 /= g0.sum()
    # scipy's polynomial for order 2, -1/sigma^2 + x^2/sigma^4, in its operation order
    a = 1.0 / -sigma2
    g2 = (a + x * x * (a * a)) * g0
    return g0, g2


@njit(cache=True, nogil=True)
def _window_busy(nonzero, r, rad):
    # True if any row within ``rad`` of row ``r`` (clamped at the edges, as
    # mode='nearest') holds a non-zero pixel: otherwise the output row is zero.
    h = nonzero.shape[0]
    for j in range(-rad, rad + 1):
        if nonzero[min(max(r + j, 0), h - 1)]:
            return True
    return False


@njit(cache=True, nogil=True)
def _corr_rows(src, nonzero, wts, dst):
    # Along axis 0, summed in scipy's order for symmetric kernels (centre
    # first, then the outermost pair inwards) so results are bit-identical.
    # A row whose whole window is zero is exactly zero: skipped, which makes
    # background-subtracted NF frames (mostly zero) cheap.
    h, w = src.shape
    rad = (wts.shape[0] - 1) // 2
    for r in range(h):
        if not _window_busy(nonzero, r, rad):
            dst[r, :] = 0.0
            continue
        for c in range(w):
            dst[r, c] = src[r, c] * wts[rad]
        for j in range(rad, 0, -1):
            up = src[max(r - j, 0)]
            dn = src[min(r + j, h - 1)]
            wj = wts[rad - j]
            for c in range(w):
                dst[r, c] += (up[c] + dn[c]) * wj


@njit(cache=True, nogil=True)
def _corr_cols_add(a, wa, b, wb, nonzero, line_a, line_b, acc_b, out):
    # out = corr_axis1(a, wa) + corr_axis1(b, wb), row by row on padded lines,
    # each tap applied to the whole row so the loop vectorises.
    h, w = a.shape
    rad = (wa.shape[0] - 1) // 2
    for r in range(h):
        if not _window_busy(nonzero, r, rad):
            out[r, :] = 0.0
            continue
        for c in range(w):
            line_a[c + rad] = a[r, c]
            line_b[c + rad] = b[r, c]
        for c in range(rad):
            line_a[c] = a[r, 0]
            line_a[w + rad + c] = a[r, w - 1]
            line_b[c] = b[r, 0]
            line_b[w + rad + c] = b[r, w - 1]
        acc_a = out[r]
        for c in range(w):
            acc_a[c] = line_a[c + rad] * wa[rad]
            acc_b[c] = line_b[c + rad] * wb[rad]
        for j in range(rad, 0, -1):
            wja = wa[rad - j]
            wjb = wb[rad - j]
            for c in range(w):
                acc_a[c] += (line_a[c + rad - j] + line_a[c + rad + j]) * wja
                acc_b[c] += (line_b[c + rad - j] + line_b[c + rad + j]) * wjb
        for c in range(w):
            acc_a[c] = acc_a[c] + acc_b[c]


@njit(cache=True, nogil=True)
def log_filter_kernel(img, g0, g2, tmp_a, tmp_b, out):
    """LoG into ``out`` (float64); ``tmp_a``/``tmp_b`` are float64 scratch of img's shape.

    Separable: ``d2/dr2`` term = rows with ``g2`` then columns with ``g0``; the
    ``d2/dc2`` term the other way round; the two are added, as scipy does.
    """
    h, w = img.shape
    rad = (g0.shape[0] - 1) // 2
    src = np.empty((h, w), dtype=np.float64)
    nonzero = np.zeros(h, dtype=np.bool_)
    for r in range(h):
        for c in range(w):
            v = img[r, c]
            src[r, c] = v
            if v != 0:
                nonzero[r] = True
    _corr_rows(src, nonzero, g2, tmp_a)
    _corr_rows(src, nonzero, g0, tmp_b)
    line_a = np.empty(w + 2 * rad, dtype=np.float64)
    line_b = np.empty(w + 2 * rad, dtype=np.float64)
    acc_b = np.empty(w, dtype=np.float64)
    _corr_cols_add(tmp_a, g0, tmp_b, g2, nonzero, line_a, line_b, acc_b, out)


def log_filter(img: np.ndarray, sigma: float, radius: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """Laplacian of Gaussian, equal (to rounding) to
    ``scipy.ndimage.gaussian_laplace(img.astype(float), sigma, mode='nearest', radius=radius)``.

    Parameters
    ----------
    img : (H, W) uint16 or float64 array
    sigma : float
        Gaussian standard deviation in pixels.
    radius : int
        The kernel spans ``2 * radius + 1`` pixels per axis.
    out : (H, W) float64 array, optional

    Returns
    -------
    out : (H, W) float64 array
        Negative inside bright blobs, positive just outside them.
    """
    check_frame("img", img)
    if img.dtype not in (np.uint16, np.float64):
        raise KernelArgumentError(f"img: expected uint16 or float64, got {img.dtype}")
    g0, g2 = log_weights(sigma, radius)
    out = check_out("out", out, img.shape, np.float64)
    tmp_a = np.empty(img.shape, np.float64)
    tmp_b = np.empty(img.shape, np.float64)
    log_filter_kernel(np.ascontiguousarray(img), g0, g2, tmp_a, tmp_b, out)
    return out


@njit(cache=True, nogil=True)
def zero_crossings_kernel(log, out):
    """Mark (1) pixels with ``log < 0`` that lie on the image border or have an
    8-neighbour with ``log >= 0``; others 0.  ``out`` is uint8.

    Treating the outside of the image as non-negative closes the contour of a
    blob cut by the border, so it can still be filled.
    """
    h, w = log.shape
    for r in range(h):
        for c in range(w):
            if not log[r, c] < 0.0:
                out[r, c] = 0
                continue
            if r == 0 or c == 0 or r == h - 1 or c == w - 1:
                out[r, c] = 1
                continue
            edge = 0
            for dr in range(-1, 2):
                for dc in range(-1, 2):
                    if log[r + dr, c + dc] >= 0.0:
                        edge = 1
            out[r, c] = edge


def zero_crossings(log: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Zero-crossing edge mask (uint8 0/1) of a LoG image; see :func:`zero_crossings_kernel`."""
    check_frame("log", log, np.float64)
    out = check_out("out", out, log.shape, np.uint8)
    zero_crossings_kernel(log, out)
    return out
