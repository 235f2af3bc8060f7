"""Owns known-wrong programs made from a correct one: single-point mutants (a constant, an operator, a comparison)."""

from __future__ import annotations

import ast
import random
import warnings
from collections.abc import Callable

_SWAPPED_BINARY: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mod,
    ast.Mod: ast.FloorDiv,
}
_SWAPPED_COMPARE: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_SWAPPED_BOOL: dict[type, type] = {ast.And: ast.Or, ast.Or: ast.And}


def mutants(source: str, count: int, seed: str) -> list[str]:
    """Up to `count` distinct programs, each `source` with one point changed, chosen by `seed`; [] if it does not
    parse. They are candidates: the caller keeps those that fail a hidden case (some mutants are equivalent)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in data's regexes are the data's business
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    edits = _edit_points(tree)
    random.Random(seed).shuffle(edits)
    found: list[str] = []
    for edit in edits:
        if len(found) >= count:
            break
        undo = edit()
        try:
            text = ast.unparse(tree)
        except (ValueError, RecursionError):
            text = None
        undo()
        if text is not None and text not in found:
            found.append(text)
    return found


def _edit_points(tree: ast.AST) -> list[Callable[[], Callable[[], None]]]:
    """Every single-point change of `tree` as a function that applies it and returns its undo."""
    edits: list[Callable[[], Callable[[], None]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            edits += [_set(node, "value", node.value + 1), _set(node, "value", node.value - 1)]
        elif isinstance(node, ast.BinOp) and type(node.op) in _SWAPPED_BINARY:
            edits.append(_set(node, "op", _SWAPPED_BINARY[type(node.op)]()))
        elif isinstance(node, ast.BoolOp) and type(node.op) in _SWAPPED_BOOL:
            edits.append(_set(node, "op", _SWAPPED_BOOL[type(node.op)]()))
        elif isinstance(node, ast.Compare):
            for index, op in enumerate(node.ops):
                if type(op) in _SWAPPED_COMPARE:
                    edits.append(_set_item(node.ops, index, _SWAPPED_COMPARE[type(op)]()))
    return edits


def _set(node: ast.AST, attribute: str, value: object) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        old = getattr(node, attribute)
        setattr(node, attribute, value)
        return lambda: setattr(node, attribute, old)

    return apply


def _set_item(items: list, index: int, value: object) -> Callable[[], Callable[[], None]]:
    def apply() -> Callable[[], None]:
        old = items[index]
        items[index] = value

        def undo() -> None:
            items[index] = old

        return undo

    return apply
