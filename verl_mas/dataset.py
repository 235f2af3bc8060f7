"""verl rows of any registered environment's tasks, built here only: writing parquet, reading parquet/jsonl back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from verl_mas.data_files import load_rows
from verl_mas.env import MultiAgentEnv, Task, get_env_class, make_env

AGENT_NAME = "mas_agent"
SPLITS = ("train", "eval")
REQUIRED_EXTRA_INFO = ("env", "seed", "split", "options", "index")


def data_source(env_name: str) -> str:
    return f"verl_mas/{env_name}"


def task_seed(seed: int, split: str, index: int) -> int:
    """Seed of row `index`: a 62-bit hash of (seed, split, index), so seeds never collide in practice."""
    digest = hashlib.sha256(f"{seed}/{split}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


def split_tasks(
    env_name: str, split: str, count: int, seed: int, options: Mapping[str, Any] | None = None, start: int = 0
) -> list[Task]:
    """Tasks `start`..`start+count-1` of `split`; their uids match what `read_tasks` gives for the same rows."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    options = dict(options or {})
    return [
        Task(
            uid=f"{data_source(env_name)}/{split}/{index}",
            env=env_name,
            seed=task_seed(seed, split, index),
            split=split,
            options=options,
        )
        for index in range(start, start + count)
    ]


def task_rows(env_name: str, split: str, n: int, seed: int, options: Mapping[str, Any] | None = None) -> list[dict]:
    """`n` verl rows for `split` (see `verl_row`)."""
    return rows_of_tasks(split_tasks(env_name, split, n, seed, options))


def rows_of_tasks(tasks: Sequence[Task]) -> list[dict]:
    """The verl row of each task (see `verl_row`), its `index` the task's position: a task's uid is not written, it
    reads back as `data_source/split/index`. Tasks with the options of the one before share its environment."""
    rows: list[dict] = []
    built: tuple[str, str, MultiAgentEnv] | None = None
    for index, task in enumerate(tasks):
        if task.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {task.split!r}")
        try:
            options_json = json.dumps(task.options, sort_keys=True)
        except TypeError as exc:
            raise ValueError(f"options for {task.env!r} must be JSON-serialisable: {exc}") from exc
        if built is None or built[:2] != (task.env, options_json):
            built = (task.env, options_json, make_env(task.env, **task.options))
        rows.append(verl_row(built[2], task, options_json, index))
    return rows


def verl_row(env: MultiAgentEnv, task: Task, options_json: str, index: int) -> dict:
    """The verl row of `task`, reset on `env`: the prompt is the first role's observation, and `extra_info` holds what a
    worker needs to rebuild the task (env name, seed, split, options as JSON).

    The reward comes from the environment at rollout time, so `reward_model.ground_truth` stays empty.
    """
    env.reset(task)
    return {
        "prompt": env.observe(env.workflow().roles[0]),
        "data_source": data_source(task.env),
        "agent_name": AGENT_NAME,
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {
            "env": task.env,
            "seed": task.seed,
            "split": task.split,
            "options": options_json,
            "index": index,
        },
    }


def write_dataset(
    env_name: str,
    out_dir: str | Path,
    n_train: int,
    n_eval: int,
    seed: int,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write `train.parquet` and `eval.parquet` under `out_dir`; returns {split: path}."""
    if n_train < 1 or n_eval < 1:
        raise ValueError(f"n_train and n_eval must be >= 1, got {n_train} and {n_eval}")
    # Every row is built before the folder is made: an unknown env or a bad option leaves the disk as it was.
    tables = {
        split: pa.Table.from_pylist(task_rows(env_name, split, n, seed, options))
        for split, n in (("train", n_train), ("eval", n_eval))
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, table in tables.items():
        paths[split] = out / f"{split}.parquet"
        pq.write_table(table, paths[split])
    return paths


def read_tasks(path: str | Path) -> list[Task]:
    """Tasks from a parquet or jsonl file of rows as written by `task_rows`.

    Every row is checked before any task is returned: a malformed row is a ValueError naming the file, the
    row number (0-based) and the bad key, and options are checked by constructing the environment once.
    """
    path = Path(path)
    rows = load_rows(path)
    tasks = []
    checked_options: set[tuple[str, str]] = set()
    for number, row in enumerate(rows):
        task = row_task(row, f"{path}: row {number}")
        key = (task.env, json.dumps(task.options, sort_keys=True))
        if key not in checked_options:
            try:
                make_env(task.env, **task.options)
            except ValueError as exc:
                raise ValueError(f"{path}: row {number}: extra_info.options rejected by {task.env!r}: {exc}") from exc
            checked_options.add(key)
        tasks.append(task)
    return tasks


def row_task(row: Any, where: str) -> Task:
    """The Task of one verl dataset row; `where` names the row in errors."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: row is {type(row).__name__}, expected a mapping")
    source = row.get("data_source")
    if not isinstance(source, str) or not source:
        raise ValueError(f"{where}: missing or empty data_source")
    info = row.get("extra_info")
    if not isinstance(info, Mapping):
        raise ValueError(f"{where}: missing extra_info")
    for key in REQUIRED_EXTRA_INFO:
        if info.get(key) is None:
            raise ValueError(f"{where}: missing extra_info.{key}")
    env_name = info["env"]
    if not isinstance(env_name, str):
        raise ValueError(f"{where}: extra_info.env must be a string, got {env_name!r}")
    try:
        get_env_class(env_name)
    except KeyError as exc:
        raise ValueError(f"{where}: extra_info.env: {exc.args[0]}") from None
    for key in ("seed", "index"):
        if not isinstance(info[key], int) or isinstance(info[key], bool):
            raise ValueError(f"{where}: extra_info.{key} must be an integer, got {info[key]!r}")
    split = info["split"]
    if split not in SPLITS:
        raise ValueError(f"{where}: extra_info.split must be one of {SPLITS}, got {split!r}")
    options = info["options"]
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: extra_info.options is not JSON: {exc}") from exc
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: extra_info.options must be a JSON object, got {options!r}")
    return Task(
        uid=f"{source}/{split}/{info['index']}", env=env_name, seed=info["seed"], split=split, options=dict(options)
    )
