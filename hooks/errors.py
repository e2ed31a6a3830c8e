"""``SpecError``: a problem in a hook spec file, pointing at its line and column."""
from __future__ import annotations

from typing import Optional

__all__ = ["SpecError"]


class SpecError(Exception):
    """A hook spec cannot be read or expanded.

    ``str(err)`` is the one-line ``FILE:LINE:COL: message`` form that tools and
    editors understand; :meth:`render` adds the offending line and a caret.

    Parameters
    ----------
    message : str
        What is wrong and what to do.
    file : str
        The spec file's path (or ``<string>``).
    line, column : int
        1-based position; 0 when the error is about the whole file.
    source_line : str, optional
        The text of the offending line, shown by :meth:`render`.
    """

    def __init__(self, message: str, file: str = "<string>", line: int = 0,
                 column: int = 0, source_line: Optional[str] = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self.oneline())

    def oneline(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}:{self.column}: {self.message}"
        return f"{self.file}: {self.message}"

    def render(self) -> str:
        """The one-line form, then the offending line and a caret under the column."""
        text = self.oneline()
        if self.source_line is not None and self.line:
            shown = self.source_line.rstrip("\n").expandtabs(1)
            caret = " " * max(self.column - 1, 0) + "^"
            text += f"\n    {shown}\n    {caret}"
        return text
