"""Looking at a running receiving job: a Python handle and a browser view.

:func:`attach` / :class:`LiveJob` give a notebook partial results as they arrive
(:class:`Partial`), the final result, report and rejections, one position's frame
(:meth:`LiveJob.frame`), a LiberTEM UDF's partials (:meth:`LiveJob.udf_iter`) and a
figure updated in place (:meth:`LiveJob.plot`); :func:`launch` and
:func:`launch_sbatch` start a job and return the same handle. ``stager stream view``
(:mod:`streams.view.server`) serves a web page per job. Both subscribe to the job's
live socket (:class:`streams.job.live.LiveView`) and cannot write to it.
"""
from __future__ import annotations

import lazy_loader

__all__ = ["attach", "launch", "launch_sbatch", "SlurmJob", "LiveJob", "Partial", "JobEnded",
           "Frame", "FrameRefused", "LivePlot"]

__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "client": ["attach", "LiveJob"],
    "launch": ["launch", "launch_sbatch", "SlurmJob"],
    "results": ["Partial", "JobEnded", "Frame", "FrameRefused"],
    "plot": ["LivePlot"],
})
