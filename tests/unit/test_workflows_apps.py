"""Apps, futures and the runtime: dependencies, concurrency, retries, failures (serial)."""
from __future__ import annotations

import os
import pickle
import threading
import time

import pytest

from workflows import (
    DependencyFailure,
    ExecutorError,
    NoExecutorError,
    TaskFailure,
    app,
    executors,
    wait_all,
)
from workflows.futures import find_futures, substitute


@app
def record(log_dir, name, *inputs):
    """Append this task's start and end times to LOG_DIR/NAME; return NAME + inputs."""
    start = time.time()
    time.sleep(0.05)
    end = time.time()
    with open(os.path.join(log_dir, name), "w") as fh:
        fh.write(f"{start} {end}")
    return name + "".join(inputs)


@app
def sleep_interval(seconds):
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), os.getpid()


@app
def add(a, b):
    return a + b


@app
def total(values, extra):
    flat = [v for item in values for v in (item if isinstance(item, list) else [item])]
    return sum(flat) + sum(extra.values())


@app
def fail(x):
    raise ValueError(f"cannot handle {x}")


@app(retries=2)
def flaky(counter_path, fail_times):
    """Fail the first ``fail_times`` attempts (counted in a file: attempts may run anywhere)."""
    with open(counter_path, "a+") as fh:
        fh.seek(0)
        n = len(fh.read())
        fh.write("x")
    if n < fail_times:
        raise RuntimeError(f"attempt {n + 1} fails")
    return n + 1


@app
def returns_lock():
    return threading.Lock()


def interval(log_dir, name):
    with open(os.path.join(log_dir, name)) as fh:
        start, end = map(float, fh.read().split())
    return start, end


@pytest.fixture(params=["inline", "local"])
def executor(request):
    options = {"max_workers": 2} if request.param == "local" else {"debug": True}
    with executors.make(request.param, **options) as ex:
        yield ex


def test_dependency_order(executor, tmp_path):
    d = str(tmp_path)
    a = record(d, "a")
    b = record(d, "b", a)
    c = record(d, "c", a)
    e = record(d, "e", b, c)
    assert e.result() == "eba" + "ca"
    ends = {n: interval(d, n) for n in "abce"}
    assert ends["a"][1] <= ends["b"][0] and ends["a"][1] <= ends["c"][0]
    assert max(ends["b"][1], ends["c"][1]) <= ends["e"][0]


def test_nested_future_arguments(executor):
    xs = [add(i, 1) for i in range(5)]
    res = total((xs[0], [xs[1], xs[2]]), {"k": xs[3], "j": 10})
    assert res.result() == 1 + 2 + 3 + 4 + 10


def test_independent_tasks_overlap():
    with executors.make("local", max_workers=2) as ex:
        # Warm both workers so the pair below starts together.
        wait_all([sleep_interval(0.01) for _ in range(4)])
        a, b = sleep_interval(0.5), sleep_interval(0.5)
        (s1, e1, p1), (s2, e2, p2) = a.result(), b.result()
        assert ex.workers == 2
    assert p1 != p2
    assert max(s1, s2) < min(e1, e2), "two independent tasks did not run at the same time"


def test_retries_then_success(executor, tmp_path):
    fut = flaky(str(tmp_path / "count"), 2)
    assert fut.result() == 3
    assert fut.task.attempts == 3


def test_retries_exhausted(executor, tmp_path):
    fut = flaky(str(tmp_path / "count"), 5)
    with pytest.raises(TaskFailure) as info:
        fut.result()
    assert info.value.attempts == 3
    assert "after 3 attempts" in str(info.value)
    assert "attempt 3 fails" in str(info.value)


def test_failure_names_task_args_where_and_traceback(executor):
    fut = fail("frame-0042.tif")
    err = fut.exception()
    assert isinstance(err, TaskFailure)
    text = str(err)
    assert "fail#" in text and "frame-0042.tif" in text and "ValueError" in text
    assert f"on {os.uname().nodename}" in text or "on " in err.where
    assert "raise ValueError" in err.remote_traceback
    assert "--- remote traceback ---" in err.details()
    pickle.loads(pickle.dumps(err))  # errors cross process boundaries too


def test_failure_propagates_to_dependents(executor):
    bad = fail(1)
    mid = add(bad, 1)
    last = add(mid, add(2, 3))
    for f in (mid, last):
        err = f.exception(timeout=60)
        assert isinstance(err, DependencyFailure)
        assert "cannot handle 1" in str(err) and "fail#" in str(err)
    rt = executor.runtime
    assert rt.wait(timeout=60)
    assert len(rt.failures) == 1 and len(rt.skipped) == 2
    assert "1 failed, 2 not run" in rt.summary()


def test_long_failing_chain_does_not_recurse(executor):
    fut = fail(0)
    for _ in range(3000):
        fut = add(fut, 1)
    assert isinstance(fut.exception(timeout=120), DependencyFailure)


def test_long_chain_inline():
    with executors.make("inline") as _:
        fut = add(0, 1)
        for _ in range(5000):
            fut = add(fut, 1)
        assert fut.result() == 5001


def test_inline_debug_catches_unpicklable_result():
    with executors.make("inline", debug=True):
        err = returns_lock().exception()
    assert isinstance(err, TaskFailure)
    assert "does not survive pickling" in str(err)


def test_no_executor_error():
    with pytest.raises(NoExecutorError, match="no executor is active"):
        add(1, 2)


def test_submit_after_shutdown_fails_not_hangs():
    ex = executors.make("inline")
    ex.shutdown()
    with ex:
        pass  # entering a shut-down executor is allowed; calls fail cleanly
    with pytest.raises(ExecutorError):
        ex.submit(print)


def test_unknown_executor_and_bad_workers(monkeypatch):
    from core.errors import UnknownName

    with pytest.raises(UnknownName, match="unknown executor 'slurm': use one of inline"):
        executors.make("slurm")
    monkeypatch.setenv("WORKFLOWS_LOCAL_WORKERS", "two")
    with pytest.raises(ExecutorError, match="WORKFLOWS_LOCAL_WORKERS"):
        executors.make("local")


def test_find_and_substitute_futures():
    from concurrent.futures import Future

    f = Future()
    f.set_result(7)
    obj = {"a": [1, (f, 2)], "b": {f}}
    assert find_futures(obj) == [f, f] or len(find_futures(obj)) == 2
    assert substitute(obj) == {"a": [1, (7, 2)], "b": {7}}
    plain = [1, [2]]
    assert substitute(plain) is plain


def test_bad_retries():
    with pytest.raises(ValueError, match="retries"):
        app(retries=-1)
