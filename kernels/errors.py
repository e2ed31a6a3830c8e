"""The kernels package's error hierarchy, rooted in :class:`KernelError`.

Kernels themselves (the ``@njit`` functions) never raise: their Python wrappers
validate shapes, dtypes and parameters first and raise one of these with a
message that says what to pass instead.
"""
from __future__ import annotations

__all__ = ["KernelError", "KernelArgumentError", "ReaderError", "CacheError"]


class KernelError(Exception):
    """Base class of every error the kernels package raises on purpose."""


class KernelArgumentError(KernelError, ValueError):
    """An array has the wrong shape/dtype, or a parameter is out of range."""


class ReaderError(KernelError):
    """A detector file is missing, truncated or not in the expected layout."""


class CacheError(KernelError):
    """The numba cache directory cannot be used or warming it failed."""


def check_frame(name: str, a, dtype=None, ndim: int = 2):
    """Return ``a`` if it is a C-contiguous array of ``ndim`` dims (and ``dtype``).

    Raises
    ------
    KernelArgumentError
        Naming the argument and what was expected.
    """
    import numpy as np

    if not isinstance(a, np.ndarray):
        raise KernelArgumentError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.ndim != ndim:
        raise KernelArgumentError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if dtype is not None and a.dtype != np.dtype(dtype):
        raise KernelArgumentError(
            f"{name}: expected dtype {np.dtype(dtype)}, got {a.dtype}; convert with "
            f".astype(np.{np.dtype(dtype).name})")
    if 0 in a.shape:
        raise KernelArgumentError(f"{name}: empty array of shape {a.shape}")
    return a


def check_out(name: str, out, shape, dtype):
    """Allocate ``out`` if None, else check it is a writeable C-contiguous match."""
    import numpy as np

    if out is None:
        return np.empty(shape, dtype=dtype)
    if (not isinstance(out, np.ndarray) or out.shape != tuple(shape)
            or out.dtype != np.dtype(dtype) or not out.flags.c_contiguous
            or not out.flags.writeable):
        got = (getattr(out, "shape", None), getattr(out, "dtype", None))
        raise KernelArgumentError(
            f"{name}: expected a writeable C-contiguous {np.dtype(dtype)} array of shape "
            f"{tuple(shape)}, got shape/dtype {got}")
    return out
