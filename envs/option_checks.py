"""Checks of the options the built-in environments' configs share; each error names its key and the value given."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


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
        if not (isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 < seconds < math.inf):
            raise ValueError(f"{key} must be a positive finite number, got {seconds!r}")


def require_problem_source(config: Any, file_splits: tuple[str, ...]) -> None:
    """`source_options` a mapping, `data_file` a path or None, `file_split` one of `file_splits`."""
    if not isinstance(config.source_options, Mapping):
        raise ValueError(f"source_options must be a mapping, got {config.source_options!r}")
    if config.data_file is not None and not (isinstance(config.data_file, str) and config.data_file):
        raise ValueError(f"data_file must be a path, got {config.data_file!r}")
    if config.file_split not in file_splits:
        raise ValueError(f"file_split must be one of {file_splits}, got {config.file_split!r}")
