"""The staging guide's `--simulate` example prints what the guide shows.

``tests/e2e/test_docs_examples.py`` runs the guide's shell block as written; this test
runs the same command on the same spec and compares its output with the ``text`` block
the guide prints after it (the simulated clock is deterministic: the lines must match
exactly, so a change of the twin or of a platform file shows in the guide).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _blocks(text: str):
    return re.findall(r"```(\w*)\n(.*?)```", text, re.S)


def test_the_guide_prints_what_simulate_prints(tmp_path):
    guide = (ROOT / "docs/guide/staging.md").read_text()
    section = guide[guide.index("## Predicting a stage"):]
    (kind, script), (kind2, shown) = _blocks(section)[:2]
    assert kind == "sh" and kind2 == "text"
    command = script.strip().splitlines()[-1]
    assert command == "stager plan nf.hook --simulate bgq --nodes 8192"
    setup = script[:script.rindex(command)]
    env = {"HOME": str(tmp_path), "USER": "guide",
           "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    subprocess.run(["bash", "-euc", setup], cwd=tmp_path, env=env, check=True)
    out = subprocess.run(["bash", "-euc", command], cwd=tmp_path, env=env, timeout=600,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == shown.strip()
