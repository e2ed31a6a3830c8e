"""What a browser view costs a receiving job, and how late its images are.

One ``mpirun -n 4`` receiving job (2 emulated nodes, ``stem4d.flow``, live every 0.2 s)
serves ``2 x --repeat`` scans fed as fast as the simulator sends (4 producers x 4
sectors, 32x32 positions of 128x128 uint16); the scans alternate between no viewer at
all and ``stager stream view`` with a page open in headless Chromium. Reported:

- the job's ingest rate per scan (frames / the receivers' first-to-last-message time,
  from ``OUT/<scan>.json``), median without and with the view, and the ratio, in one run;
- the latency from a partial result leaving the job (its header's ``t``, taken as rank 0
  publishes) to the page having drawn it (``Date.now()`` after drawing; same machine,
  same clock): median and 95th percentile over every message of the viewed scans. The
  LiberTEM paper's anchor is 100 ms.

``--picture`` also streams a slower scan and saves the page once a quarter of its
positions are in the images (on this loaded machine that was the final result) as
``docs/live-view.png`` (the streaming guide's figure).

    .venv/bin/python bench/stream_view_bench.py [--repeat 3] [--picture]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from loadavg import LoadSampler  # noqa: E402


def _env() -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _scan(name: str, shape=(32, 32), frame=(128, 128), rate=None):
    from streams import ScanGeometry, SimulatedScan

    g = ScanGeometry(name, 4, shape[0] * shape[1], 4, frame, "<u2", shape)
    return SimulatedScan(g, rate=rate)


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--no-first-run", "--window-size=1100,820"):
        opts.add_argument(a)
    if os.getuid() == 0:
        opts.add_argument("--no-sandbox")
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def _wait(driver, script: str, timeout: float = 300.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = driver.execute_script(script)
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"page never showed: {script}; it shows: "
                       + driver.find_element("tag name", "body").text[:1500])


class _View:
    def __init__(self, rv: str, out: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "stager", "stream", "view", rv,
                                   "--out", out], env=_env(), stdout=subprocess.PIPE,
                                  text=True)
        self.url = self.p.stdout.readline().split(": ", 1)[1].strip()

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--picture", action="store_true", help="also write docs/live-view.png")
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args()
    from streams.protocols.native.rendezvous import read_rendezvous
    from streams.simulate import run_producers
    from streams.view import launch

    tmp = tempfile.mkdtemp(prefix="view-bench-")
    out = os.path.join(tmp, "out")
    scans = 2 * a.repeat + (1 if a.picture else 0)
    job = launch(os.path.join(tmp, "rv.json"), out,
                 ["--emulate-nodes", "2", "--bind", "127.0.0.1", "--local",
                  os.path.join(tmp, "local", "%n"), "--live-interval", "0.2", "--analysis",
                  "stem4d.flow", "--scans", str(scans)], env=_env(),
                 stdout=subprocess.DEVNULL)
    rv = read_rendezvous(job.rendezvous)
    job.close()          # this process only feeds; the view under test reads the job
    driver = _browser()
    rows, latency = [], []
    try:
        with LoadSampler(interval=2.0) as load:
            for i in range(a.repeat):
                for mode in (("none", "view") if i % 2 == 0 else ("view", "none")):
                    name = f"bench-{i}-{mode}"
                    view = None
                    if mode == "view":
                        view = _View(job.rendezvous, out)
                        driver.get(view.url)
                        _wait(driver, "return document.body.dataset.job === 'running'", 60)
                    t0 = time.monotonic()
                    run_producers(_scan(name), rv)
                    sent_s = time.monotonic() - t0
                    if view is not None:
                        lat = _wait(driver, f"const s = window.mpistage.scans[{name!r}]; "
                                            "return s && s.final && s.latency")
                        latency.extend(lat)
                        driver.get("about:blank")
                        view.stop()
                    rep_path = Path(out) / f"{name}.json"
                    end = time.monotonic() + 120
                    while not rep_path.exists() and time.monotonic() < end:
                        time.sleep(0.1)
                    rep = json.loads(rep_path.read_text())
                    recv = rep["timing"]["receive_s"]
                    rows.append({"scan": name, "view": mode == "view", "frames":
                                 rep["frames_complete"], "receive_s": recv, "sent_s": sent_s,
                                 "frames_per_s": rep["frames_complete"] / recv})
                    print(rows[-1], flush=True)
            if a.picture:
                view = _View(job.rendezvous, out)
                driver.get(view.url)
                _wait(driver, "return document.body.dataset.job === 'running'", 60)
                import threading

                feed = threading.Thread(target=run_producers, args=(
                    _scan("picture", (24, 24), (64, 64), rate=25.0), rv))
                feed.start()
                # a quarter of the positions in the images (they lag the frame counts)
                _wait(driver, "const s = window.mpistage.scans.picture; "
                              "return s && s.valid.data.reduce((a, b) => a + b, 0) >= 144",
                      120)
                driver.save_screenshot(str(ROOT / "docs" / "live-view.png"))
                feed.join(300)
                view.stop()
    except BaseException:
        job.process.kill()
        raise
    finally:
        driver.quit()
        status = job.wait(300)
        shutil.rmtree(tmp, ignore_errors=True)
    if not rows:             # --repeat 0 --picture: the figure only
        return 0 if status == 0 else 1
    none = [r["frames_per_s"] for r in rows if not r["view"]]
    seen = [r["frames_per_s"] for r in rows if r["view"]]
    lat = sorted(latency)
    res = {"rows": rows, "job_status": status, "frames_per_s_without": statistics.median(none),
           "frames_per_s_with": statistics.median(seen),
           "ratio_with_without": statistics.median(seen) / statistics.median(none),
           "latency_ms_median": 1000 * statistics.median(lat),
           "latency_ms_p95": 1000 * lat[int(0.95 * (len(lat) - 1))], "latency_n": len(lat),
           "load": load.summary(), "cpus": os.cpu_count(),
           "head": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True).stdout.strip(),
           "date": time.strftime("%Y-%m-%d %H:%M")}
    o = Path(a.out)
    o.mkdir(parents=True, exist_ok=True)
    (o / "stream_view.json").write_text(json.dumps(res, indent=1) + "\n")
    md = ["# A browser view of a receiving job (`bench/stream_view_bench.py`)", "",
          f"`{res['head'][:7]}`, one `mpirun -n 4` job (2 emulated nodes, `stem4d.flow`, "
          f"live every 0.2 s), {len(rows)} scans of 1024 frames (128x128 u2, 4 producers x 4 "
          f"sectors) alternating without and with `stager stream view` + a headless Chromium "
          f"page; {load.text()}.", "",
          "| | frames/s (median) |", "|---|---|",
          f"| no viewer | {res['frames_per_s_without']:.0f} |",
          f"| view + page open | {res['frames_per_s_with']:.0f} |",
          f"| with / without | **{res['ratio_with_without']:.2f}** |", "",
          f"Partial result leaving the job -> drawn in the page, over {len(lat)} messages: "
          f"median **{res['latency_ms_median']:.0f} ms**, 95th percentile "
          f"**{res['latency_ms_p95']:.0f} ms** (LiberTEM's anchor: 100 ms).", "",
          "| scan | view | frames | receive s | frames/s |", "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['scan']} | {'yes' if r['view'] else 'no'} | {r['frames']} | "
                  f"{r['receive_s']:.2f} | {r['frames_per_s']:.0f} |")
    (o / "stream_view.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if status == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
