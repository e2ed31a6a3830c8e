"""The block kinds, one module each (``files``, ``h5``), each registered by one row of
:mod:`stager.planning.kinds`, the table that says what a kind brings."""
