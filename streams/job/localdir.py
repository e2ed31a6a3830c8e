"""The node-local directory of a receiving job's outputs, trusted like a staging root.

Rank 0 writes each scan's files into its node's directory of the ``--local`` template
(``%n`` = node) before they are drained to ``OUT``; another user who could put a file
there would have it drained as the scan's. So the default is a new directory per job
(:func:`default_local`: ``mkdtemp``, a name nobody can guess from the pid, ``0700``), and
a given template is checked when the job starts (:func:`node_local_dir`) under the rule
of :mod:`core.trusted`: the node's directory and every level below it must
be the user's and writable by nobody else, created ``0700`` without following links.
"""
from __future__ import annotations

import os
import stat
import tempfile

from core import localfs
from core.trusted import describe_shared_dir
from core.nodes import expand_node

__all__ = ["default_local", "local_root", "node_local_dir"]


def default_local() -> str:
    """A new private directory for this job (``/tmp/mpistage-stream-UID-XXXXXXXX``, made
    ``0700`` by ``mkdtemp``: its ``mkdir`` fails on anything planted), with ``/%n``."""
    made = tempfile.mkdtemp(prefix=f"mpistage-stream-{os.getuid()}-", dir="/tmp")
    return os.path.join(made, "%n")


def local_root(template: str) -> str:
    """The directory of a node-local template above its first ``%n`` component (the
    template itself without one): what must be the user's own. Pure."""
    parts = os.path.abspath(template).split(os.sep)
    for i, part in enumerate(parts):
        if "%n" in part:
            return os.sep.join(parts[:i]) or os.sep
    return os.path.abspath(template)


def node_local_dir(template: str, node: str, create: bool) -> str:
    """This node's directory of ``template``, created (missing levels ``0700``, no link
    followed) or only checked, as staging roots are: it and every level below
    :func:`local_root` that exists must be a directory of the user's that nobody else can
    write -- except that a level above the node's directory may be a sticky directory of
    root's or the user's (``/tmp``: ``--local /tmp/%n``) -- and the root's parent must not
    let anyone replace it (world-writable without the sticky bit).

    Raises
    ------
    core.localfs.UnsafePathError
        Naming the directory and why.
    """
    root = local_root(template)
    path = localfs.inside(root, expand_node(template, node))
    parent = os.path.dirname(root)
    if os.path.isdir(parent):
        refusal, _ = describe_shared_dir(os.stat(parent))
        if refusal is not None:
            raise localfs.UnsafePathError(f"node-local directory {template}: refusing "
                                          f"{parent}: {refusal}")
    rel = os.path.relpath(path, root)
    levels = [root] + [os.path.join(root, *rel.split(os.sep)[:i + 1])
                       for i in range(len(rel.split(os.sep))) if rel != "."]
    for level in levels:
        try:
            st = os.lstat(level)
        except FileNotFoundError:
            if not create:
                break
            os.makedirs(level, 0o700, exist_ok=True)   # another rank's mkdir: checked next
            st = os.lstat(level)
        why = localfs.describe_untrusted(st) or \
            (None if stat.S_ISDIR(st.st_mode) else "it is not a directory")
        shared = level != path and stat.S_ISDIR(st.st_mode) and \
            bool(st.st_mode & stat.S_ISVTX) and st.st_uid in (0, os.geteuid())
        if why is not None and not shared:
            raise localfs.UnsafePathError(f"refusing the node-local directory {level}: {why}")
    return path
