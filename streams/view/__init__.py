"""Looking at a running receiving job: a Python handle and a browser view.

- :func:`attach` / :class:`LiveJob`: a notebook's handle on a job by its rendezvous
  file and the viewers' certificate -- partial results as they arrive
  (:class:`Partial`: progress per receiver, each analysis's images as NumPy arrays),
  the final result, the report and the rejections. :func:`launch` starts a receiving
  job with ``mpirun``, :func:`launch_sbatch` submits it to Slurm
  (``slurm/stream-session.sbatch``); both return the same handle. :meth:`LiveJob.frame`: one scan
  position's frame, through the job; :meth:`LiveJob.udf_iter`: a LiberTEM UDF's
  partials as ``run_udf_iter`` gives them; :meth:`LiveJob.plot` (:class:`LivePlot`):
  a matplotlib figure updated in place, in Jupyter as LiberTEM's ``plots=True``.
- ``stager stream view RV.json`` (:mod:`streams.view.server`): one web page per job,
  images pushed over a WebSocket as partial results arrive.

Both read the job's live socket through :class:`streams.job.live.LiveView`, the
subscriber ``stager stream watch`` uses; neither can write to the job.
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
