"""Reading replies: reasoning stripped, the length cap, <tag> and ``` blocks, in linear time."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_mas.env.replies import (
    MAX_ANSWER_CHARS,
    answer_part,
    extract_python,
    fenced_blocks,
    last_tagged,
    strip_thinking,
)

# The regexes the helpers replace: same results, but quadratic (or worse) on hostile text.
LAZY_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE | re.ASCII)
LAZY_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
PIECES = ["```", "`", "\n", " ", "\t", "py", "x", "+", "<answer>", "</answer>", "<ANSWER>", "</Answer>", "a", "é"]


def test_strip_thinking() -> None:
    assert strip_thinking("<think>a</think>b") == "b"
    assert strip_thinking("a</think>b</think>c") == "c"
    assert strip_thinking("x<think>y") == "x"
    assert strip_thinking("x<THINK>y</Think>z") == "z"
    assert strip_thinking("plain") == "plain"
    assert strip_thinking("İ" * 20 + "R<think>D D") == "İ" * 20 + "R"  # positions are the original text's
    assert strip_thinking("</thİnk>x") == "</thİnk>x"  # tags are ASCII


def test_answer_part_keeps_the_end_outside_reasoning() -> None:
    assert answer_part("<think>" + "a" * 3 * MAX_ANSWER_CHARS + "</think>end") == "end"
    long = "b" * MAX_ANSWER_CHARS
    assert answer_part("head" + long) == long
    assert answer_part("head" + long + "<think>tail") == long


def test_last_tagged() -> None:
    assert last_tagged("<answer>a</answer> <answer>b</answer>", "answer") == "b"
    assert last_tagged("<answer>x<answer>y</answer>", "answer") == "x<answer>y"  # pairs as a lazy regex does
    assert last_tagged("<answer></answer>", "answer") == ""
    assert last_tagged("<answer>open", "answer") is None
    assert last_tagged("</answer><ANSWER>c</Answer>", "answer") == "c"


def test_fenced_blocks_and_program() -> None:
    assert fenced_blocks("```python x\nprint(1)\n```") == [("python", "print(1)\n")]
    assert fenced_blocks("```\na\n``` and ```py\nb\n```") == [("", "a\n"), ("py", "b\n")]
    assert fenced_blocks("```python\nnever closed") == []
    assert extract_python("```python\nprint(1)\n```") == "print(1)\n"
    assert extract_python("```py\na=1\n```\ntext\n```python\nb=2\n```") == "b=2\n"
    assert extract_python("```\nprint(2)\n```") == "print(2)\n"
    assert extract_python("```python\nx=1\n```\n```\ny=2\n```") == "x=1\n"  # tagged beats untagged
    assert extract_python("```bash\nls\n```") is None
    assert extract_python("print(1)") is None
    assert extract_python("```python\nprint(1)") is None  # truncated block
    assert extract_python("<think>```python\nx=1\n```</think>no code") is None
    assert extract_python("İ" * 20 + "<think>\n```python\nx=1\n```") is None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_helpers_find_what_the_lazy_regexes_find(text: str) -> None:
    answers = LAZY_ANSWER.findall(text)
    assert last_tagged(text, "answer") == (answers[-1] if answers else None)
    assert fenced_blocks(text) == LAZY_FENCE.findall(text)


@pytest.mark.parametrize(
    "text",
    [
        "<answer>" * 50_000,
        "```x" * 100_000,
        "```" + "a" * 400_000,
        "</think>" * 50_000 + "<think>" * 50_000,
        "<answer></answer>" * 25_000,
    ],
    ids=["open-tags", "fences-without-newline", "long-fence-line", "think-tags", "many-blocks"],
)
def test_helpers_are_linear_on_hostile_text(text: str) -> None:
    started = time.thread_time()  # CPU time: other load on the machine does not count
    strip_thinking(text)
    last_tagged(text, "answer")
    fenced_blocks(text)
    extract_python(text)
    assert time.thread_time() - started < 1.0  # the lazy regexes take seconds to minutes on each of these
