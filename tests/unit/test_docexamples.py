"""The docs-examples collector (tests/docexamples.py) on small documents: what is an
example, what a directive applies to, and that a skip must say why."""
from __future__ import annotations

import subprocess

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


def _clone_with_demo_out(tmp_path, monkeypatch):
    """A git checkout whose tracked entries are the real clone's (linked) and which holds an
    untracked ``demo-out/``, as ``make demo`` leaves it before ``make test``."""
    clone = tmp_path / "clone"
    clone.mkdir()
    real = docexamples.ROOT
    for name in ("core", "stager", "hooks", "README.md"):
        (clone / name).symlink_to(real / name)
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "add", "."], check=True)
    (clone / "demo-out").mkdir()
    (clone / "demo-out" / "kept.txt").write_text("make demo's\n")
    monkeypatch.setattr(docexamples, "ROOT", clone)
    return clone


def test_sandbox_links_tracked_entries_only_and_an_example_drains_into_demo_out(
        tmp_path, monkeypatch):
    """`make demo` then `make test`: the HEDM guide's example drains into `demo-out/`
    (docs/guide/hedm.md), which the sandbox once linked to the clone's own, and the drain
    refused the link. The sandbox links the tracked entries only; the example's
    `demo-out/` is its own and the clone's is untouched."""
    clone = _clone_with_demo_out(tmp_path, monkeypatch)
    (tmp_path / "box").mkdir()
    box = docexamples.Sandbox(tmp_path / "box", "docs/guide/hedm.md")
    try:
        text = ('mkdir -p /dev/shm/$USER/reduced && echo frame > /dev/shm/$USER/reduced/a.bin\n'
                'stager drain /dev/shm/$USER/reduced demo-out --quiet\n'
                'ls demo-out/*/a.bin\n')
        out = box.run(docexamples.Example("docs/guide/hedm.md", 43, "sh", text)).stdout
        assert "a.bin" in out
        assert not (box.folder / "demo-out").is_symlink()
        assert sorted(p.name for p in (clone / "demo-out").iterdir()) == ["kept.txt"]
        assert sorted(p.name for p in box.folder.iterdir() if not p.name.startswith(".")) \
            == ["README.md", "core", "demo-out", "hooks", "stager"]
    finally:
        box.close()


def test_sandbox_outside_git_links_what_gitignore_does_not_name(tmp_path, monkeypatch):
    """An unpacked archive (no git): every entry but what `.gitignore` names (`demo-out/`)."""
    clone = tmp_path / "archive"
    clone.mkdir()
    for name in ("core", "README.md"):
        (clone / name).symlink_to(docexamples.ROOT / name)
    (clone / "demo-out").mkdir()
    (clone / "x.egg-info").mkdir()
    (clone / ".gitignore").write_text("demo-out/\n*.egg-info/\n/bench/work/\n")
    monkeypatch.setattr(docexamples, "ROOT", clone)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert docexamples._tracked_entries(clone) == ["README.md", "core"]
