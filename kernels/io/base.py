"""The frame-source base class every detector reader derives from."""
from __future__ import annotations

import numpy as np

from ..errors import ReaderError

__all__ = ["FrameSource"]


class FrameSource:
    n_frames: int
    shape: tuple

    def _check(self, index: int, r0: int = 0, r1: int | None = None):
        if not 0 <= index < self.n_frames:
            raise ReaderError(f"{self}: frame {index} outside 0..{self.n_frames - 1}")
        r1 = self.shape[0] if r1 is None else r1
        if not 0 <= r0 < r1 <= self.shape[0]:
            raise ReaderError(f"{self}: row band {r0}:{r1} outside 0:{self.shape[0]}")
        return r1

    def __len__(self) -> int:
        return self.n_frames

    def read(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frame ``index`` as a (H, W) uint16 array (into ``out`` if given)."""
        return self.read_rows(index, 0, self.shape[0], out)

    def read_rows(self, index, r0, r1, out=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'path', getattr(self, 'pattern', ''))!r})"


