"""A Python file imported as a module of its own (``--analysis FILE.py``, ``udf:FILE.py:CLASS``)."""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from streams.errors import StreamError

__all__ = ["load_file"]


def load_file(path: str) -> Any:
    """Import the Python file ``path`` as a module of its own."""
    name = "mpistage_flow_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StreamError(f"cannot load analysis file {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
