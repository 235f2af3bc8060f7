"""research.code_tester.tester_copies: field-by-field copy counts of tester replies and coder programs (hand-made)."""

import pytest

from research.code_tester import tester_copies

EXAMPLES = [("9 5", "11"), ("3 1", "-1")]  # a - 7 + a at (9, 5) and (3, 1)
EXPRESSION = "a - 7 + a"


def reply(*cases: tuple[str, str]) -> str:
    return "\n".join(f"```input\n{given}\n```\n```output\n{wanted}\n```" for given, wanted in cases)


def test_each_field_is_counted_against_the_example_at_the_same_position():
    reading = tester_copies.ModelReading(model="m", tasks=1, samples=3)
    tester_copies.read_reply(reading, reply(("9 5", "11"), ("3 1", "-1")), EXAMPLES, EXPRESSION)  # both copied
    # first case: wrong first integer, output copied (fails: 7 - 7 + 7 = 7); second: an input of its own, right for it
    tester_copies.read_reply(reading, reply(("7 5", "11"), ("4 0", "1")), EXAMPLES, EXPRESSION)
    tester_copies.read_reply(reading, "no cases at all", EXAMPLES, EXPRESSION)
    first, second = reading.by_position
    assert (first.cases, first.first_integer, first.second_integer, first.input, first.output) == (2, 1, 2, 1, 2)
    assert first.right_for_its_input == 1
    assert (second.cases, second.first_integer, second.second_integer, second.input, second.output) == (2, 1, 1, 1, 1)
    assert second.right_for_its_input == 2  # 4 - 7 + 4 = 1: a case the correct program passes, though not copied
    assert reading.replies == 3 and reading.unreadable_replies == 1 and reading.replies_with_a_failing_case == 1
    shares = tester_copies.shares(reading)
    assert shares["case 1: first integer"] == 0.5 and shares["case 2: right for its input"] == 1.0
    assert shares["replies with a case the correct program fails"] == pytest.approx(1 / 3)


def test_hostile_cases_count_as_failing_and_never_raise():
    reading = tester_copies.ModelReading(model="m", tasks=1, samples=4)
    tester_copies.read_reply(reading, reply(("nine 5", "11")), EXAMPLES, EXPRESSION)  # not an integer
    tester_copies.read_reply(reading, reply(("9", "11")), EXAMPLES, EXPRESSION)  # one integer where two are read
    tester_copies.read_reply(reading, reply(("9 5 1", "11")), EXAMPLES, EXPRESSION)  # three
    tester_copies.read_reply(reading, reply(("9 5", "eleven")), EXAMPLES, EXPRESSION)
    (first, _) = reading.by_position
    assert first.cases == 4 and first.right_for_its_input == 0 and reading.replies_with_a_failing_case == 4
    assert first.first_integer == 1 and first.input == 1 and first.output == 3  # only the last has the input


def test_a_program_is_read_by_the_expression_it_prints():
    reading = tester_copies.ModelReading(model="m", tasks=1, samples=3)
    program = "```python\na, b = map(int, input().split())\nprint({})\n```"
    for printed in ("a - 7 + a", "a - 7 - a", "b - 7 + a"):
        tester_copies.read_program(reading, program.format(printed), EXPRESSION)
    tester_copies.read_program(reading, "print(a - 7 + a)", EXPRESSION)  # no code block: nothing read
    assert (reading.programs, reading.programs_with_the_expression, reading.programs_first_term_right) == (4, 1, 2)


def test_a_folder_that_is_neither_a_model_nor_a_run_fails_naming_it(tmp_path):
    with pytest.raises(SystemExit, match="neither a saved model folder nor a run folder"):
        tester_copies.model_folder(str(tmp_path), tmp_path / "scratch")


@pytest.mark.parametrize("flag", ["--tasks", "--samples"])
def test_no_task_or_no_sample_fails_at_start_writing_nothing(tmp_path, flag):
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit):
        tester_copies.main([str(tmp_path), flag, "0", "--out", str(out)])
    assert not out.exists()
