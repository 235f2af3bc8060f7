"""Hydra-style `key=value` overrides applied to typed dataclass configs, with errors that name the key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import yaml

C = TypeVar("C")

# The member types a union-typed field (`resume: bool | str`) can be checked against.
_SIMPLE_TYPE_NAMES = frozenset({"bool", "int", "float", "str", "None"})


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """["a=1", "b.c=x"] -> {"a": 1, "b": {"c": "x"}}; values are parsed as YAML scalars/lists."""
    tree: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ValueError(f"override {item!r}: cannot parse value: {exc}") from exc
        value = _number_or_same(value)
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part!r} is already set to a value")
        node[parts[-1]] = value
    return tree


def _number_or_same(value: Any) -> Any:
    """YAML 1.1 reads `3e-5` (no dot) as a string; a user writing it means the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_overrides(config: C, overrides: Mapping[str, Any], path: str = "") -> C:
    """A copy of dataclass `config` with `overrides` applied; mapping-typed fields merge key by key."""
    known = {f.name: f for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"unknown config key {path + key!r}; known keys: {', '.join(sorted(known))}")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            changes[key] = apply_overrides(current, value, f"{path}{key}.")
        elif isinstance(current, Mapping) and isinstance(value, Mapping):
            changes[key] = {**current, **value}
        else:
            changes[key] = _coerce(value, current, path + key, known[key].type)
    return dataclasses.replace(config, **changes)


def _coerce(value: Any, current: Any, key: str, annotation: Any) -> Any:
    members = [member.strip() for member in str(annotation).split("|")]
    if isinstance(value, str) and (isinstance(current, float) or "float" in members):
        value = _number_or_same(value)  # nested YAML (`update='{eps: 1e-8}'`) reads 1e-8 as a string too
    if len(members) > 1 and all(member in _SIMPLE_TYPE_NAMES for member in members):
        return _coerce_union(value, members, key)
    if isinstance(value, list) and (isinstance(current, tuple) or str(annotation).startswith("tuple")):
        return tuple(value)
    if isinstance(current, bool) and not isinstance(value, bool):
        raise ValueError(f"config key {key!r} expects true/false, got {value!r}")
    if isinstance(current, int) and not isinstance(current, bool):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config key {key!r} expects an integer, got {value!r}")
    if isinstance(current, float) and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"config key {key!r} expects a number, got {value!r}")
    if isinstance(current, float):
        return float(value)
    return value


def _coerce_union(value: Any, members: list[str], key: str) -> Any:
    """Accept a value of any member type (an int where only float is allowed becomes a float)."""
    kind = "None" if value is None else type(value).__name__
    if kind in members:
        return value
    if kind == "int" and "float" in members:
        return float(value)
    raise ValueError(f"config key {key!r} expects {' or '.join(members)}, got {value!r}")
