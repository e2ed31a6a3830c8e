"""Every spec error names the exact line and column, with a caret (serial)."""
import pytest

import stager.planning.kinds  # noqa: F401  (the block kinds the spec language knows)
from hooks import SpecError, parse_spec

ENV = {"HOME": "/home/ada", "USER": "ada"}

CASES = [
    # (id, text, line, column, message fragment)
    ("unknown-keyword", "brodcast to /tmp files {\n a\n}\n", 1, 1, "unknown keyword 'brodcast'"),
    ("unknown-keyword-2nd-block", "broadcast to /t files { /a }\n\nbraodcast to /u files { /b }",
     3, 1, "unknown keyword 'braodcast'"),
    ("missing-to", "broadcast /tmp files {\n a\n}\n", 1, 11, "missing 'to'"),
    ("missing-files", "broadcast to /tmp {\n a\n}\n", 1, 19, "missing 'files'"),
    ("unknown-kind", "broadcast to /tmp/my data files {\n a\n}\n", 1, 22,
     "unknown block kind 'data'"),
    ("missing-destination", "broadcast to files {\n a\n}\n", 1, 14,
     "missing destination directory"),
    ("missing-open-brace", "broadcast to /tmp files\n  /a\n}\n", 2, 3, "missing '{'"),
    ("missing-close-brace-eof", "broadcast to /tmp files {\n /a\n", 1, 25,
     "missing '}': this block is never closed"),
    ("missing-close-brace-next-block",
     "broadcast to /tmp files {\n /a\n\nbroadcast to /x files {\n /b\n}\n", 1, 25,
     "not closed before the next 'broadcast' at line 4"),
    ("extra-close-brace", "broadcast to /tmp files {\n /a\n}\n  }\n", 4, 3,
     "extra '}'"),
    ("brace-inside-block", "broadcast to /tmp files {\n /a {\n}\n", 2, 5, "unexpected '{'"),
    ("empty-block", "broadcast to /tmp files {\n}\n", 1, 25, "empty block"),
    ("empty-block-comment-only", "broadcast to /tmp files {\n  # nothing\n}\n", 1, 25,
     "empty block"),
    ("unterminated-double-quote", 'broadcast to /tmp files {\n  "/a b\n}\n', 2, 3,
     "unterminated quote"),
    ("unterminated-single-quote", "broadcast to '/tmp files {\n /a\n}\n", 1, 14,
     "unterminated quote"),
    ("empty-file", "", 1, 1, "empty spec"),
    ("comments-only", "# nothing\n\n", 1, 1, "empty spec"),
    ("relative-destination", "broadcast to tmp/stage files {\n /a\n}\n", 1, 14,
     "relative destination 'tmp/stage'"),
    ("dotdot-destination", "broadcast to /tmp/../etc files {\n /a\n}\n", 1, 14,
     "contains '..'"),
    ("dotdot-destination-quoted", 'broadcast to "/tmp/x/.." files {\n /a\n}\n', 1, 14,
     "contains '..'"),
    ("unset-variable", "broadcast to /tmp files {\n  /x/$NOPE_UNSET/a\n}\n", 2, 6,
     "$NOPE_UNSET is not set"),
    ("bad-brace-variable", "broadcast to /tmp files {\n  /x/${1x}\n}\n", 2, 6, "bad ${...}"),
    ("unknown-placeholder", "broadcast to /tmp/%q files {\n /a\n}\n", 1, 19,
     "unknown placeholder '%q'"),
    ("optional-without-path", "broadcast to /tmp files {\n ?\n}\n", 3, 1,
     "'?' must be followed by a path"),
    ("keyword-as-path", "broadcast to /tmp files {\n to\n}\n", 2, 2, "'to' is a keyword"),
    ("eof-in-header", "broadcast to /tmp", 1, 18, "unexpected end of file"),
    ("unknown-user", "broadcast to ~nosuchuser_mpistage/x files {\n /a\n}\n", 1, 14,
     "unknown user"),
]


@pytest.mark.parametrize("text,line,column,fragment",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_position_and_message(text, line, column, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec(text, path="bad.hook", env=ENV)
    err = info.value
    assert (err.line, err.column) == (line, column), err.render()
    assert fragment in err.message
    assert str(err).startswith(f"bad.hook:{line}:{column}: ")


def test_render_shows_line_and_caret():
    with pytest.raises(SpecError) as info:
        parse_spec("broadcast to /tmp files {\n  /a\n  to\n}\n", path="x.hook", env=ENV)
    lines = info.value.render().splitlines()
    assert lines[0].startswith("x.hook:3:3: ")
    assert lines[1] == "      to"
    assert lines[2] == "      ^"


def test_error_is_one_line():
    with pytest.raises(SpecError) as info:
        parse_spec("broadcast to tmp files { /a }", path="x.hook", env=ENV)
    assert "\n" not in str(info.value)
