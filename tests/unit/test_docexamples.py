"""The docs-examples collector (tests/docexamples.py) on small documents: what is an
example, what a directive applies to, and that a skip must say why."""
from __future__ import annotations

import pytest

from tests import docexamples
from tests.docexamples import examples


@pytest.fixture
def doc(tmp_path, monkeypatch):
    monkeypatch.setattr(docexamples, "ROOT", tmp_path)

    def write(text):
        (tmp_path / "d.md").write_text(text)
        return examples("d.md")
    return write


def test_sh_and_python_blocks_are_examples_others_not(doc):
    found = doc("# t\n\n```sh\necho a\n```\n\n```\nplain\n```\n\n```python\nx = 1\n```\n\n"
                "```text\nno\n```\n")
    assert [(e.kind, e.line, e.text) for e in found] == [("sh", 3, "echo a\n"),
                                                         ("python", 11, "x = 1\n")]


def test_skip_applies_to_the_next_block_only_and_keeps_its_reason(doc):
    found = doc("<!-- docs-test: skip needs a real detector -->\n```sh\nrun\n```\n\n"
                "```sh\nrun2\n```\n")
    assert [e.skip for e in found] == ["needs a real detector", None]


def test_a_directive_before_a_paragraph_is_dropped(doc):
    found = doc("<!-- docs-test: skip why -->\n\nSome text.\n\n```sh\nrun\n```\n")
    assert found[0].skip is None


def test_skip_without_a_reason_is_an_error(doc):
    with pytest.raises(ValueError, match="needs a reason"):
        doc("<!-- docs-test: skip -->\n```sh\nrun\n```\n")


def test_hook_spec_blocks_and_file_blocks(doc):
    found = doc("<!-- docs-test: hook-spec -->\n```\nbroadcast to /tmp files {\n  a\n}\n```\n\n"
                "```python\n# my_udf.py\nimport numpy\n```\n")
    assert found[0].kind == "hook-spec"
    assert found[1].file_name == "my_udf.py"


def test_blocks_inside_list_items(doc):
    found = doc("1. Step:\n\n   ```sh\n   echo in a list\n   ```\n")
    assert found[0].text == "echo in a list\n"


def test_the_real_documents_parse_and_every_skip_says_why():
    found = docexamples.all_examples()
    assert {"README.md", "docs/guide/hedm.md", "docs/api/analyses.md"} <= {
        e.document for e in found}
    assert all(e.skip is None or len(e.skip) > 10 for e in found)
