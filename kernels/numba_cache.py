"""Compile the kernels once per node into a node-local numba cache.

Why: every ``@njit(cache=True)`` kernel compiles on first call (seconds each).
Under MPI, N ranks on a node would compile N times and race on the shared
``__pycache__``.  Instead one rank per node (a leader hook) calls
:func:`warm_cache` with a node-local directory before tasks start; after a
barrier, every rank calls :func:`use_cache_dir` with the same directory and
loads the compiled code from there.

How it must be called
---------------------
numba fixes a function's cache location when the function is *decorated*,
i.e. when its module is imported, from ``numba.config.CACHE_DIR`` (read from
the ``NUMBA_CACHE_DIR`` environment variable when numba is first imported).
So either export ``NUMBA_CACHE_DIR`` before Python starts (``mpirun -x
NUMBA_CACHE_DIR=...``), or call :func:`use_cache_dir` -- which sets both the
variable and ``numba.config.CACHE_DIR`` and re-points the cache of every kernel
already imported -- before the first kernel call.

:func:`warm_cache` compiles in a fresh subprocess with ``NUMBA_CACHE_DIR`` set,
so it works whatever the caller has imported, needs no MPI, and leaves the
compiler's memory behind.  Run ``python -m kernels.numba_cache DIR`` for the
same from a shell.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from .errors import CacheError

__all__ = ["WarmReport", "warm_cache", "use_cache_dir", "kernel_dispatchers",
           "exercise_kernels", "cache_counts", "leader_hook"]

_MODULES = ("filters", "label", "nf", "ff", "stem",
            # NF-HEDM stage 2 (orientation fitting); nffit.exercise() compiles them all
            "crystal", "nfgrid", "nfmodel", "nfconfidence", "nffit", "microstructure",
            # FF-HEDM stage 2 (indexing, refinement); ffindex.exercise() compiles them all
            "ffmodel", "ffindex")


@dataclass(frozen=True)
class WarmReport:
    """What :func:`warm_cache` did: the directory, index files present, compile seconds."""

    cache_dir: str
    index_files: int
    seconds: float
    functions: int


def kernel_dispatchers() -> dict:
    """``{"module.name": dispatcher}`` for every numba kernel of the package (imports them)."""
    from numba.core.registry import CPUDispatcher

    found = {}
    for mod_name in _MODULES:
        mod = importlib.import_module(f"{__package__}.{mod_name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                found[f"{mod_name}.{name}"] = obj
    return found


def use_cache_dir(cache_dir: str) -> str:
    """Point numba's cache, and every already imported kernel, at ``cache_dir``.

    Call it in every process before the first kernel call (see the module
    docstring).  Returns the absolute directory.

    Raises
    ------
    CacheError
        If the directory cannot be created or written.
    """
    import numba

    path = os.path.abspath(os.fspath(cache_dir))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"numba cache dir {path!r} cannot be created: {exc.strerror}") from exc
    if not os.access(path, os.W_OK):
        raise CacheError(f"numba cache dir {path!r} is not writable; pass a node-local directory")
    os.environ["NUMBA_CACHE_DIR"] = path
    numba.config.CACHE_DIR = path
    prefix = f"{__package__}."
    for mod_name in list(sys.modules):
        if mod_name.startswith(prefix) and mod_name[len(prefix):] in _MODULES:
            # Re-create each cache object: its locator reads config.CACHE_DIR now.
            for disp in kernel_dispatchers().values():
                disp.enable_caching()
            break
    return path


def exercise_kernels() -> None:
    """Call every kernel once on tiny inputs with the production dtypes, so each
    compiles (or loads from the cache) the signatures the workflows use -- the
    NF-HEDM stage-2 kernels too (:func:`kernels.nffit.exercise`, read-only images
    as a worker's memory map gives them) and FF-HEDM stage 2's
    (:func:`kernels.ffindex.exercise`), so fitting tasks never compile."""
    import numpy as np

    from . import ff, ffindex, filters, label, nf, nffit, stem

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 500, (16, 16)).astype(np.uint16)
    bg = np.full((16, 16), 100, np.uint16)
    for size in filters.MEDIAN_SIZES:
        filters.median_filter(frame, size)
    filters.zero_crossings(filters.log_filter(frame, 1.0, 4))
    filters.log_filter(frame.astype(np.float64), 1.0, 4)
    label.label8(frame > 200)
    label.fill_holes(frame > 200)
    nf.median_background(np.stack([frame, bg, frame]))
    nf.subtract_background(frame, bg, 10)
    for size in filters.MEDIAN_SIZES:
        nf.reduce_frame(frame, bg, nf.NFParams(offset=10, median_size=size))
    ff.find_peaks(frame, bg.astype(np.float32), ff.FFParams(threshold=100))
    masks = np.stack([stem.ring_mask((16, 16), (8, 8), 0, 4),
                      stem.ring_mask((16, 16), (8, 8), 4, 8)])
    stem.virtual_detector(frame[None], masks)
    stem.virtual_detector(frame[None].astype(np.float32), masks)
    stem.count_electrons(frame, bg.astype(np.float32), 50.0, 1000.0)
    stem.frame_sums(frame[None])
    nffit.exercise()
    ffindex.exercise()


def cache_counts() -> dict:
    """``{"module.name": (cache_hits, cache_misses)}`` summed over signatures, this process."""
    out = {}
    for name, disp in kernel_dispatchers().items():
        out[name] = (sum(disp.stats.cache_hits.values()), sum(disp.stats.cache_misses.values()))
    return out


def _index_files(path: str) -> int:
    return sum(f.endswith(".nbi") for _, _, files in os.walk(path) for f in files)


def warm_cache(cache_dir: str, timeout: float = 900.0) -> WarmReport:
    """Compile every kernel into ``cache_dir`` (in a subprocess); no MPI needed.

    Call it on one process per node (e.g. from a leader hook), then barrier,
    then :func:`use_cache_dir` on every rank.  Idempotent: a warm directory
    only loads.

    Raises
    ------
    CacheError
        If the directory is unusable or the compiling subprocess fails.
    """
    path = os.path.abspath(os.fspath(cache_dir))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"numba cache dir {path!r} cannot be created: {exc.strerror}") from exc
    env = dict(os.environ, NUMBA_CACHE_DIR=path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", f"{__package__}.numba_cache", path],
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise CacheError(f"compiling kernels into {path!r} took over {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise CacheError(f"compiling kernels into {path!r} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr.strip()[-2000:]}")
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    return WarmReport(path, _index_files(path), time.perf_counter() - t0, len(counts))


def leader_hook(ctx: object = None) -> WarmReport:
    """Startup leader hook: compile once on this node into ``$NUMBA_CACHE_DIR``.

    Use as ``python -m workflows run FLOW --leader-hook-startup
    kernels.numba_cache:leader_hook`` with ``NUMBA_CACHE_DIR`` exported to every
    rank (``mpirun -x NUMBA_CACHE_DIR=/local/dir``) and pointing at node-local
    storage: the runner calls this on one rank per node and holds every task
    behind a barrier until each node's hook has returned, so no rank compiles.

    Raises
    ------
    CacheError
        ``NUMBA_CACHE_DIR`` is unset (every rank would compile into its own
        ``__pycache__``), or compiling failed.
    """
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if not cache_dir:
        raise CacheError("NUMBA_CACHE_DIR is not set: export a node-local directory to every "
                         "rank (mpirun -x NUMBA_CACHE_DIR=DIR) before using this leader hook")
    return warm_cache(cache_dir)


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kernels.numba_cache CACHE_DIR", file=sys.stderr)
        return 2
    use_cache_dir(argv[0])
    exercise_kernels()
    print(json.dumps(cache_counts()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
