"""The copies on each node: the per-spec records, free space, and the collective
``verify`` and ``clean`` that work from the records.

Written and opened through the shared base's local files (``core.localfs``,
``core.commit``, ``core.trusted``, ``core.checksum``). Modules: ``state`` (a root's
``.stager/`` directory), ``lock`` (one run per root), ``journal`` (append-only lines
that survive kills), ``record`` (what a node holds in one root for one spec),
``space`` (free space, pure shortfall rule), ``roots`` (a node's destination roots,
locked), ``verify``, ``clean``. The layout on disk: ``docs/staging-state.md``.
"""
