"""The two shared resources of the simulated parallel filesystem.

A real PFS has two things every client competes for: the aggregate bandwidth of
its object servers and the service time of its metadata server. Both are
modelled here as objects shared by every FUSE worker thread of one mount, so
concurrent readers slow each other down exactly as they would on a congested
PFS, while a lone reader sees only the configured rate and latency.

Hand-written rather than taken from a library: the accounting must be exact
(tokens consumed == bytes served, asserted by the tests) and the debt-based
bucket below is a dozen lines; the PyPI rate limiters count calls, not bytes,
or are asyncio-only.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["BucketStats", "MetadataServer", "MetadataStats", "TokenBucket"]

MiB = 1 << 20


@dataclass(frozen=True)
class BucketStats:
    """What a `TokenBucket` has handed out so far."""

    rate: float | None
    burst: float
    consumed: int
    requests: int
    seconds_waited: float


@dataclass(frozen=True)
class MetadataStats:
    """What a `MetadataServer` has served so far."""

    latency: float
    slots: int
    ops: int
    seconds_busy: float


class TokenBucket:
    """An aggregate byte-rate cap shared by all threads.

    Every request is charged in full the moment it arrives (the token count may
    go negative: a debt) and the caller then sleeps until the debt it sees is
    repaid. Requests are thus served in arrival order at ``rate`` bytes per
    second on average, bursts of at most ``burst`` bytes pass without delay,
    and ``consumed`` equals the sum of all requests exactly.

    Parameters
    ----------
    rate : float or None
        Bytes per second; ``None`` or 0 means no cap (only counting).
    burst : float, optional
        Bucket depth in bytes; default 10 ms worth of ``rate``, at least 1 MiB.
    """

    def __init__(self, rate: float | None, burst: float | None = None) -> None:
        if rate is not None and rate < 0:
            raise ValueError(f"rate must be >= 0 bytes/s, got {rate}")
        self.rate = float(rate) if rate else None
        if burst is None:
            burst = max(self.rate * 0.01, MiB) if self.rate else 0.0
        if burst < 0:
            raise ValueError(f"burst must be >= 0 bytes, got {burst}")
        self.burst = float(burst)
        self._tokens = self.burst
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._consumed = 0
        self._requests = 0
        self._waited = 0.0

    def take(self, nbytes: int) -> float:
        """Charge ``nbytes`` and block until the cap allows them; return seconds slept."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        with self._lock:
            self._consumed += nbytes
            self._requests += 1
            if self.rate is None:
                return 0.0
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            delay = -self._tokens / self.rate if self._tokens < 0 else 0.0
            self._waited += delay
        if delay > 0:
            time.sleep(delay)
        return delay

    def stats(self) -> BucketStats:
        with self._lock:
            return BucketStats(self.rate, self.burst, self._consumed, self._requests, self._waited)


class MetadataServer:
    """A metadata server with ``slots`` service threads and a fixed service time.

    Each operation occupies one slot for ``latency`` seconds. With the default
    single slot, operations from all clients queue behind each other: one
    client sees ``latency`` per stat/open, N clients hammering it see N times
    that — the metadata congestion of independent per-task reads.

    Parameters
    ----------
    latency : float
        Seconds per operation (>= 0).
    slots : int
        Operations served concurrently (>= 1).
    """

    def __init__(self, latency: float, slots: int = 1) -> None:
        if latency < 0:
            raise ValueError(f"latency must be >= 0 s, got {latency}")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.latency = float(latency)
        self.slots = int(slots)
        self._sem = threading.BoundedSemaphore(self.slots)
        self._lock = threading.Lock()
        self._ops = 0
        self._busy = 0.0

    def serve(self) -> None:
        """Perform one metadata operation: wait for a free slot, hold it ``latency`` s."""
        with self._lock:
            self._ops += 1
        if self.latency <= 0:
            return
        with self._sem:
            time.sleep(self.latency)
        with self._lock:
            self._busy += self.latency

    def stats(self) -> MetadataStats:
        with self._lock:
            return MetadataStats(self.latency, self.slots, self._ops, self._busy)
