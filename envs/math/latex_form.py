"""Whether an answer is well-formed LaTeX: math-verify repairs a malformed one (`\\frac{3}{4` reads as 3/4)."""

from __future__ import annotations

import re

# a `^` or `_` with nothing to raise or lower: at the end, before a closing mark, another script or an empty group
_DANGLING_SCRIPT = re.compile(r"\s*(?:$|[}^_&$,)\]]|\{\s*\})")
_ENVIRONMENT = re.compile(r"\s*\{([^{}]*)\}")
_DELIMITER = re.compile(r"\s*(\\[A-Za-z]+|\\.|[^\s\\])")
_COMMAND = re.compile(r"[A-Za-z]+")
_OPENERS = {"}": "{", "\\}": "\\{", "\\)": "\\(", "\\]": "\\["}


def is_well_formed(text: str) -> bool:
    """True when every group in `text` opens and closes in order and no script or backslash dangles.

    Checked: `{}`, `\\{\\}`, `\\(\\)`, `\\[\\]`, `\\left`/`\\right` and `\\begin{X}`/`\\end{X}` nest; `$` comes in
    pairs; `(`/`[` and `)`/`]` are as many (an interval may mix them: `[1,2)`); every `^` and `_` has an argument;
    no lone backslash ends the text.
    """
    open_groups: list[str] = []
    brackets = dollars = 0
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char == "\\":
            if position == len(text):
                return False
            command = _COMMAND.match(text, position)
            if command is None:  # an escaped character: `\{`, `\$`, `\\`, ...
                token = "\\" + text[position]
                position += 1
                if token in ("\\{", "\\(", "\\["):
                    open_groups.append(token)
                elif token in _OPENERS and not _close(open_groups, _OPENERS[token]):
                    return False
                continue
            position = command.end()
            name = command.group()
            if name in ("left", "right"):
                delimiter = _DELIMITER.match(text, position)
                if delimiter is None:
                    return False
                position = delimiter.end()  # the delimiter itself is not a group of its own
                if name == "left":
                    open_groups.append("\\left")
                elif not _close(open_groups, "\\left"):
                    return False
            elif name in ("begin", "end"):
                environment = _ENVIRONMENT.match(text, position)
                if environment is None:
                    return False
                position = environment.end()
                group = f"\\begin{{{environment.group(1).strip()}}}"
                if name == "begin":
                    open_groups.append(group)
                elif not _close(open_groups, group):
                    return False
        elif char == "{":
            open_groups.append("{")
        elif char == "}":
            if not _close(open_groups, "{"):
                return False
        elif char in "^_":
            if _DANGLING_SCRIPT.match(text, position):
                return False
        elif char == "$":
            dollars += 1
        elif char in "([":
            brackets += 1
        elif char in ")]":
            brackets -= 1
    return not open_groups and dollars % 2 == 0 and brackets == 0


def _close(open_groups: list[str], opener: str) -> bool:
    """Close the innermost group if it was opened by `opener`; False when it was not (or none is open)."""
    if not open_groups or open_groups[-1] != opener:
        return False
    open_groups.pop()
    return True
