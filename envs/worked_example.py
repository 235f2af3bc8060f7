"""The worked example an environment's prompt may open with: one solved first turn of a role on a fixed training
problem (its prompt and the expert's reply), which a small pretrained chat model copies the reply's form from.

The example's problem is drawn for the train split, which `draw_board` (and a problem file's hash split) keeps apart
from the eval split by content, so an evaluation never shows its own answer; an environment whose options put one
problem in both splits refuses the example. It is the same for every task of a config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from verl_mas.env import Message

WORKED_EXAMPLE_SEED = 2**31 - 1
EXAMPLE_ATTEMPTS = 16  # training problems tried, from WORKED_EXAMPLE_SEED down, for one with an expert reply
# (environment class, example config's repr, role) -> the example's user message and the expert's reply; the repr,
# since a config may hold a dict (math's source_options)
_examples: dict[tuple[type, str, str], tuple[Message, Message]] = {}


def require_example_apart(config: Any) -> None:
    """A problem-file config's example stays out of evaluation: `file_split="all"` puts every problem in both splits."""
    if config.worked_example and config.file_split == "all":
        raise ValueError(
            "worked_example draws its problem from the train split, which file_split='all' shares with the "
            "evaluation: an evaluated problem could show its own answer"
        )


def worked_example(env: Any, role: str, config: Any, start: Callable[[Any, int], None]) -> tuple[Message, Message]:
    """`role`'s worked example under `config` (the env's own, less what only one task has, such as an inline
    problem): `start(example, seed)` loads the training problem of `seed` into a clone of `env` that runs `config`
    without the example, and plays whatever comes before `role`'s first reply. The first of EXAMPLE_ATTEMPTS seeds
    whose problem has an expert reply for `role` is the example. Once per class, config and role; the caller gets
    its own copies of the two messages."""
    key = (type(env), repr(config), role)
    if key not in _examples:
        example = env.clone()
        example.config = dataclasses.replace(config, worked_example=False)
        for seed in range(WORKED_EXAMPLE_SEED, WORKED_EXAMPLE_SEED - EXAMPLE_ATTEMPTS, -1):
            start(example, seed)
            reply = example.expert(role)
            if reply is not None:
                break
        else:
            raise ValueError(
                f"{type(env).__name__}: worked_example needs an expert reply for {role!r}, and none of "
                f"{EXAMPLE_ATTEMPTS} training problems has one under these options"
            )
        _examples[key] = (
            {"role": "user", "content": example.observe(role)[-1]["content"]},
            {"role": "assistant", "content": reply},
        )
    user, assistant = _examples[key]
    return dict(user), dict(assistant)
