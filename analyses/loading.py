"""Loading an analysis by name: ``pkg.module:NAME``, ``FILE.py[:NAME]``, ``udf:MODULE:CLASS``.

Apart from the contract (:mod:`analyses.contract`) so that the contract does not
import the LiberTEM adapter (:mod:`analyses.udf`), which builds on it.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

from analyses.contract import Analysis, FrameSum
from analyses.errors import AnalysisError
from core.table import load_object

__all__ = ["load_analysis", "analysis_options", "DEFAULT_NAME", "ANALYSES"]

#: Name looked up in a flow file when ``--analysis FILE.py`` names no object.
DEFAULT_NAME = "ANALYSIS"

#: The analyses this project ships (``--analysis NAME``), listed when a name is not found.
ANALYSES = ("sum", "stem4d.flow", "hedm.ffpeaks", "hedm.nfreduce")


def _known(where: str) -> str:
    """What to say after an analysis ``where`` that is not one: a suggestion, the list."""
    close = [a for a in ANALYSES if a.startswith(where + ".")]
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (f"{hint}the analyses shipped: {', '.join(ANALYSES)}; or give pkg.module[:NAME], "
            "FILE.py[:NAME] or udf:MODULE:CLASS")


def analysis_options(analysis_params: Optional[str], sets: Sequence[str] = ()) -> Any:
    """An analysis's options from ``--analysis-params JSON`` or ``--set KEY=VALUE`` items
    (values JSON where they parse, else strings), not both."""
    if analysis_params is None:
        out: Dict[str, Any] = {}
        for it in sets:
            k, sep, v = it.partition("=")
            if not sep or not k:
                raise ValueError(f"--set {it!r}: expected KEY=VALUE")
            try:
                out[k] = json.loads(v)
            except ValueError:
                out[k] = v
        return out
    if sets:
        raise ValueError("give --set or --analysis-params, not both")
    try:
        value = json.loads(analysis_params)
    except ValueError as e:
        raise ValueError(f"--analysis-params: not JSON: {e}") from e
    if not isinstance(value, (dict, list)):
        raise ValueError("--analysis-params: expected a JSON object (or a list of objects)")
    return value


def load_analysis(spec: Optional[str], options: Any = None, *, roi: Any = None,
                  corrections: Any = None) -> Analysis:
    """The analysis named by ``spec``; :class:`FrameSum` when ``spec`` is None.

    ``spec``: ``pkg.module[:NAME]`` (default name ``ANALYSIS``), ``path/flow.py[:NAME]``
    or ``udf:MODULE:CLASS`` (:mod:`analyses.udf`); ``NAME`` is an :class:`Analysis` or a
    callable returning one, called with ``options``. ``roi`` and ``corrections`` are a
    ``udf:`` analysis's only. AnalysisError when it does not exist or is no analysis.
    """
    if spec is not None and spec.startswith("udf:"):
        # LiberTEM UDFs: options are their keyword arguments (a list for several UDFs)
        from analyses.udf import load_udf_analysis

        return load_udf_analysis(spec, options, roi=roi, corrections=corrections)
    if roi is not None or corrections not in (None, "none"):
        raise AnalysisError(f"--udf-roi and --corrections apply to udf: analyses (LiberTEM "
                            f"UDFs), not to {spec or 'the per-frame sum'}")
    options = dict(options or {})
    if spec is None or spec in ("sum", "FrameSum"):
        obj: Any = FrameSum
    else:
        try:
            obj = load_object(spec, DEFAULT_NAME)
        except (ImportError, OSError) as e:
            where = spec.rpartition(":")[0] or spec
            raise AnalysisError(f"cannot load analysis {spec!r}: {e}; {_known(where)}") from e
    if not isinstance(obj, Analysis):
        if not callable(obj):
            raise AnalysisError(f"analysis {spec!r} is neither an Analysis nor a callable")
        obj = obj(**options)
    elif options:
        raise AnalysisError(f"analysis {spec!r} is an instance: options {sorted(options)} "
                          "cannot be applied (name a class instead)")
    if not isinstance(obj, Analysis):
        raise AnalysisError(f"analysis {spec!r} returned {type(obj).__name__}, not an Analysis")
    return obj
