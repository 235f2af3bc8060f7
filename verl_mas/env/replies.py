"""Reading model replies: reasoning stripped, length capped, tagged and fenced blocks found in linear time.

Every environment reads a reply through `answer_part`: the text outside `<think>` reasoning (after the last
`</think>`, before an unclosed `<think>`), of which only the last `MAX_ANSWER_CHARS` characters count. An answer is
short and comes last, so the cap changes nothing for a reply that ends with its answer, and it bounds the work of
every parser on runaway output. The helpers below make one pass over their input: no regex that can backtrack
over the whole text from each of many starting points.
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 20_000

# Tags are ASCII and matched in any ASCII case on the original text. (Positions found in `text.lower()` are wrong
# for the original: some characters lengthen when lowered, 'İ' -> 'i̇'.)
_TAG_FLAGS = re.IGNORECASE | re.ASCII
_THINK_OPEN = re.compile("<think>", _TAG_FLAGS)
_THINK_CLOSE_REVERSED = re.compile(">kniht/<", _TAG_FLAGS)  # the first match in the reversed text is the last one
_FENCE_LANGUAGE = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_PYTHON_TAGS = ("python", "py", "python3")


def strip_thinking(text: str) -> str:
    """The part of a reply outside reasoning: after the last `</think>`, before an unclosed `<think>`."""
    closing = _THINK_CLOSE_REVERSED.search(text[::-1])
    if closing is not None:
        text = text[len(text) - closing.start() :]
    opening = _THINK_OPEN.search(text)
    return text if opening is None else text[: opening.start()]


def answer_part(text: str) -> str:
    """What an environment reads of a reply: the last `MAX_ANSWER_CHARS` characters outside reasoning."""
    return strip_thinking(text)[-MAX_ANSWER_CHARS:]


def last_tagged(text: str, tag: str) -> str | None:
    """The content of the last `<tag>...</tag>` block, None if there is none.

    Blocks pair each opening tag with the first closing tag after it, left to right (as a lazy regex would), but
    each search starts where the last one ended, so the pass is linear.
    """
    opening = re.compile(f"<{re.escape(tag)}>", _TAG_FLAGS)
    closing = re.compile(f"</{re.escape(tag)}>", _TAG_FLAGS)
    content, position = None, 0
    while (start := opening.search(text, position)) is not None:
        end = closing.search(text, start.end())
        if end is None:  # no closing tag after this opening, so none after any later one either
            break
        content, position = text[start.end() : end.start()], end.end()
    return content


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every closed ``` block as (language tag, body), in order.

    A block opens with ``` and the rest of its line (whose leading word is the language tag), and closes at the
    next ```. If an opening has no newline or no closing after it, no later opening can have one either.
    """
    blocks: list[tuple[str, str]] = []
    position = 0
    while (start := text.find("```", position)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break
        end = text.find("```", newline + 1)
        if end < 0:
            break
        language = _FENCE_LANGUAGE.match(text, start + 3, newline).group(1)
        blocks.append((language, text[newline + 1 : end]))
        position = end + 3
    return blocks


def extract_python(text: str) -> str | None:
    """The program in a reply: its last ```python block (else its last untagged block); None if there is none."""
    blocks = fenced_blocks(answer_part(text))
    python = [code for language, code in blocks if language.lower() in _PYTHON_TAGS]
    untagged = [code for language, code in blocks if not language]
    chosen = python or untagged
    return chosen[-1] if chosen else None
