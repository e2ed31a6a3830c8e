"""The MPI receiving job: receivers on the node leaders, workers beside them.

:func:`streams.job.session.receive_scans` (``stager stream receive``) places the
roles (:mod:`~streams.job.roles`), binds or connects each receiver's socket through
its protocol (:mod:`streams.protocols`), runs each rank's loop, one class per role
(:mod:`~streams.job.ranks`, :mod:`~streams.job.receiver_loop`, rank 0's
:mod:`~streams.job.coordinator_loop` over :mod:`~streams.job.coordinator`), publishes
live results (:mod:`~streams.job.live`), spills partitions (:mod:`~streams.job.spill`)
and writes each scan once (:func:`analyses.output.finish`) into a node-local directory of
its own (:mod:`~streams.job.localdir`).
"""
