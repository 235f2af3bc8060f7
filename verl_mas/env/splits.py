"""Disjoint train/eval splits by a hash of the board, so no generated board can be in both."""

from __future__ import annotations

import hashlib

EVAL_SHARE_PER_MILLE = 200  # one board in five belongs to the evaluation split


def split_of(board_key: str) -> str:
    """The split a board belongs to, from a stable hash of its canonical text."""
    digest = hashlib.sha256(board_key.encode()).digest()
    bucket = int.from_bytes(digest[:4], "big") % 1000
    return "eval" if bucket < EVAL_SHARE_PER_MILLE else "train"
