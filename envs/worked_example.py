"""The worked example an environment's prompt may open with: one solved first turn of a role on a fixed training
problem (its prompt and the expert's reply), which a small pretrained chat model copies the reply's form from.

The example's problem is drawn for the train split, whose problems `draw_board` keeps apart from the eval split's by
their content, so an evaluation never shows its own answer. It is the same for every task of a config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from verl_mas.env import Message

WORKED_EXAMPLE_SEED = 2**31 - 1
# (environment class, config's repr, role) -> the example's user message and the expert's reply; the repr, since a
# config may hold a dict (math's source_options)
_examples: dict[tuple[type, str, str], tuple[Message, Message]] = {}


def worked_example(env: Any, role: str, start: Callable[[Any], None]) -> tuple[Message, Message]:
    """`role`'s worked example under `env`'s current config: `start(example)` loads the example's problem into a
    clone of `env` (its config without the example) and plays whatever comes before `role`'s first reply. Once per
    class, config and role."""
    key = (type(env), repr(env.config), role)
    if key not in _examples:
        example = env.clone()
        example.config = dataclasses.replace(env.config, worked_example=False)
        start(example)
        reply = example.expert(role)
        if reply is None:
            raise ValueError(f"{type(env).__name__}: no expert reply for {role!r} on the worked example's problem")
        _examples[key] = (
            {"role": "user", "content": example.observe(role)[-1]["content"]},
            {"role": "assistant", "content": reply},
        )
    return _examples[key]
