"""Test kit: how `make test`'s two pytest-xdist workers share the suite.

The verl CPU-stack launches take most of the suite's time. Each is its own unit and goes out first, so the two
workers start one each at once; every other test file is one unit (its module fixtures are built once), handed to
whichever worker is free, in collection order.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

STACK_FILE = "tests/verl_mas/verl_engine/test_cpu_stack.py"
# The longest launch first: it goes to the first worker, the next one to the second, the third to the first free.
STACK_ORDER = (
    "test_lora_per_role_is_killed_then_resumes_from_its_checkpoint",
    "test_per_role_trains_two_policies_at_the_same_time_for_two_steps",
    "test_shared_trains_two_steps_for_real",
    "test_a_launch_short_of_logical_cpus_stops_at_start_naming_the_key",
)


def stack_first(items: list[pytest.Item]) -> None:
    """Put the CPU-stack launches at the front of the collection, longest first (a stable sort: the rest keep their
    order)."""

    def rank(item: pytest.Item) -> int:
        name = item.nodeid.split("::")[-1]
        if item.nodeid.startswith(STACK_FILE) and name in STACK_ORDER:
            return STACK_ORDER.index(name)
        return len(STACK_ORDER)

    items.sort(key=rank)


class StackFirstScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with a file per unit, except that each CPU-stack launch is a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return nodeid if nodeid.startswith(STACK_FILE) else nodeid.split("::", 1)[0]


def make_scheduler(config: pytest.Config, log) -> StackFirstScheduling:
    """The scheduler, handing out units in collection order (xdist would otherwise sort them by size)."""
    config.option.loadscopereorder = False
    return StackFirstScheduling(config, log)
