"""Hook spec text → :class:`hooks.spec.Spec`, with errors that point at line and column.

The grammar lives in ``grammar.lark`` and is parsed by lark (LALR, basic lexer):
a well-kept parser library gives exact token positions and the set of tokens
the grammar expected, which is what the error messages below are made from.
What lark cannot know — expansion of ``~``, ``$VAR``, ``%j``/``%u``, and the
checks on destinations — is done here, on the tokens, so every error keeps its
position. Pure: the environment is a parameter; nothing here touches the
filesystem except ``load_spec`` reading the one file.
"""
from __future__ import annotations

import os
import pwd
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Tuple, cast

from hooks.errors import SpecError
from hooks import kinds
from hooks.h5entry import EntryError
from hooks.spec import Block, Location, Pattern, Spec

if TYPE_CHECKING:  # lark is imported where a spec is parsed: only rank 0 parses
    from lark import Lark, Token, Tree

__all__ = ["parse_spec", "load_spec"]

_PATH_TOKENS = {"WORD", "DQUOTED", "SQUOTED"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parser() -> Lark:
    return _parser_for(kinds.names())


@lru_cache(maxsize=4)
def _parser_for(names: Tuple[str, ...]) -> Lark:
    """The grammar with ``KIND`` the words of the kind table (each a reserved keyword)."""
    from lark import Lark

    with open(os.path.join(os.path.dirname(__file__), "grammar.lark"), encoding="utf-8") as f:
        text = f.read()
    # one string terminal per word, so lark lexes it as a keyword, never as a path
    rule = "kind: " + " | ".join(f"KIND_{i}" for i in range(len(names)))
    terms = "\n".join(f'KIND_{i}: "{n}"' for i, n in enumerate(names))
    text = re.sub(r"(?m)^kind: KIND$", rule, text)
    text = re.sub(r"(?m)^KIND: .*$", terms, text)
    return Lark(text, parser="lalr", lexer="basic", propagate_positions=True)


def load_spec(path: str, env: Optional[Mapping[str, str]] = None) -> Spec:
    """Read and parse a hook spec file.

    Parameters
    ----------
    path : str
        The spec file. Relative patterns inside it are taken relative to its directory.
    env : mapping, optional
        Environment for ``$VAR``, ``~``, ``%j``, ``%u``; default ``os.environ``.

    Raises
    ------
    SpecError
        The file cannot be read, or its text is not a valid spec.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError as e:
        raise SpecError("spec file not found: check the path", file=path) from e
    except IsADirectoryError as e:
        raise SpecError("is a directory, not a spec file", file=path) from e
    except OSError as e:
        raise SpecError(f"cannot read spec file: {e.strerror}", file=path) from e
    except UnicodeDecodeError as e:
        raise SpecError(f"not UTF-8 text (byte {e.start}): is this a spec file?", file=path) from e
    return parse_spec(text, path=path, env=env,
                      base_dir=os.path.dirname(os.path.abspath(path)))


def parse_spec(text: str, path: str = "<string>", env: Optional[Mapping[str, str]] = None,
               base_dir: Optional[str] = None) -> Spec:
    """Parse spec text.

    Parameters
    ----------
    text : str
        The spec.
    path : str
        Name used in messages.
    env : mapping, optional
        Environment for expansions; default ``os.environ``.
    base_dir : str, optional
        Directory that relative patterns are relative to; default the current directory.

    Returns
    -------
    Spec

    Raises
    ------
    SpecError
        With file, line and column of the first problem.
    """
    env = os.environ if env is None else env
    base_dir = os.getcwd() if base_dir is None else base_dir
    lines = text.splitlines()

    def error(message: str, line: int, column: int) -> SpecError:
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        return SpecError(message, file=path, line=line, column=column, source_line=src)

    from lark import Tree
    from lark.exceptions import UnexpectedInput

    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text, error) from None

    blocks = []
    for node in tree.children:
        assert isinstance(node, Tree) and node.data == "block"
        blocks.append(_block(node, path, env, base_dir, error))
    if not blocks:
        raise error("empty spec: write at least one 'broadcast to DIR files { PATTERN ... }' block",
                    1, 1)
    return Spec(path=path, blocks=tuple(blocks))


# -- blocks and paths ---------------------------------------------------------

def _block(node: Tree, path: str, env: Mapping[str, str], base_dir: str, error) -> Block:
    from lark import Tree

    children = node.children
    kw = cast("Token", children[0])
    dest_tok = cast("Token", cast("Tree", children[2]).children[0])
    kind = cast("Token", cast("Tree", children[3]).children[0])
    at = 4
    mode = "scatter" if kw.type == "SCATTER" else "broadcast"
    replicas = 1 if mode == "scatter" else 0
    if isinstance(children[4], Tree) and children[4].data == "replicas":
        rkw = cast("Token", children[4].children[0])
        rtok = cast("Token", cast("Tree", children[4].children[1]).children[0])
        if mode != "scatter":
            raise error("'replicas' is an option of scatter blocks: a broadcast block puts "
                        "every file on every node (write 'scatter to DIR files replicas N {')",
                        rkw.line, rkw.column)
        text = _unquote(rtok)
        if not text.isdigit() or int(text) < 1:
            raise error(f"replicas {text!r}: write a whole number of nodes, 1 or more",
                        rtok.line, rtok.column)
        replicas = int(text)
        at = 5
    lbrace = cast("Token", children[at])
    entries = [c for c in children[at + 1:] if isinstance(c, Tree)]
    dest = _expand(dest_tok, env, error, destination=True)
    if not dest.startswith("/"):
        raise error(f"relative destination {dest_tok.value!r}: a destination must be an "
                    "absolute directory (start it with /, ~ or a $VAR holding one)",
                    dest_tok.line, dest_tok.column)
    if ".." in dest.split("/"):
        raise error(f"destination {dest_tok.value!r} contains '..': write the directory "
                    "without '..' so staged files cannot land outside it",
                    dest_tok.line, dest_tok.column)
    if not entries:
        raise error("empty block: list at least one file pattern between the braces",
                    lbrace.line, lbrace.column)
    patterns = []
    for entry in entries:
        optional = len(entry.children) == 2
        tok = cast("Token", cast("Tree", entry.children[-1]).children[0])
        text = _expand(tok, env, error, destination=False)
        if not text:
            raise error("empty pattern", tok.line, tok.column)
        selection = None
        split = kinds.entry_syntax(str(kind))
        if split is not None:
            # split before normalising: normpath would fold "FILE:/" into "FILE:"
            try:
                text, selection = split(text)
            except EntryError as e:
                raise error(f"{kind} entry {_unquote(tok)!r}: {e}", tok.line,
                            _entry_column(tok, e.offset)) from None
        full = os.path.normpath(os.path.join(base_dir, text))
        patterns.append(Pattern(text=full, raw=_unquote(tok), optional=optional,
                                location=_loc(path, tok), selection=selection))
    return Block(dest=_normdest(dest), kind=str(kind), patterns=tuple(patterns),
                 location=_loc(path, kw), dest_location=_loc(path, dest_tok), mode=mode,
                 replicas=replicas)


def _entry_column(tok: Token, offset: int) -> int:
    """Column of ``offset`` into an entry, exact when its text needed no expansion."""
    column = int(tok.column or 1) + (1 if tok.type in ("DQUOTED", "SQUOTED") else 0)
    body = _unquote(tok)
    return column + offset if "$" not in body and not body.startswith("~") else column


def _loc(path: str, tok: Token) -> Location:
    return Location(path, int(tok.line or 0), int(tok.column or 0))


def _normdest(dest: str) -> str:
    # normpath would fold "a//b" and a trailing "/"; ".." was refused above.
    return os.path.normpath(dest)


def _unquote(tok: Token) -> str:
    if tok.type == "WORD":
        return tok.value
    inner = tok.value[1:-1]
    return re.sub(r"\\(.)", r"\1", inner) if tok.type == "DQUOTED" else inner


def _expand(tok: Token, env: Mapping[str, str], error, destination: bool) -> str:
    """Expand one path token, keeping the column of every problem.

    Words and double-quoted paths expand a leading ``~``/``~user`` and
    ``$VAR``/``${VAR}``; single-quoted paths are literal. In destinations,
    ``%j`` (``$SLURM_JOB_ID`` or ``nojob``) and ``%u`` (user) are replaced,
    ``%n`` is kept for the stager, and ``%%`` becomes a literal ``%``.
    """
    column = int(tok.column or 1)
    if tok.type == "SQUOTED":
        body, col0, expand = tok.value[1:-1], column + 1, False
    elif tok.type == "DQUOTED":
        body, col0, expand = tok.value[1:-1], column + 1, True
    else:
        body, col0, expand = tok.value, column, True
    out: List[str] = []
    i = 0
    if expand and body.startswith("~"):
        end = body.find("/")
        end = len(body) if end < 0 else end
        user = body[1:end]
        out.append(_home(user, env, lambda m: error(m, tok.line, col0)))
        i = end
    while i < len(body):
        c = body[i]
        if c == "\\" and tok.type == "DQUOTED" and i + 1 < len(body):
            out.append(body[i + 1])
            i += 2
        elif c == "$" and expand:
            name, length = _var_at(body, i, lambda m, k=i: error(m, tok.line, col0 + k))
            if name is None:
                out.append("$")
                i += 1
                continue
            if name not in env:
                raise error(f"${name} is not set: export it before staging, or write the path "
                            "out", tok.line, col0 + i)
            out.append(env[name])
            i += length
        elif c == "%" and destination:
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if nxt == "n":
                out.append("%n")
            elif nxt == "j":
                out.append(env.get("SLURM_JOB_ID") or "nojob")
            elif nxt == "u":
                out.append(_user(env))
            elif nxt == "%":
                out.append("\x00")
            else:
                raise error(f"unknown placeholder '%{nxt}': use %n (node), %j (job id), "
                            "%u (user) or %% for a literal %", tok.line, col0 + i)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _var_at(body: str, i: int, error) -> Tuple[Optional[str], int]:
    if body.startswith("${", i):
        close = body.find("}", i)
        name = body[i + 2:close] if close > 0 else ""
        if close < 0 or not _NAME.fullmatch(name):
            raise error("bad ${...}: write ${NAME} with a variable name")
        return name, close - i + 1
    m = _NAME.match(body, i + 1)
    return (m.group(0), len(m.group(0)) + 1) if m else (None, 1)


def _home(user: str, env: Mapping[str, str], error) -> str:
    if not user:
        if env.get("HOME"):
            return env["HOME"]
        return pwd.getpwuid(os.getuid()).pw_dir
    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        raise error(f"unknown user in '~{user}'") from None


def _user(env: Mapping[str, str]) -> str:
    return env.get("USER") or env.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name


# -- syntax errors ------------------------------------------------------------

_DESCRIBE = {"BROADCAST": "'broadcast'", "SCATTER": "'scatter'", "REPLICAS": "'replicas'",
             "TO": "'to'",
             "LBRACE": "'{'", "RBRACE": "'}'", "OPTIONAL": "'?'", "$END": "end of file"}


def _describe(tok: Token) -> str:
    if tok.type in _PATH_TOKENS:
        return repr(str(tok.value))
    return _DESCRIBE.get(tok.type, repr(str(tok.value)))


def _context(text: str, upto: int) -> Tuple[Optional[Token], List[Token]]:
    """Re-lex the text before offset ``upto``: the ``{`` still open there (if any)
    and the tokens of the block header being read (since the last ``broadcast``).

    LALR merges parser states, so lark's "expected" set cannot tell a header from
    a block body; the tokens before the error can.
    """
    from lark.exceptions import UnexpectedInput

    stack: List[Token] = []
    header: List[Token] = []
    last: Optional[Token] = None
    try:
        for tok in _parser().lex(text[:upto]):
            last = tok
            if tok.type == "LBRACE":
                stack.append(tok)
                header = []
            elif tok.type == "RBRACE":
                if stack:
                    stack.pop()
                header = []
            elif tok.type in ("BROADCAST", "SCATTER") and not stack:
                header = [tok]
            elif header:
                header.append(tok)
    except UnexpectedInput:
        pass
    return (stack[-1] if stack else None), (header if not stack else [last] if last else [])


def _eof_position(text: str) -> Tuple[int, int]:
    lines = text.splitlines() or [""]
    # Point just after the last non-blank character.
    for n in range(len(lines), 0, -1):
        if lines[n - 1].strip():
            return n, len(lines[n - 1].rstrip()) + 1
    return 1, 1


def _header_message(header: List[Token], found: str, tok: Optional[Token]) -> str:
    """What is missing from a block header ``broadcast to DIR KIND {``."""
    n = len(header)
    kind = tok.type if tok is not None else "$END"
    if n == 1:
        return f"missing 'to' after '{header[0].value}' (found {found})"
    if n == 2:
        return f"missing destination directory after 'to' (found {found})"
    if n == 3:
        if kind == "LBRACE":
            return "missing 'files' before '{': write 'broadcast to DIR files {'"
        if kind in _PATH_TOKENS and not kinds.names():
            return (f"unknown block kind {found}: no block kinds are registered (the stager "
                    "registers its own: import stager.planning.kinds before parsing)")
        if kind in _PATH_TOKENS:
            return (f"unknown block kind {found}: expected one of {', '.join(kinds.names())} "
                    "(quote a destination that contains spaces)")
        return f"missing 'files' after the destination (found {found})"
    return f"missing '{{' to open the block (found {found})"


def _syntax_error(e: Any, text: str, error) -> SpecError:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF

    if isinstance(e, UnexpectedCharacters):
        ch = text[e.pos_in_stream or 0]
        if ch in "\"'":
            return error(f"unterminated quote: close the {ch}-quoted path on the same line",
                         e.line, e.column)
        return error(f"unexpected character {ch!r}", e.line, e.column)

    tok: Optional[Token] = getattr(e, "token", None)
    if isinstance(e, UnexpectedEOF) or tok is None or tok.type == "$END":
        opened, context = _context(text, len(text))
        if opened is not None:
            return error("missing '}': this block is never closed", opened.line, opened.column)
        line, col = _eof_position(text)
        if context:
            return error("unexpected end of file: " + _header_message(context, "nothing", None),
                         line, col)
        return error("unexpected end of file", line, col)

    opened, context = _context(text, tok.start_pos or 0)

    found = _describe(tok)
    if opened is not None:  # inside a block body
        prev = context[-1] if context else None
        if prev is not None and prev.type == "OPTIONAL":
            msg = f"'?' must be followed by a path (found {found})"
        elif tok.type in ("BROADCAST", "SCATTER"):
            return error(f"missing '}}': this block is not closed before the next "
                         f"'{tok.value}' at line {tok.line}", opened.line, opened.column)
        elif tok.type == "LBRACE":
            msg = (f"unexpected '{{' inside the block opened at line {opened.line}: "
                   "is a '}' missing before it?")
        else:
            msg = (f"{found} is a keyword: quote it to use it as a path, or close the "
                   f"block opened at line {opened.line} with '}}'")
    elif context:  # in a block header
        msg = _header_message(context, found, tok)
    elif tok.type == "RBRACE":
        msg = "extra '}': no block is open here"
    elif tok.type in _PATH_TOKENS:
        msg = f"unknown keyword {found}: a block starts with 'broadcast to DIR files {{'"
    else:
        msg = f"unexpected {found}: a block starts with 'broadcast to DIR files {{'"
    return error(msg, tok.line, tok.column)
