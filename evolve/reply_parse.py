"""Turn an LLM reply into candidate program source.

`extract_program(reply_text, parent_source)` tries, in this order:
  1. a fenced code block (```python, ```py or a bare ```) that contains
     `def predict_step_time` and no SEARCH/REPLACE markers; the LAST such block wins
     (models often show a draft first and the final version last);
  2. SEARCH/REPLACE diff blocks (openevolve's format) applied to the parent, every block
     must apply (parsed with `openevolve.utils.code_utils.extract_diffs`, applied one by one
     with `apply_diff_blocks`, which also tolerates trailing-whitespace differences);
  3. a bare `def predict_step_time` in the text, with the UPPER_CASE constant lines and
     `import math` right above it, up to the end of its indented body.
Reasoning sections (<think>...</think>) are dropped first. Anything unusable raises
`ReplyError` (a ValueError) whose message starts with a short reason tag:
  "empty reply", "truncated: ...", "no code: ...", "malformed diff: ...",
  "diff does not apply: ...", "no parent: ...", "unchanged: ...".

Validation is separate: `propose_valid(reply_text, parent_source, caps)` extracts and then
runs `parse_program` plus the complexity cap, raising ReplyError("invalid program: ...")
with the extracted source attached as `.source` so the caller can still record it.
"""
from __future__ import annotations

import re

from evaluator.objectives import Caps
from evaluator.program import FUNC_NAME, Program, ProgramError, parse_program

SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER_MARK = "======="
REPLACE_MARK = ">>>>>>> REPLACE"

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*$")
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)
_DEF_LINE = re.compile(r"^def[ \t]+" + FUNC_NAME + r"[ \t]*\(")
_CONST_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*[ \t]*=[ \t]*[-+]?[ \t]*[0-9][0-9_.eE+-]*[ \t]*(#.*)?$")


class ReplyError(ValueError):
    """The reply holds no usable program; the message says why.

    `source` carries the extracted source when extraction worked but validation failed.
    """

    def __init__(self, reason: str, source: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.source = source


def _normalize(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _THINK.sub("", text)


def _fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str | None]:
    """(language, body) of every closed fenced block, and the body of an unclosed last one."""
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if lang is None:
            if m:
                lang = m.group(1).lower()
                body = []
        elif m and not m.group(1):
            blocks.append((lang, "\n".join(body)))
            lang = None
        else:
            body.append(line)
    unclosed = "\n".join(body) if lang is not None else None
    return blocks, unclosed


def _has_def(code: str) -> bool:
    return any(_DEF_LINE.match(ln) for ln in code.split("\n"))


def _tidy(code: str) -> str:
    return code.strip("\n").rstrip() + "\n"


def _apply_diffs(text: str, parent_source: str | None) -> str:
    from openevolve.utils.code_utils import apply_diff_blocks, extract_diffs

    if parent_source is None:
        raise ReplyError("no parent: the reply is a SEARCH/REPLACE diff but there is no parent to apply it to")
    try:
        blocks = extract_diffs(text)
    except ValueError as e:
        raise ReplyError(f"malformed diff: {e}") from None
    if not blocks:
        raise ReplyError("malformed diff: SEARCH/REPLACE markers present but no complete "
                         f"'{SEARCH_MARK}' / '{DIVIDER_MARK}' / '{REPLACE_MARK}' block")
    code = parent_source.replace("\r\n", "\n")
    for k, (search, replace) in enumerate(blocks, 1):
        if not search.strip():
            raise ReplyError(f"malformed diff: block {k} of {len(blocks)} has an empty SEARCH section")
        code, applied = apply_diff_blocks(code, [(search, replace)])
        if applied != 1:
            first = search.strip().split("\n")[0][:80]
            raise ReplyError(f"diff does not apply: SEARCH text of block {k} of {len(blocks)} "
                             f"not found in the parent (starts {first!r})")
    return _tidy(code)


def _bare_program(text: str) -> str | None:
    """A `def predict_step_time` written without fences, with its constants above it."""
    lines = text.split("\n")
    starts = [i for i, ln in enumerate(lines) if _DEF_LINE.match(ln)]
    if not starts:
        return None
    i = starts[-1]
    top = i
    while top > 0:
        prev = lines[top - 1].strip()
        if _CONST_LINE.match(prev) or prev == "import math" or prev.startswith("#") or (
                prev == "" and top - 1 > 0 and _CONST_LINE.match(lines[top - 2].strip() or "x")):
            top -= 1
        else:
            break
    end = i + 1
    while end < len(lines) and (lines[end].strip() == "" or lines[end][:1] in (" ", "\t")):
        end += 1
    return _tidy("\n".join(ln.rstrip() for ln in lines[top:end]))


def _same(a: str, b: str | None) -> bool:
    if b is None:
        return False
    norm = lambda s: "\n".join(ln.rstrip() for ln in s.replace("\r\n", "\n").strip().split("\n"))  # noqa: E731
    return norm(a) == norm(b)


def extract_program(reply_text: str | None, parent_source: str | None) -> str:
    """Candidate source from an LLM reply (see module doc); raises ReplyError."""
    if reply_text is None or not reply_text.strip():
        raise ReplyError("empty reply")
    text = _normalize(reply_text)
    if not text.strip():
        raise ReplyError("empty reply: only a reasoning section, no answer")
    blocks, unclosed = _fenced_blocks(text)

    full = [body for lang, body in blocks
            if lang in _CODE_LANGS and _has_def(body) and SEARCH_MARK not in body]
    if full:
        code = _tidy(full[-1])
    elif SEARCH_MARK in text:
        if REPLACE_MARK not in text.rsplit(SEARCH_MARK, 1)[-1]:
            raise ReplyError(f"truncated: the last SEARCH block has no closing '{REPLACE_MARK}'")
        code = _apply_diffs(text, parent_source)
    elif unclosed is not None and _has_def(unclosed):
        raise ReplyError("truncated: the code block is not closed (reply cut off?)")
    else:
        bare = _bare_program(text)
        if bare is None:
            raise ReplyError(f"no code: no ```python block with `def {FUNC_NAME}`, no SEARCH/REPLACE "
                             "diff and no bare definition in the reply")
        code = bare
    if _same(code, parent_source):
        raise ReplyError("unchanged: the proposed program is identical to the parent")
    return code


def check_caps(prog: Program, caps: Caps | None) -> str | None:
    """None if the program is within the caps (or no caps are given), else the reason."""
    if caps is None:
        return None
    return prog.complexity.within(*caps.as_tuple())


def propose_valid(reply_text: str | None, parent_source: str | None, caps: Caps | None = None) -> Program:
    """Extract and validate: the Program, or ReplyError (with `.source` set if extraction worked)."""
    source = extract_program(reply_text, parent_source)
    try:
        prog = parse_program(source)
    except ProgramError as e:
        raise ReplyError(f"invalid program: {e}", source=source) from None
    over = check_caps(prog, caps)
    if over is not None:
        raise ReplyError(f"invalid program: complexity over the cap ({over})", source=source)
    return prog
