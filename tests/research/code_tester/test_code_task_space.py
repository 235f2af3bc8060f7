"""research.code_tester.code_task_space: distinct expressions per task set, against bounds worked out by hand."""

import pytest

from research.code_tester import code_task_space


def test_one_term_tasks_hold_at_most_sixty_four_programs() -> None:
    # one term on a and b: 2 first names x 3 operators x (2 names + 9 constants) = 66 expressions, less the two that
    # are constant (a - a, b - b), which the generator rejects
    options = {"terms": 1, "variables": 2}
    held_out = set(code_task_space.expressions("eval", 150, 0, options))
    train = set(code_task_space.expressions("train", 300, 0, options))
    assert not held_out & train  # the split hashes the expression: no program is in both
    assert len(held_out | train) <= 64
    assert "arithmetic/a, b/a - a" not in held_out | train
    assert len(held_out) < len(train)  # about one in five to the evaluation split


def test_the_warm_starts_share_of_rl_tasks() -> None:
    one_term = code_task_space.task_space(terms=1, seed=3, eval_tasks=32, warm_tasks=512, rl_tasks=64)
    # 512 draws from about 51 training expressions leave none out, so every RL task's program was in the warm start
    assert one_term.rl_tasks_seen_in_warm_start == 1.0
    assert one_term.eval_expressions <= 32 and one_term.rl_expressions <= 51
    two_terms = code_task_space.task_space(terms=2, seed=3, eval_tasks=32, warm_tasks=64, rl_tasks=64)
    # two terms give about 1 800 training expressions: 64 warm-start draws cannot cover 64 RL draws
    assert two_terms.rl_tasks_seen_in_warm_start < 0.5
    assert two_terms.eval_expressions > one_term.eval_expressions


def test_the_table_has_a_row_per_seed_and_a_summary_per_setting() -> None:
    space = code_task_space.TaskSpace(
        terms=2, seed=7, eval_tasks=64, eval_expressions=50, warm_expressions=600, rl_tasks=480, rl_expressions=350,
        rl_tasks_seen_in_warm_start=0.625,
    )  # fmt: skip
    text = code_task_space.table([space, space], warm_tasks=1024)
    assert text.count("| 2 | 7 | 64 | 50 | 600 | 480 | 350 | 0.625 |") == 2
    assert "terms=2: 50.0 distinct expressions per held-out set on average." in text


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--rl-tasks", "0"], "--rl-tasks must be at least 1, got 0"),
        (["--terms", "7"], "terms must be an int in [1, 6]"),
    ],
)
def test_bad_counts_and_terms_are_refused_by_name(capsys, argv, named) -> None:
    with pytest.raises(SystemExit) as stopped:
        code_task_space.main(argv)
    assert stopped.value.code == 2 and named in capsys.readouterr().err
