"""``stager.plan(spec)``: the plan of a spec file, on this process (no MPI)."""
from __future__ import annotations

import os
from typing import Any, Union

from hooks import Spec, load_spec
from stager.planning import build_plan
from stager.planning.plan import Plan

__all__ = ["plan", "load"]

SpecLike = Union[str, "os.PathLike[str]", Any]


def load(spec: SpecLike) -> Any:
    """A ``hooks.Spec`` from a path or a Spec (a ``Plan`` is returned as it is)."""
    if isinstance(spec, (Spec, Plan)):
        return spec
    return load_spec(os.fspath(spec))


def plan(spec: SpecLike, **options: Any) -> Plan:
    """Read and plan ``spec`` here (serial; rank 0's job under MPI).

    Parameters
    ----------
    spec : str, os.PathLike, hooks.Spec or Plan
    **options
        The block kinds' own options, e.g. ``h5_inline_bytes`` (see
        :func:`stager.planning.build_plan`).

    Raises
    ------
    hooks.SpecError
        The spec cannot be read or parsed.
    PlanError
        A block cannot be planned (no match, a conflict, a bad selection).
    """
    s = load(spec)
    return s if isinstance(s, Plan) else build_plan(s, **options)
