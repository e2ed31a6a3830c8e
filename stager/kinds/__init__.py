"""The block kinds: one module each, registered by one row of :mod:`stager.planning.kinds`.

``files`` (whole files, moved by a transfer method) and ``h5`` (HDF5 selections,
copied into node-local HDF5 files). Each module holds everything that is its
kind's own: its entry syntax, planning a block into units, cutting scatter units
for the node count, its transfer, checking a recorded copy, and its words in
``stager plan``; the shared machinery asks the kind, through the table.
"""
