"""The guides' synopses (``text`` blocks: options in brackets, placeholders in capitals)
are not examples to run (tests/docexamples.py runs ``sh`` and ``python`` blocks); what
they promise is checked here instead: every command they name exists and every option
they show is one of that command's own (issue 41: a synopsis that went stale is a
documented command that fails as printed)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Sequence, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md"] + sorted(str(p.relative_to(ROOT))
                              for p in (ROOT / "docs" / "guide").glob("*.md"))
COMMAND = re.compile(r"^(?:mpirun(?: -n \d+)? )?(stager \w+|python -m workflows run)\b")


def synopses() -> List[Tuple[str, int, str]]:
    """(document, line, one logical line) of every ``text`` block that names a command."""
    from markdown_it import MarkdownIt

    found = []
    for doc in DOCS:
        for tok in MarkdownIt("commonmark").parse((ROOT / doc).read_text(encoding="utf-8")):
            if tok.type != "fence" or tok.info.strip() != "text":
                continue
            text = re.sub(r"\s*\\\n\s*", " ", tok.content)          # continuation lines
            text = re.sub(r"\n\s+\[", " [", text)                     # wrapped option lists
            for k, line in enumerate(text.splitlines()):
                line = line.split("  #")[0].strip()
                if COMMAND.match(line):
                    found.append((doc, tok.map[0] + 1 + k if tok.map else 0, line))
    return found


def _options(command: str, words: Sequence[str] = ()) -> Set[str]:
    import argparse

    if command == "python -m workflows run":
        from workflows.run import build_parser

        parser = build_parser()
    else:
        from stager.cli import COMMANDS, _build_parser

        name = command.split()[1]
        assert name in COMMANDS, f"stager has no command {name!r}"
        top = _build_parser(name)
        sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
        for word in words:          # a sub-subcommand (stager stream receive, ...)
            nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not nested or word not in nested[0].choices:
                break
            parser = nested[0].choices[word]
    return {s for a in parser._actions for s in a.option_strings}


SYNOPSES = synopses()


def test_the_guides_have_synopses():
    docs = {d for d, _, _ in SYNOPSES}
    assert {"docs/guide/staging.md", "docs/guide/workflows.md", "docs/guide/hedm.md"} <= docs, docs


@pytest.mark.parametrize("doc,line,text", SYNOPSES, ids=[f"{d}:{n}" for d, n, _ in SYNOPSES])
def test_every_option_of_a_synopsis_is_the_commands(doc, line, text):
    command = COMMAND.match(text).group(1)
    own = text.split(" -- ")[0]          # after --: the flow's arguments
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", own))
    rest = text[COMMAND.match(text).end():].split()
    missing = shown - _options(command, rest[:1])
    assert not missing, f"{doc}:{line}: {command} has no option {sorted(missing)}: {text}"
