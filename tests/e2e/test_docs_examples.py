"""Every shell and Python example of README.md and docs/guide/*.md, run as written.

One test per example (``tests/docexamples.py`` finds them and says how they run); the
examples of a document run in order in one sandbox, so a later one uses what an earlier
one made, as a reader does. An example marked ``<!-- docs-test: skip REASON -->`` in the
document is skipped with that reason; the end of the session prints how many examples
ran and were skipped, and why (``tests/conftest.py``).
"""
from __future__ import annotations

from typing import Dict

import pytest

from tests.docexamples import Example, Sandbox, all_examples

EXAMPLES = all_examples()
#: The last example of each document (its sandbox is closed after it).
LAST = {e.document: e for e in EXAMPLES}


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    boxes: Dict[str, Sandbox] = {}
    yield boxes
    for box in boxes.values():
        box.close()


@pytest.mark.timeout(480)  # above docexamples.TIMEOUT, which names the example
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example(example: Example, sandboxes, tmp_path_factory):
    boxes = sandboxes
    if example.document not in boxes:
        folder = tmp_path_factory.mktemp("docs-" + example.document.replace("/", "-"))
        boxes[example.document] = Sandbox(folder, example.document)
    box = boxes[example.document]
    try:
        if example.skip:
            pytest.skip(example.skip)
        box.run(example)
    finally:
        if LAST[example.document] is example:
            box.close()


def test_every_document_has_examples():
    """The collector finds the examples (a parsing change that finds none fails here)."""
    docs = {e.document for e in EXAMPLES}
    assert "README.md" in docs and "docs/guide/streaming.md" in docs
    assert sum(e.skip is None for e in EXAMPLES) >= 20
