"""The measurement's settings, named: the tool costs, the groupings' (grouping, cost) settings, the reference, and
the record's file name; the measurement and the page's figures share them."""

from __future__ import annotations

SIGNAL_FILE = "signal.json"
COSTS = (0.0, 0.5, 1.0, 2.0)
FINE = "task_role_turn"  # AT-GRPO's grouping, the reference of every ratio


def setting_names(grouping: str, cost: float) -> str:
    """A (grouping, cost) setting's name: `task@2` for task groups at cost 2; a role-keyed grouping's name alone (the
    cost does not reach its advantages)."""
    return f"task@{cost:g}" if grouping == "task" else grouping


# every setting, by name, with its label on the page
SETTINGS = {
    FINE: "`task_role_turn` (any cost)",
    "task_role": "`task_role` (any cost)",
    **{setting_names("task", c): f"`task`, tool cost {c:g}" for c in COSTS},
}
