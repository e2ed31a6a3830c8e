"""The Parsl executor: tasks through a Parsl ``DataFlowKernel`` and its executors.

Only Parsl's execution layer is used: our runtime has already resolved every
dependency, so each task reaches Parsl ready to run. The default configuration
is a HighThroughputExecutor with a LocalProvider (one block of workers on this
machine); the Slurm set-up passes its own ``Config`` (SlurmProvider). Parsl is
imported only when this executor is made: importing it takes about a second.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Union, cast

from ..errors import ExecutorError
from core.options import parse_int

from .base import Executor, env_option

__all__ = ["ParslExecutor", "htex_local_config", "threads_config"]

CONFIGS = ("htex-local", "threads")


def _call(node: Optional[str], fn: Callable, *args: Any, **kwargs: Any) -> Any:
    # Module-level so Parsl's serializer sends it by reference. With a named config the
    # workers run beside the submitting rank and take its node; a Config of the user's
    # (e.g. Slurm blocks) runs them elsewhere: they name their own ($STAGER_NODE_ID)
    from workflows.node import set_node

    os.environ["WORKFLOWS_WORKER"] = "1"
    if node:
        set_node(node)
    return fn(*args, **kwargs)


def run_config(executors: List[Any], run_dir: str):
    """A Parsl Config of ``executors`` as every set-up here wants it: no scaling strategy
    (blocks are fixed), Parsl's logging and usage tracking off."""
    from parsl.config import Config

    return Config(executors=executors, run_dir=run_dir, strategy="none",
                  initialize_logging=False, usage_tracking=0)


def htex_config(provider: Any, workers: int, run_dir: str, label: str = "htex_local",
                address: str = "127.0.0.1", heartbeat_threshold: int = 10):
    """A Parsl Config of one HighThroughputExecutor on ``provider``'s blocks, ``workers``
    per node, set up as every configuration here wants it."""
    from parsl.executors import HighThroughputExecutor

    htex = HighThroughputExecutor(
        label=label, address=address, max_workers_per_node=workers, cores_per_worker=1e-6,
        encrypted=False, heartbeat_period=2, heartbeat_threshold=heartbeat_threshold,
        poll_period=1, worker_logdir_root=run_dir, provider=provider)
    return run_config([htex], run_dir)


def htex_local_config(workers: int, run_dir: str):
    """A Parsl Config: one HighThroughputExecutor block of ``workers`` on this machine."""
    from parsl.providers import LocalProvider

    # The worker pool script lives next to this interpreter; the provider's
    # shell may not have it on PATH.
    bindir = os.path.dirname(sys.executable)
    provider = LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1,
                             worker_init=f"export PATH={bindir}:$PATH")
    return htex_config(provider, workers, run_dir)


def threads_config(workers: int, run_dir: str):
    """A Parsl Config with Parsl's ThreadPoolExecutor (no worker processes)."""
    from parsl.executors.threads import ThreadPoolExecutor

    return run_config([ThreadPoolExecutor(max_threads=workers, label="threads")], run_dir)


def _put_interpreter_on_path() -> None:
    # Parsl starts its interchange and worker pool as commands found on PATH
    # (interchange.py, process_worker_pool.py); they are installed next to this
    # interpreter, which a venv used without activation leaves off PATH.
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + path


class ParslExecutor(Executor):
    """Tasks on Parsl.

    Parameters
    ----------
    config : parsl.config.Config or str, optional
        A Parsl Config, or ``"htex-local"`` (default) / ``"threads"``; default
        from ``WORKFLOWS_PARSL_CONFIG``.
    workers : int, optional
        Workers for the named configs; default ``WORKFLOWS_PARSL_WORKERS``,
        else the number of CPUs.
    run_dir : str, optional
        Parsl's run directory (logs); default a temporary directory, removed
        at a clean shutdown.
    """

    name = "parsl"

    @classmethod
    def run_options(cls, opts: Any, job: Any = None) -> Dict[str, Any]:
        return {"workers": opts.workers, "config": opts.parsl_config}

    def __init__(self, config: Union[None, str, Any] = None, workers: Optional[int] = None,
                 run_dir: Optional[str] = None):
        super().__init__()
        config = config or os.environ.get("WORKFLOWS_PARSL_CONFIG") or "htex-local"
        self._workers = env_option(workers, "WORKFLOWS_PARSL_WORKERS", os.cpu_count() or 1,
                                   parse_int(1), "workers")
        self._tmp = None
        if run_dir is None:
            run_dir = self._tmp = tempfile.mkdtemp(prefix="workflows-parsl-")
        self._beside = isinstance(config, str)   # the workers run on this node
        if isinstance(config, str):
            if config not in CONFIGS:
                raise ExecutorError(
                    f"parsl config {config!r}: expected one of {CONFIGS} or a Config"
                )
            make = htex_local_config if config == "htex-local" else threads_config
            config = make(self._workers, run_dir)
        _put_interpreter_on_path()
        from parsl import python_app
        from parsl.dataflow.dflow import DataFlowKernel

        try:
            self._dfk = DataFlowKernel(cast(Any, config))
        except Exception as exc:
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
            raise ExecutorError(f"Parsl could not start: {type(exc).__name__}: {exc}") from exc
        self._app = python_app(_call, data_flow_kernel=self._dfk)

    @property
    def workers(self) -> int:
        return self._workers

    def submit(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        self._check_open()
        from workflows.node import this_node

        return self._app(this_node() if self._beside else None, fn, *args, **kwargs)

    def _shutdown(self, wait: bool) -> None:
        self._dfk.cleanup()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
