"""Staging: execute a plan collectively, so every node holds a verified replica.

:func:`stager.staging.pipeline.stage` runs the phases once for every block
kind -- plan (rank 0, one broadcast) → nodes → resume → capacity → prepare →
transfer → record → report -- and each kind plugs its own transfer into that
pipeline through the table in :mod:`stager.planning.kinds` (the kinds are
:mod:`stager.kinds`): ``files`` moves bytes with the methods of
:mod:`stager.staging.transfer`, ``h5`` copies HDF5 selections with
:mod:`stager.kinds.h5`.
"""
