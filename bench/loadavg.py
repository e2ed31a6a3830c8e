"""Load average while a benchmark runs: a sampler thread around the measured code.

The figures in bench/results/ are only comparable with the load the machine
carried while they were taken, so every benchmark records the 1-minute load
average before it starts and its minimum, mean and maximum during the run.
The benchmark's own processes count too (N emulated nodes on 2 cores load
it by about N), so "before" is the one that says whether the host was quiet.
"""
from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["LoadSampler"]


class LoadSampler:
    """Sample ``os.getloadavg()[0]`` every ``interval`` seconds while inside ``with``."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self.before = os.getloadavg()[0]
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self.before = os.getloadavg()[0]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, Any]:
        s = self.samples or [self.before]
        return {"before": round(self.before, 2), "min": round(min(s), 2),
                "mean": round(sum(s) / len(s), 2), "max": round(max(s), 2),
                "samples": len(s), "interval_s": self.interval}

    def text(self) -> str:
        d = self.summary()
        return (f"load average {d['before']:.2f} before the run, "
                f"{d['min']:.1f}-{d['max']:.1f} (mean {d['mean']:.1f}) during it")
