"""The copies on each node: safe local writes, checksums, the per-destination record,
free space, and the collective ``verify`` and ``clean`` that work from the records.

Modules: ``localfs`` (private directories, no symlinks, temp file + atomic
rename), ``checksum`` (XXH3-128 end to end), ``record`` (what a node holds in
one destination root), ``space`` (free space, pure shortfall rule), ``roots``
(a node's destination roots), ``verify``, ``clean``.
"""
