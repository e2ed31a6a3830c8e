"""The copies on each node: safe local writes, checksums, the per-spec records,
free space, and the collective ``verify`` and ``clean`` that work from the records.

Modules: ``localfs`` (private directories, no symlinks, temp file + atomic
rename), ``commit`` (the one commit path: temporary names, journal before
rename), ``trusted`` (``O_NOFOLLOW`` directory descriptors, owner and mode
checks), ``state`` (a root's ``.stager/`` directory), ``lock`` (one run per root),
``journal`` (append-only lines that survive kills), ``record`` (what a node holds
in one root for one spec), ``checksum`` (XXH3-128 end to end), ``space`` (free
space, pure shortfall rule), ``roots`` (a node's destination roots, locked),
``verify``, ``clean``. The layout on disk: ``docs/staging-state.md``.
"""
