"""`make test`'s two workers: the CPU-stack launches go out first, one unit each; every other file is one unit."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from xdist_schedule import STACK_FILE, STACK_ORDER, StackFirstScheduling, stack_first


def test_the_launches_lead_the_collection_longest_first_and_the_rest_keep_their_order() -> None:
    names = [
        "tests/a.py::test_one",
        f"{STACK_FILE}::test_shared_trains_two_steps_for_real",
        "tests/b.py::test_two",
        f"{STACK_FILE}::test_lora_per_role_is_killed_then_resumes_from_its_checkpoint",
        "tests/a.py::test_three",
    ]
    items = [SimpleNamespace(nodeid=name) for name in names]
    stack_first(items)
    assert [item.nodeid for item in items] == [names[3], names[1], names[0], names[2], names[4]]


def test_each_launch_is_a_unit_and_other_files_are_one_unit_each() -> None:
    split = StackFirstScheduling._split_scope
    per_role = f"{STACK_FILE}::test_lora_per_role_is_killed_then_resumes_from_its_checkpoint"
    shared = f"{STACK_FILE}::test_shared_trains_two_steps_for_real"
    assert split(None, per_role) != split(None, shared)
    assert split(None, "tests/a.py::test_x[1]") == split(None, "tests/a.py::test_y") == "tests/a.py"
    assert split(None, "tests/a.py::test_x") != split(None, "tests/b.py::test_x")


def test_the_launch_names_are_the_stack_files_tests_but_the_slow_ones() -> None:
    source = (Path(__file__).resolve().parents[1] / STACK_FILE).read_text()
    tests = re.findall(r"^((?:@.*\n)*)def (test_\w+)", source, re.M)
    assert {name for decorators, name in tests if "mark.slow" not in decorators} == set(STACK_ORDER)
