"""Copying HDF5 selections for the ``h5`` kind (:mod:`stager.kinds.h5`).

:mod:`stager.staging.h5.read` reads the selections collectively (MPI-IO on the
leader communicator with the MPI build of h5py, independent read-only opens of
disjoint hyperslabs with the serial one); each leader writes its own copy with
:mod:`stager.staging.h5.write` (default driver), checks it by decoding
(:mod:`stager.nodelocal.h5check`) and renames it into place.
"""
