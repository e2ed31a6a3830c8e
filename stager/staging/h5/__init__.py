"""Copying HDF5 selections for the ``h5`` kind (:mod:`stager.kinds.h5`): ``read``, ``write``."""
