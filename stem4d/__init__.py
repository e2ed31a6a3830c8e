"""4D-STEM on live streams and on staged files: electron counting and virtual detectors.

The application on top of mpistage (nothing in the library imports it):

- :class:`stem4d.analysis.Stem4D` -- the analysis (``analyses.contract``
  contract): per frame, on the frames' own dtype, the pixel sum, one virtual
  detector value per mask (``kernels.virtual_detector``) and the counted
  electron events (``kernels.count_electrons``), merged by concatenation;
- :mod:`stem4d.masks` (LiberTEM's mask convention), :mod:`stem4d.counting`
  (thresholds from sampled frames, as stempy computes them), :mod:`stem4d.inputs`
  (dark, gain and mask files);
- :mod:`stem4d.layout` -- the output file (``docs/stem4d-output.md``, which also
  states every convention): the scan-shaped images and the events in stempy's
  sparse layout with its ``/metadata``;
- :mod:`stem4d.flow` -- one flow file for both paths:
  ``stager stream receive --analysis stem4d.flow`` on a stream, and
  ``python -m workflows run stem4d/flow.py -- --frames FILE.h5:/frames`` on a
  staged (or spilled) dataset;
- :mod:`stem4d.synth` -- a synthetic scan written as an HDF5 file (tests, demo).
"""
from __future__ import annotations

import lazy_loader

__all__ = ["Stem4D"]

# loaded on first use (lazy_loader): ``import stem4d`` loads no numpy or numba
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={"analysis": ["Stem4D"]})
