"""Task time limits and isolated tasks on the serial executors (inline, local).

A hanging task (at 0 % CPU, or in a loop that swallows the interrupt) fails
as TaskTimeout in bounded time; a task that kills its process fails as
TaskCrashed naming the signal or exit code when isolated; the run's time
limit fails what is left. Every test that could hang has a future timeout.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from workflows import TaskCrashed, TaskFailure, TaskTimeout, app, executors
from workflows.limits import Limits, TaskInterrupt, alarm, check_seconds


@app(timeout=0.5)
def sleeps(seconds):
    time.sleep(seconds)
    return "woke"


@app(timeout=0.5)
def waits_forever():
    threading.Event().wait()


@app(timeout=0.5)
def swallows():
    end = time.time() + 2.5
    while time.time() < end:
        try:
            time.sleep(10)
        except BaseException:
            pass
    return "finished late"


@app(isolate=True)
def kills_itself(how):
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "exit":
        os._exit(3)
    elif how == "segv":
        import ctypes
        import faulthandler

        faulthandler.disable()  # keep pytest's stack dump of this crash out of the log
        ctypes.string_at(0)
    return os.getpid()


@app(isolate=True, timeout=0.5)
def stuck_native():
    # An interrupt cannot reach it (SIGALRM blocked, as in native code): only a kill ends it.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(60)


@app(isolate=True)
def pid_of(_):
    return os.getpid()


@app
def quick(i):
    return i


@pytest.fixture(params=["inline", "local"])
def executor(request):
    options = {"max_workers": 2} if request.param == "local" else {}
    with executors.make(request.param, **options) as ex:
        yield ex


def _error(fut, limit=60):
    t = time.monotonic()
    err = fut.exception(timeout=limit)
    return err, time.monotonic() - t


def test_hanging_task_times_out(executor):
    for fut in (sleeps(3600), waits_forever()):
        err, took = _error(fut)
        assert isinstance(err, TaskTimeout), err
        assert took < 10, f"timeout of 0.5 s took {took:.1f} s"
        assert "ran past its timeout of 0.5 s" in str(err) and fut.task.name in str(err)
        # The traceback shows where the task was when it was interrupted.
        assert "time.sleep" in err.remote_traceback or "wait" in err.remote_traceback
    assert sleeps(0.01).result(timeout=60) == "woke"


def test_swallowed_interrupt_still_fails(executor):
    err, _ = _error(swallows())
    assert isinstance(err, TaskTimeout), err


@pytest.mark.parametrize("how,expected", [("kill", "killed by signal 9 (SIGKILL)"),
                                          ("exit", "exited with code 3"),
                                          ("segv", "killed by signal 11 (SIGSEGV)")])
def test_isolated_task_that_kills_its_process(executor, how, expected):
    err, took = _error(kills_itself(how))
    assert isinstance(err, TaskCrashed), err
    assert expected in str(err) and "kills_itself#" in str(err), str(err)
    assert took < 30
    # The worker survived: the next isolated task runs (in a fresh runner).
    assert isinstance(kills_itself("no").result(timeout=60), int)


def test_isolated_timeout_kills_what_ignores_interrupts(executor):
    err, took = _error(stuck_native())
    assert isinstance(err, TaskTimeout), err
    assert "did not stop" in str(err) and "was killed" in str(err)
    assert took < 20


def test_isolated_runner_is_reused():
    with executors.make("inline"):
        pids = {pid_of(i).result(timeout=60) for i in range(5)}
    assert len(pids) == 1 and os.getpid() not in pids


def test_run_time_limit_fails_what_is_left():
    with executors.make("inline") as ex:
        ex.runtime.configure(run_seconds=1.0)
        ok = quick(1)
        hung = sleeps.fn  # the plain function, as an app without a timeout of its own
        slow = app(name="slow")(hung)
        err, took = _error(slow(3600))
        late = quick(2)
        assert ok.result() == 1
        assert isinstance(err, TaskTimeout) and "run's time limit" in str(err)
        assert took < 10
        late_err = late.exception(timeout=60)
        assert isinstance(late_err, TaskTimeout) and "not started" in str(late_err)


def test_task_timeout_default_and_validation():
    with executors.make("inline") as ex:
        ex.runtime.configure(default_timeout=0.3)
        plain = app(name="plain")(sleeps.fn)
        assert isinstance(plain(3600).exception(timeout=60), TaskTimeout)
    with pytest.raises(ValueError, match="timeout"):
        app(timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        app(timeout=float("nan"))
    with pytest.raises(ValueError):
        check_seconds(-1, "x")
    assert check_seconds(2, "x") == 2.0


def test_limits_arithmetic():
    lim = Limits(timeout=10, deadline=1000.0)
    assert lim.seconds_left(995.0) == 5.0
    assert lim.seconds_left(980.0) == 10
    assert "run's time limit" in lim.describe(995.0)
    assert "timeout of 10 s" in lim.describe(980.0)
    assert Limits().seconds_left(0.0) is None and not Limits().bounded


def test_alarm_in_a_thread_and_not_after_the_block():
    caught = []

    def body():
        try:
            with alarm(0.2):
                end = time.time() + 5
                while time.time() < end:  # Python code: the async exception lands
                    pass
        except TaskInterrupt:
            caught.append(True)

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert caught == [True]
    with alarm(0.2):
        pass
    time.sleep(0.5)  # a disarmed alarm never fires later


def test_failure_classes_are_task_failures():
    assert issubclass(TaskTimeout, TaskFailure) and issubclass(TaskCrashed, TaskFailure)


@app
def exits_plainly():
    os._exit(3)


def test_local_pool_worker_death_says_how_to_find_the_task():
    with executors.make("local", max_workers=1):
        err = exits_plainly().exception(timeout=60)
    assert isinstance(err, TaskCrashed), err
    assert "worker process of the local pool died" in str(err) and "--isolate" in str(err)
