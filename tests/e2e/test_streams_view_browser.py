"""``stager stream view`` in a real headless Chromium (Selenium, Debian's chromedriver)
against a live ``mpirun -n 4`` receiving job (2 emulated nodes) fed by the simulator.

The page's pixel values are read back from its own data (``window.mpistage``, what
it draws from), not guessed from a screenshot.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.e2e.test_streams_receive import _env, _scan

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(
    shutil.which("chromedriver") is None or shutil.which("chromium") is None,
    reason="needs Debian's chromium and chromium-driver (make setup installs them)")]


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="needs selenium (the 'view-test' extra)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-extensions",
              "--no-first-run", "--window-size=1280,2000"):
        opts.add_argument(a)
    if os.getuid() == 0:
        opts.add_argument("--no-sandbox")      # Chromium refuses root without it
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def _guide_command(shared):
    """docs/guide/streaming.md's view command, as written, ``/shared`` being ``shared``."""
    import re
    import shlex
    from pathlib import Path

    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "streaming.md"
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", guide.read_text(), re.S)
                if b.startswith("stager stream view /shared/")]
    return shlex.split(block.splitlines()[0].replace("/shared", str(shared)), comments=True)


class View:
    """``stager stream view`` in the background, as the guide writes it; its URL from its
    first line."""

    def __init__(self, rv, out):
        assert os.path.dirname(str(rv)) == os.path.dirname(str(out))   # the guide's /shared
        argv = _guide_command(os.path.dirname(str(rv)))
        assert argv[:3] == ["stager", "stream", "view"] and argv[3] == str(rv), argv
        self.p = subprocess.Popen([sys.executable, "-m", *argv], env=_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("stager stream view: http://127.0.0.1:"), \
            line + self.p.stderr.read()
        self.url = line.split(": ", 1)[1].strip()

    def stop(self):
        self.p.terminate()
        try:
            return self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait(driver, script, timeout=120.0, what=""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = driver.execute_script(script)
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"the page never showed {what or script}: "
                         f"{driver.find_element('tag name', 'body').text[:2000]}")


def _click(driver, scan, image, y, x):
    """A real click (Selenium's pointer) on scan position (y, x) of ``image``'s canvas."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = driver.find_element(
        "css selector", f'#scan-{scan} figure[data-name="{image}"] canvas')
    h, w = driver.execute_script(
        f"return window.mpistage.scans[{scan!r}].images[{image!r}].shape")
    size = canvas.size                  # offsets from the element's centre (Selenium 4)
    dx = (x + 0.5) * size["width"] / w - size["width"] / 2
    dy = (y + 0.5) * size["height"] / h - size["height"] / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(dx), int(dy)).click().perform()


def test_the_page_follows_a_live_scan_to_the_file_the_job_wrote(tmp_path):
    import h5py

    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers
    from streams.view import launch

    out = tmp_path / "out"
    job = launch(str(tmp_path / "rv.json"), str(out),
                 ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                  str(tmp_path / "local" / "%n"), "--live-interval", "0.2",
                  "--analysis", "stem4d.flow", "--partition-frames", "2", "--scans", "2"],
                 env=_env(),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    view = View(job.rendezvous, out)
    driver = None
    try:
        # a wrong token, or none, gets nothing: page and WebSocket alike
        base, token = view.url.split("?token=")
        for bad in (f"{base}?token={'x' * len(token)}", base, f"{base}ws?token=nope"):
            status, body = _get(bad)
            assert status == 403 and body == b"", (bad, status, body)
        assert _get(view.url)[0] == 200

        driver = _browser()
        driver.get(view.url)
        _wait(driver, "return document.body.dataset.job === 'running'", 60, "a running job")
        rv = read_rendezvous(job.rendezvous)
        s1 = _scan(scan_shape=(8, 8), rate=12.0)
        feed = threading.Thread(target=run_producers, args=(s1, rv))
        feed.start()
        _wait(driver, "const s = window.mpistage.scans.s1; return s && s.final", 120,
              "the scan's final result")
        feed.join(60)
        page = driver.execute_script("""
            const s = window.mpistage.scans.s1, out = {};
            for (const [n, img] of Object.entries(s.images))
              out[n] = {shape: img.shape, data: Array.from(img.data), versions: img.versions};
            const sec = document.getElementById('scan-s1');
            return {images: out, percent: sec.dataset.percent, updates: s.updates,
                    text: sec.querySelector('.percent').textContent,
                    nodes: sec.querySelectorAll('tr.node').length,
                    valid: Array.from(s.valid.data),
                    figures: sec.querySelectorAll('figure canvas').length};""")
        assert page["percent"] == "100" and "64/64 complete (100%)" in page["text"], page["text"]
        assert page["nodes"] == 2
        assert all(page["valid"])
        assert page["figures"] == len(page["images"]) == 4
        sums = page["images"]["sum_image"]["versions"]
        assert len(set(sums)) >= 2, sums            # the image changed as partials arrived
        assert sums[0] < sums[-1]
        # a click on scan position (2, 5) of an image: that frame, through the job
        _click(driver, 's1', 'virtual/bright_field', 2, 5)
        frame = _wait(driver, """const f = window.mpistage.frame;
            return f && f.index === 21 && {shape: f.shape, binned: f.binned, where: f.where,
              complete: f.complete, data: Array.from(f.data || []), refused: f.refused};""",
                      60, "the clicked position's frame")
        assert frame["refused"] is None and frame["binned"] == 1, frame.get("refused")
        assert frame["where"] == "memory" and frame["complete"]
        got = np.array(frame["data"]).reshape(frame["shape"])
        assert np.array_equal(got, s1.frame(21))        # the frame the simulator sent
        assert driver.find_element("css selector", "#scan-s1 .frame figure canvas")
        # the job's last scan: a file of the user's takes its name in OUT while it runs
        # (after the job took the name), so its drain fails: the page says so
        feed = threading.Thread(target=run_producers,
                                args=(_scan("s2", scan_shape=(4, 4), rate=4.0), rv))
        feed.start()
        end = time.monotonic() + 60
        while not (out / "s2.receiving").exists() and time.monotonic() < end:
            time.sleep(0.05)
        (out / "s2.h5").write_bytes(b"the user's")
        feed.join(60)
        assert job.wait(120) == 1           # not drained: kept in OUT/s2.undrained-*
        failed = _wait(driver, "const s = document.getElementById('scan-s2'); "
                       "return s && s.dataset.failed", 60, "that scan s2's end failed")
        assert "not drained" in failed, failed
        assert "FAILED" in driver.find_element("css selector", "#scan-s2 .percent").text
        assert "FAILED" not in driver.find_element("css selector", "#scan-s1 .percent").text
        assert (out / "s2.h5").read_bytes() == b"the user's"
        with h5py.File(out / "s1.h5", "r") as f:
            for name, img in page["images"].items():
                want = f[name][()]
                got = np.array(img["data"]).reshape(img["shape"])
                assert np.array_equal(got, want), name
            assert f["sum_image"][()].sum() > 0
        # the job ended: the page says so
        _wait(driver, "return document.body.dataset.job === 'ended'", 60, "that the job ended")
        assert "This job has ended" in driver.find_element("id", "status").text
    finally:
        if driver is not None:
            driver.quit()
        view.stop()
        if job.process.poll() is None:
            job.process.kill()
        job.close()


def test_a_view_opened_after_the_job_ended_says_so(tmp_path):
    """The job wrote its last file (OUT/rejections.json) after the rendezvous file: a view
    started then tells it at once, with no job to connect to."""
    import json

    from core import localfs

    rv, out = tmp_path / "rv.json", tmp_path / "out"
    localfs.write_bytes_atomic(str(rv), json.dumps({"live": "tcp://127.0.0.1:9"}).encode(),
                               mode=0o600)
    out.mkdir()
    time.sleep(0.05)
    (out / "rejections.json").write_text(json.dumps({"rejected": 2, "by_reason":
                                                     {"wrong_token": 2}, "examples": []}))
    view = View(rv, out)
    driver = _browser()
    try:
        driver.get(view.url)
        _wait(driver, "return document.body.dataset.job === 'ended'", 30, "that the job ended")
        assert "This job has ended" in driver.find_element("id", "status").text
        assert "wrong_token" in driver.find_element("id", "jobrej").text
    finally:
        driver.quit()
        view.stop()
