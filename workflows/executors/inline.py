"""The inline executor: tasks run in the caller, one at a time.

For debugging and tests: a traceback points straight at the task, ``pdb``
works, and with ``debug=True`` every task and every result is pickled and
unpickled, catching the serialization bugs that would otherwise only show up
on a cluster (LiberTEM's InlineJobExecutor does the same).
"""

from __future__ import annotations

import pickle
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional

from core.options import parse_bool

from ..errors import ExecutorError
from .base import Executor, env_option

__all__ = ["InlineExecutor"]


class InlineExecutor(Executor):
    """Run each task immediately in the calling thread.

    Parameters
    ----------
    debug : bool, optional
        Pickle round-trip every task and result. Default: environment variable
        ``WORKFLOWS_INLINE_DEBUG`` (``1``/``0``), else False.
    """

    name = "inline"

    @classmethod
    def run_options(cls, opts: Any, job: Any = None) -> Dict[str, Any]:
        return {"debug": True} if getattr(opts, "debug", False) else {}

    def __init__(self, debug: Optional[bool] = None):
        super().__init__()
        self.debug = bool(env_option(debug, "WORKFLOWS_INLINE_DEBUG", False, parse_bool, "debug"))

    @property
    def workers(self) -> int:
        return 1

    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        self._check_open()
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        try:
            if self.debug:
                fn, args, kwargs = _round_trip((fn, args, kwargs), "task")
            result = fn(*args, **kwargs)
            if self.debug:
                result = _round_trip(result, "result")
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return fut

    def _shutdown(self, wait: bool) -> None:
        pass


def _round_trip(obj: Any, what: str) -> Any:
    try:
        return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        raise ExecutorError(
            f"inline executor (debug=True): the {what} does not survive pickling, so it "
            f"would fail on a real cluster: {type(exc).__name__}: {exc}"
        ) from exc
