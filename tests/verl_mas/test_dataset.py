"""Tests of the dataset writer/reader: row format, determinism, round trips, malformed rows, split disjointness."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_mas.dataset import AGENT_NAME, read_tasks, row_task, rows_of_tasks, task_rows, write_dataset
from verl_mas.env import ENVS, MultiAgentEnv, StepResult, Task, Workflow, make_env, register_env, split_of
from verl_mas_envs.puzzles.sudoku import SudokuEnv  # noqa: F401  (registers "sudoku")


class TinyEnv(MultiAgentEnv):
    """One role guesses a number; the board is the number, drawn until it falls in the task's split."""

    def __init__(self, high: int = 1_000) -> None:
        if high < 10:
            raise ValueError(f"high must be >= 10, got {high}")
        self.high = high
        self.number = -1

    def workflow(self) -> Workflow:
        return Workflow(roles=("guesser",), max_turns=1)

    def reset(self, task: Task) -> None:
        rng = random.Random(task.seed)
        self.number = rng.randrange(self.high)
        while split_of(f"tiny:{self.number}") != task.split:
            self.number = rng.randrange(self.high)

    def observe(self, role: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"board {self.number}"}]

    def step(self, role: str, text: str) -> StepResult:
        return StepResult(float(text.strip() == str(self.number)), 0.0, True)

    def clone(self) -> TinyEnv:
        other = TinyEnv(self.high)
        other.number = self.number
        return other

    @property
    def done(self) -> bool:
        return False

    def success(self) -> bool:
        return False


if "dataset_tiny" not in ENVS:
    register_env("dataset_tiny")(TinyEnv)

SUDOKU_OPTIONS = {"size": 4, "tool_mode": "compact"}


def board_of(row: dict) -> str:
    info = row["extra_info"]
    env = make_env(info["env"], **json.loads(info["options"]))
    env.reset(Task(uid="x", env=info["env"], seed=info["seed"], split=info["split"]))
    return repr(env.observe(env.workflow().roles[0]))  # the first prompt shows the whole board


def test_rows_have_verl_format():
    rows = task_rows("sudoku", "train", 3, seed=11, options=SUDOKU_OPTIONS)
    assert len(rows) == 3
    for index, row in enumerate(rows):
        assert set(row) == {"prompt", "data_source", "agent_name", "reward_model", "extra_info"}
        assert row["data_source"] == "verl_mas/sudoku" and row["agent_name"] == AGENT_NAME
        assert row["reward_model"] == {"style": "rule", "ground_truth": ""}
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert "tool agent" in row["prompt"][0]["content"]  # the first role's observation
        info = row["extra_info"]
        assert info["env"] == "sudoku" and info["split"] == "train" and info["index"] == index
        assert isinstance(info["seed"], int) and json.loads(info["options"]) == SUDOKU_OPTIONS
    assert len({row["extra_info"]["seed"] for row in rows}) == 3


def test_rows_are_deterministic_in_seed_and_split():
    first = task_rows("sudoku", "eval", 4, seed=5, options=SUDOKU_OPTIONS)
    assert first == task_rows("sudoku", "eval", 4, seed=5, options=SUDOKU_OPTIONS)
    assert first != task_rows("sudoku", "eval", 4, seed=6, options=SUDOKU_OPTIONS)
    train = task_rows("sudoku", "train", 4, seed=5, options=SUDOKU_OPTIONS)
    assert {row["extra_info"]["seed"] for row in train}.isdisjoint(row["extra_info"]["seed"] for row in first)


def test_rows_of_tasks_write_each_task_at_its_position_whatever_its_uid():
    tasks = [
        Task(uid="mine/a", env="dataset_tiny", seed=5, split="eval", options={"high": 50}),
        Task(uid="mine/b", env="dataset_tiny", seed=6, split="train", options={"high": 60}),
    ]
    rows = rows_of_tasks(tasks)
    written = [(0, "eval", 5, '{"high": 50}'), (1, "train", 6, '{"high": 60}')]
    for row, task, (index, split, seed, options) in zip(rows, tasks, written, strict=True):
        env = TinyEnv(**task.options)
        env.reset(task)
        assert row == {
            "prompt": [{"role": "user", "content": f"board {env.number}"}],
            "data_source": "verl_mas/dataset_tiny",
            "agent_name": "mas_agent",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"env": "dataset_tiny", "seed": seed, "split": split, "options": options, "index": index},
        }
    read_back = [row_task(row, f"row {number}") for number, row in enumerate(rows)]
    assert [task.uid for task in read_back] == ["verl_mas/dataset_tiny/eval/0", "verl_mas/dataset_tiny/train/1"]
    assert [(task.seed, task.split, task.options) for task in read_back] == [
        (5, "eval", {"high": 50}),
        (6, "train", {"high": 60}),
    ]
    with pytest.raises(ValueError, match="split must be one of"):
        rows_of_tasks([Task(uid="x", env="dataset_tiny", seed=0, split="test")])
    with pytest.raises(ValueError, match="options for 'dataset_tiny' must be JSON-serialisable"):
        rows_of_tasks([Task(uid="x", env="dataset_tiny", seed=0, options={"high": {50}})])
    with pytest.raises(ValueError, match="high must be >= 10"):
        rows_of_tasks([Task(uid="x", env="dataset_tiny", seed=0, options={"high": 3})])


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_rows_are_built_by_the_dataset_writer_alone_which_imports_no_engine():
    root = Path(__file__).resolve().parents[2]
    environments = sorted((root / "envs").rglob("*.py"))
    assert len(environments) > 20  # the built-in environments were found
    knowing_rows = [
        str(path.relative_to(root)) for path in environments if "verl_mas.dataset" in imported_modules(path)
    ]
    assert knowing_rows == []
    for core in ("dataset.py", "data_files.py"):
        engines = {
            m
            for m in imported_modules(root / "verl_mas" / core)
            if m.startswith(("verl_mas.local", "verl_mas.verl_engine"))
        }
        assert engines == set(), core


