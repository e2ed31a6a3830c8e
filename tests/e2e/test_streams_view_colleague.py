"""A colleague's view (issue 41): a second real Unix user watches a job of this user with
a copy of the job's viewers' certificate of their own, ``--trust-owner`` and ``--wait``,
as docs/guide/streaming.md ("A colleague's view") says -- the guide's block run as
written as that user, against a live ``mpirun -n 4`` receiving job fed by the simulator
over CURVE; ``attach(trust_owner=, wait=)`` the same from Python."""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.test_streams_receive import _env, _scan

COLLEAGUE = "mpistage-colleague"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "streaming.md"

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None or shutil.which("mpirun") is None,
    reason="acting as a second user needs root, runuser (and useradd) and mpirun")]


@pytest.fixture(scope="module")
def colleague():
    """A second real user (made with useradd once, kept: another run may use it)."""
    try:
        return pwd.getpwnam(COLLEAGUE)
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", COLLEAGUE], capture_output=True, text=True)
    if r.returncode not in (0, 9):      # 9: made meanwhile by a parallel run
        pytest.skip(f"useradd {COLLEAGUE} failed: {r.stderr.strip()}")
    return pwd.getpwnam(COLLEAGUE)


@pytest.fixture
def places(colleague):
    """A directory both reach (the job's, like a shared filesystem's) and the colleague's
    own home; removed afterwards."""
    shared = tempfile.mkdtemp(prefix="mpistage-colleague-job-")
    os.chmod(shared, 0o755)
    home = tempfile.mkdtemp(prefix="mpistage-colleague-home-")
    os.chown(home, colleague.pw_uid, colleague.pw_gid)
    yield Path(shared), Path(home)
    shutil.rmtree(shared, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


def _as_colleague(home: Path, rv: Path, argv, **kw):
    env = dict(_env(), HOME=str(home), RV=str(rv), OWNER=pwd.getpwuid(os.geteuid()).pw_name,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # runuser sets HOME to the user's (none here): the colleague's home is ``home``
    return subprocess.Popen(["runuser", "-u", COLLEAGUE, "--", "env", f"HOME={home}", *argv],
                            env=env, cwd=home,
                            start_new_session=True, **kw)


def _job(shared: Path):
    from streams.view import launch

    return launch(str(shared / "rv.json"), str(shared / "out"),
                  ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                   str(shared / "local" / "%n"), "--live-interval", "0.2",
                   "--partition-frames", "2", "--rendezvous-mode", "644"], env=_env())


def _messages(url: str, until, timeout: float = 120.0):
    """The view's WebSocket messages (JSON) until ``until(msg)`` is true."""
    import tornado.ioloop
    import tornado.websocket

    ws_url = url.replace("http://", "ws://").replace("/?token=", "/ws?token=")
    seen = []

    async def read():
        conn = await tornado.websocket.websocket_connect(ws_url)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = await conn.read_message()
            if text is None:
                break
            msg = json.loads(text) if isinstance(text, str) else {}
            seen.append(msg)
            if until(msg):
                conn.close()
                return msg
        conn.close()
        raise AssertionError(f"the view never sent it: {seen[-3:]}")

    return tornado.ioloop.IOLoop().run_sync(read, timeout=timeout + 10)


def test_the_guides_colleague_block_runs_as_a_second_user(places):
    shared, home = places
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S)
              if "--trust-owner" in b]
    assert len(blocks) == 1, blocks
    rv = shared / "rv.json"
    # the colleague starts first: --wait covers the job not being there yet
    view = _as_colleague(home, rv, ["bash", "-e", "-c", blocks[0]], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = _job(shared)
    try:
        cert = Path(job.rendezvous + ".viewer.key_secret")
        assert cert.stat().st_mode & 0o777 == 0o600        # the job's own stays private
        view.stdin.write(cert.read_text())                  # the owner hands the text over
        view.stdin.close()
        line = view.stdout.readline()
        assert line.startswith("stager stream view: http://127.0.0.1:"), \
            line + view.stderr.read()
        url = line.split(": ", 1)[1].strip()
        mine = home / "viewer.key_secret"
        st = mine.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam(COLLEAGUE).pw_uid, 0o600)
        job.wait_connected()
        feed = threading.Thread(target=_feed, args=(job,))
        feed.start()
        final = _messages(url, lambda m: m.get("type") == "scan" and m.get("final"))
        feed.join(120)
        assert final["scan"] == "s1" and final["progress"]["complete"] == 64, final
        assert job.wait(120) == 0
    finally:
        if view.poll() is None:
            os.killpg(view.pid, signal.SIGINT)
        try:
            view.wait(30)
        finally:
            if job.process.poll() is None:
                job.process.kill()
            job.close()
    assert view.returncode == 0, view.stderr.read()


def _feed(job):
    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers

    time.sleep(1.0)        # the view's subscriber is connected before the first frame
    run_producers(_scan(scan_shape=(8, 8), rate=40.0), read_rendezvous(job.rendezvous))


ATTACH = """
import os, sys
from streams.errors import StreamError
from streams.view import attach
for kw in ({}, {"trust_owner": os.environ["OWNER"]}):
    try:
        attach(os.environ["RV"], **kw)
    except StreamError as e:
        print("REFUSED:", e)
with attach(os.environ["RV"], certificate=os.path.expanduser("~/viewer.key_secret"),
            trust_owner=os.environ["OWNER"], wait=60) as job:
    job.wait_connected()
    print("connected", flush=True)
    final = job.result("s1", timeout=120)
    print("final", final.complete, final.frames)
"""


def test_attach_with_trust_owner_as_a_second_user(places):
    shared, home = places
    job = _job(shared)
    try:
        cert = Path(job.rendezvous + ".viewer.key_secret")
        mine = home / "viewer.key_secret"
        # the colleague's own copy, as the guide's first line makes it
        p = _as_colleague(home, Path(job.rendezvous),
                          ["bash", "-c", "umask 077 && cat > ~/viewer.key_secret"],
                          stdin=subprocess.PIPE, text=True)
        p.communicate(cert.read_text(), timeout=30)
        assert p.returncode == 0 and mine.stat().st_mode & 0o777 == 0o600
        reader = _as_colleague(home, Path(job.rendezvous), [sys.executable, "-c", ATTACH],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job.wait_connected()
        time.sleep(2.0)
        _feed(job)
        out, _ = reader.communicate(timeout=150)
        assert job.wait(120) == 0
    finally:
        if job.process.poll() is None:
            job.process.kill()
        job.close()
    assert reader.returncode == 0, out
    # without the steps: the rendezvous file is refused (not theirs), the message says why
    refused = [x for x in out.splitlines() if x.startswith("REFUSED:")]
    assert len(refused) == 2 and "--trust-owner" in refused[0], out
    # ... and with --trust-owner alone, the certificate the file names is the owner's
    assert "umask 077" in refused[1] and "A colleague's view" in refused[1], out
    assert "connected" in out and "final 64 64" in out, out
