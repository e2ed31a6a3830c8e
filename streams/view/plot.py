"""A matplotlib figure of a scan's images that updates in place, as LiberTEM's ``plots=True``.

``job.plot("s1")`` (docs/guide/streaming.md): in Jupyter the figure is shown once
with a display id and each update replaces that output (as LiberTEM's
``MPLLive2DPlot``), whatever the backend; elsewhere it is a plain
:class:`matplotlib.figure.Figure` redrawn on its canvas. Positions not in yet are
drawn purple, as on the web page.
"""
from __future__ import annotations

import base64
import io
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

__all__ = ["LivePlot"]


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class LivePlot:
    """One figure of the images ``names`` (default: every 2-D image of the first partial);
    ``updates`` partials drawn, the last as ``partial``; ``handle`` the Jupyter output."""

    def __init__(self, names: Optional[Sequence[str]] = None, cmap: str = "viridis",
                 log: bool = False, display: Optional[bool] = None) -> None:
        import matplotlib
        from matplotlib.figure import Figure

        self.names: Optional[List[str]] = None if names is None else list(names)
        self.cmap = matplotlib.colormaps[cmap].with_extremes(bad=(70 / 255, 20 / 255, 90 / 255))
        self.log = log
        self.fig = Figure(layout="constrained")
        self.updates = 0
        self.partial: Any = None
        self._shown: Dict[str, Any] = {}
        self._display = _in_kernel() if display is None else display
        self.handle: Any = None

    def _layout(self, p: Any) -> None:
        names = self.names or [n for n, a in p.images.items() if np.ndim(a) == 2]
        self.names = names
        n = max(1, len(names))
        self.fig.set_size_inches(min(4.0 * n, 16.0), 4.2)
        for i, name in enumerate(names):
            ax = self.fig.add_subplot(1, n, i + 1)
            ax.set_title(name, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            img = ax.imshow(np.zeros(np.shape(p.images[name])), cmap=self.cmap,
                            interpolation="nearest")
            self.fig.colorbar(img, ax=ax, shrink=0.8)
            self._shown[name] = img

    def _data(self, p: Any, name: str) -> np.ma.MaskedArray:
        a = np.asarray(p.images[name], np.float64)
        bad = ~np.isfinite(a)
        if p.valid.shape == a.shape:        # a scan-shaped image: positions not in yet
            bad |= ~p.valid
        if self.log and (~bad).any():
            a = np.log1p(np.clip(a - a[~bad].min(), 0, None))
        return np.ma.masked_array(a, bad)

    def update(self, p: Any) -> None:
        """Draw partial ``p`` (a :class:`streams.view.Partial`) in place."""
        if not self._shown:
            self._layout(p)
        for name, img in self._shown.items():
            if name not in p.images:
                continue
            d = self._data(p, name)
            img.set_data(d)
            good = d.compressed()
            if good.size:
                lo, hi = float(good.min()), float(good.max())
                img.set_clim(lo, hi if hi > lo else lo + 1)
        done = "final" if p.final else "partial"
        self.fig.suptitle(f"scan {p.scan}: {p.complete}/{p.frames} complete, "
                          f"{p.missing} missing, {p.rejected} rejected ({done})", fontsize=10)
        self.partial = p
        self.updates += 1
        if self._display:
            from IPython.display import display

            bundle = {"image/png": base64.b64encode(self._png()).decode(),
                      "text/plain": repr(self)}
            if self.handle is None:
                self.handle = display(bundle, raw=True, display_id=True)
            else:
                self.handle.update(bundle, raw=True)
        else:
            self.fig.canvas.draw()

    def image(self, name: str) -> np.ndarray:
        """What the figure shows for ``name`` now (NaN where masked)."""
        d = self._shown[name].get_array()
        return np.ma.filled(np.ma.asarray(d, np.float64), np.nan)

    def __repr__(self) -> str:
        p = self.partial
        what = "nothing yet" if p is None else f"scan {p.scan}, {p.complete}/{p.frames}"
        return f"<LivePlot {', '.join(self.names or [])}: {what}, {self.updates} updates>"

    def _repr_png_(self) -> Optional[bytes]:
        """The figure as PNG (a notebook shows a plot it returns, when not shown already)."""
        return None if self.handle is not None else self._png()

    def _png(self) -> bytes:
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=80)
        return buf.getvalue()