def test_task_rows_rejects_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        task_rows("sudoku", "test", 1, seed=0, options={})
    with pytest.raises(ValueError, match="JSON"):
        task_rows("sudoku", "train", 1, seed=0, options={"size": {4}})
    with pytest.raises(KeyError, match="unknown environment"):
        task_rows("no_such_env", "train", 1, seed=0, options={})


def test_parquet_round_trip(tmp_path):
    paths = write_dataset("sudoku", tmp_path / "data", n_train=5, n_eval=3, seed=2, options=SUDOKU_OPTIONS)
    assert paths == {"train": tmp_path / "data" / "train.parquet", "eval": tmp_path / "data" / "eval.parquet"}
    for split, n in (("train", 5), ("eval", 3)):
        tasks = read_tasks(paths[split])
        rows = task_rows("sudoku", split, n, seed=2, options=SUDOKU_OPTIONS)
        assert [t.seed for t in tasks] == [row["extra_info"]["seed"] for row in rows]
        assert all(t.env == "sudoku" and t.split == split and t.options == SUDOKU_OPTIONS for t in tasks)
        assert [t.uid for t in tasks] == [f"verl_mas/sudoku/{split}/{i}" for i in range(n)]
        stored = pq.read_table(paths[split]).to_pylist()
        assert stored == rows  # prompts survive parquet unchanged
        env = make_env("sudoku", **tasks[0].options)
        env.reset(tasks[0])
        assert env.observe("tool") == rows[0]["prompt"]


def test_jsonl_round_trip(tmp_path):
    rows = task_rows("dataset_tiny", "train", 4, seed=9, options={"high": 50})
    rows[1]["extra_info"]["options"] = {"high": 50}  # a jsonl file may hold options as an object
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    tasks = read_tasks(path)
    assert [t.seed for t in tasks] == [row["extra_info"]["seed"] for row in rows]
    assert all(t.options == {"high": 50} and t.env == "dataset_tiny" for t in tasks)


def write_jsonl(tmp_path, rows) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    return str(path)


def break_row(mutate) -> list[dict]:
    rows = task_rows("dataset_tiny", "train", 3, seed=0, options={})
    mutate(rows[2])
    return rows


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda row: row["extra_info"].pop("env"), "missing extra_info.env"),
        (lambda row: row.pop("extra_info"), "missing extra_info"),
        (lambda row: row.pop("data_source"), "data_source"),
        (lambda row: row["extra_info"].update(seed="7"), "extra_info.seed must be an integer"),
        (lambda row: row["extra_info"].update(seed=1.5), "extra_info.seed must be an integer"),
        (lambda row: row["extra_info"].update(index=True), "extra_info.index must be an integer"),
        (lambda row: row["extra_info"].update(env="no_such_env"), "unknown environment 'no_such_env'"),
        (lambda row: row["extra_info"].update(split="test"), "extra_info.split"),
        (lambda row: row["extra_info"].update(options="{not json"), "extra_info.options is not JSON"),
        (lambda row: row["extra_info"].update(options="[1]"), "must be a JSON object"),
        (lambda row: row["extra_info"].update(options='{"high": 3}'), "options rejected"),
        (lambda row: row["extra_info"].update(options='{"colour": 1}'), "options rejected"),
    ],
)
def test_malformed_row_names_file_row_and_key(tmp_path, mutate, message):
    path = write_jsonl(tmp_path, break_row(mutate))
    with pytest.raises(ValueError, match="row 2") as excinfo:
        read_tasks(path)
    assert path in str(excinfo.value) and message in str(excinfo.value)


def test_malformed_parquet_row_and_bad_files(tmp_path):
    rows = task_rows("sudoku", "train", 2, seed=0, options=SUDOKU_OPTIONS)
    rows[1]["extra_info"]["env"] = "sudokuu"
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(ValueError, match=r"bad\.parquet: row 1: extra_info\.env"):
        read_tasks(path)
    with pytest.raises(ValueError, match="no such dataset file"):
        read_tasks(tmp_path / "missing.parquet")
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unknown dataset format"):
        read_tasks(tmp_path / "rows.csv")
    (tmp_path / "broken.jsonl").write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match="row 1 .line 2.: not JSON"):
        read_tasks(tmp_path / "broken.jsonl")


@pytest.mark.parametrize("env_name, options", [("sudoku", SUDOKU_OPTIONS), ("dataset_tiny", {"high": 40})])
def test_train_and_eval_boards_are_disjoint(env_name, options):
    train = {board_of(row) for row in task_rows(env_name, "train", 60, seed=3, options=options)}
    evaluation = {board_of(row) for row in task_rows(env_name, "eval", 60, seed=3, options=options)}
    assert train and evaluation and train.isdisjoint(evaluation)
