"""What the built-in environments share: invalid-output reward, read limits, the split-keeping board draw, the
sandboxed tool program, the config built from options, and the option checks (each error names its key)."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from verl_mas.env import split_of
from verl_mas.env.replies import MAX_ANSWER_CHARS
from verl_mas.sandbox import SandboxLimits, run_python

INVALID_OUTPUT_REWARD = -0.5
SHOWN_OUTPUT_CHARS = 300  # of a failed program's stderr, or of unusable stdout, in the plan agent's prompt
MAX_GENERATION_ATTEMPTS = 10_000  # a board lands in the eval split with probability about 0.2 per attempt
#: said in the prompts that ask for something long (a program, a grid); replies are read by `answer_part`
READ_LIMIT_NOTE = f"Only the last {MAX_ANSWER_CHARS:,} characters of your reply are read."

BoardT = TypeVar("BoardT")
ConfigT = TypeVar("ConfigT")


def draw_board(
    name: str,
    seed: int,
    split: str,
    candidate: Callable[[random.Random], BoardT | None],
    key: Callable[[BoardT], str],
) -> BoardT:
    """The first acceptable candidate board, drawn with rng seeded by (name, seed, attempt), whose split is `split`.

    `candidate` returns None for a board it rejects (unsolvable, too easy); `key` gives the canonical board text
    whose hash decides the split, so the train and eval boards of one puzzle can never overlap.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    for attempt in range(MAX_GENERATION_ATTEMPTS):
        board = candidate(random.Random(f"{name}/{seed}/{attempt}"))
        if board is not None and split_of(key(board)) == split:
            return board
    raise RuntimeError(f"{name}: no acceptable {split} board in {MAX_GENERATION_ATTEMPTS} attempts (seed {seed})")


@dataclass(frozen=True)
class Unreadable:
    """No answer could be read from a reply, or from what a tool program printed; `reason` says why.

    `infra`: the sandbox could not run the program (not the model's fault; see `verl_mas.env.INFRA_FAILURE`).
    """

    reason: str
    infra: bool = False


def run_tool_program(code: str, stdin: str, time_limit_s: float) -> str | Unreadable:
    """What a tool program printed when run in the sandbox, or why it gave no output to read."""
    try:
        code.encode()
    except UnicodeEncodeError:  # a lone surrogate: no file can hold this program
        return Unreadable("the program is not valid text (it holds a lone surrogate)")
    limits = SandboxLimits(wall_time_s=time_limit_s, cpu_time_s=math.ceil(time_limit_s))
    result = run_python(code, stdin=stdin, limits=limits)
    if result.infra_error is not None:
        return Unreadable(result.infra_error, infra=True)
    if result.timed_out:
        return Unreadable("the program ran out of time")
    if result.memory_exceeded:
        return Unreadable("the program ran out of memory")
    if result.exit_code != 0:
        stderr = result.stderr.strip()[-SHOWN_OUTPUT_CHARS:]
        return Unreadable(f"the program exited with code {result.exit_code}" + (f": {stderr}" if stderr else ""))
    return result.stdout


def config_of(config_class: type[ConfigT], options: Mapping[str, Any]) -> ConfigT:
    """An environment's frozen config from its options, `config_class(**options)`: an option that is no field of it
    is a TypeError naming it and listing the options (`make_env` reports it as bad options for the environment)."""
    _require_known(config_class, options)
    return config_class(**options)


def config_with(base: ConfigT, options: Mapping[str, Any]) -> ConfigT:
    """`base` with `options` in place of its values (a task's options over the constructor's), checked as
    `config_of` checks them."""
    _require_known(type(base), options)
    return dataclasses.replace(base, **options)


def _require_known(config_class: type, options: Mapping[str, Any]) -> None:
    names = sorted(field.name for field in dataclasses.fields(config_class))
    unknown = [key for key in options if key not in names]
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}; the options are {', '.join(names)}")


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def require_flags(config: Any, *keys: str) -> None:
    for key in keys:
        if not isinstance(getattr(config, key), bool):
            raise ValueError(f"{key} must be true or false, got {getattr(config, key)!r}")


def require_ints(config: Any, **minimums: int) -> None:
    for key, low in minimums.items():
        value = getattr(config, key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise ValueError(f"{key} must be an int >= {low}, got {value!r}")


def require_seconds(config: Any, *keys: str) -> None:
    for key in keys:
        seconds = getattr(config, key)
        if not (is_number(seconds) and 0 < seconds < math.inf):
            raise ValueError(f"{key} must be a positive finite number, got {seconds!r}")


def require_problem_source(config: Any, file_splits: tuple[str, ...]) -> None:
    """`source_options` a mapping, `data_file` a path or None, `file_split` one of `file_splits`."""
    if not isinstance(config.source_options, Mapping):
        raise ValueError(f"source_options must be a mapping, got {config.source_options!r}")
    if config.data_file is not None and not (isinstance(config.data_file, str) and config.data_file):
        raise ValueError(f"data_file must be a path, got {config.data_file!r}")
    if config.file_split not in file_splits:
        raise ValueError(f"file_split must be one of {file_splits}, got {config.file_split!r}")
