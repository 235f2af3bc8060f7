"""Every command the README, docs/ and recipes/ show runs as far as it can without Ray: `python -m verl_mas.main`
composes (hydra's struct check included) and passes main's start checks, `verl-mas` parses and builds its config
(`data` writes a few rows), a recipe script launches what composes, and inline overrides of verl's config compose."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from doc_commands import DocCommand, check_pip, doc_session, extract, failures, shown_files

from verl_mas import doctor

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    + [p for p in (REPO / "recipes").rglob("*") if p.suffix in (".md", ".sh", ".yaml")]
)


def stand_ins(folder: Path) -> dict[str, str]:
    """The public data files the recipe READMEs name, as small files of the same forms (each a few problems), and
    the README's `env=my_game` (the reader's own environment) as the test kit's registered `counter`."""
    folder.mkdir()
    apps = [
        {
            "problem_id": n,
            "question": f"Print the sum of two integers plus {n}.",
            "solutions": json.dumps([f"a, b = map(int, input().split())\nprint(a + b + {n})\n"]),
            "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": [f"{3 + n}\n", f"{10 + n}\n"]}),
            "starter_code": "",
        }
        for n in range(12)
    ]
    (folder / "apps.jsonl").write_text("".join(json.dumps(row) + "\n" for row in apps))
    dapo = [
        {"prompt": [{"role": "user", "content": f"Compute {n} + {n}."}], "reward_model": {"ground_truth": str(2 * n)}}
        for n in range(6)
    ]
    pq.write_table(pa.Table.from_pylist(dapo), folder / "dapo.parquet")
    aime = [{"ID": f"2024-I-{n}", "Problem": f"Find {n} squared.", "Answer": n * n} for n in range(1, 6)]
    (folder / "aime.jsonl").write_text("".join(json.dumps(row) + "\n" for row in aime))
    return {
        "/data/apps.jsonl": str(folder / "apps.jsonl"),
        "/data/dapo_math_17k.parquet": str(folder / "dapo.parquet"),
        "/data/aime_2024.jsonl": str(folder / "aime.jsonl"),
        "env=my_game": "env=counter",
    }


def run_doc(doc: Path, tmp_path: Path) -> list[str]:
    with doc_session(REPO, tmp_path, stand_ins(tmp_path / "public_sets"), shown_files(doc)) as session:
        return failures(extract(doc, REPO), session)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_command_runs(doc, tmp_path, monkeypatch):
    for name in ("DATA_DIR", "MODEL", "N_GPUS"):
        monkeypatch.delenv(name, raising=False)
    failed = run_doc(doc, tmp_path)
    assert not failed, "\n".join(failed)


def test_the_docs_show_each_kind_of_command():
    """The extractor finds commands of each kind where the docs have them, joined over continuation lines."""
    found = {path: extract(path, REPO) for path in DOCS}
    kinds = {command.kind for commands in found.values() for command in commands}
    assert kinds == {"main", "cli", "script", "pip", "overrides"}
    code = {command.line: command for command in found[REPO / "recipes" / "code" / "README.md"]}
    apps_run = code[50]
    assert apps_run.kind == "main"
    assert apps_run.words[:5] == ("python", "-m", "verl_mas.main", "--config-path", "$PWD/recipes/code")
    assert apps_run.words[-1] == "actor_rollout_ref.model.path=Qwen/Qwen3-1.7B"  # the third line of the command
    launcher = [(c.line, c.words) for c in found[REPO / "recipes" / "launch.sh"] if c.kind == "script"]
    assert launcher == [
        (13, ("bash", "recipes/sudoku/run_qwen3_8b.sh", "shared")),
        (14, ("bash", "recipes/launch.sh", "sudoku", "8b", "shared")),
    ]


HOSTILE_DOC = """# A doc with broken commands

    python -m verl_mas.main mas.timeline=/tmp/timeline.jsonl --cfg job
    python -m verl_mas.main --config-path sudoku --config-name sudoku
    python -m verl_mas.main +platform=cpu mas.router=per_role actor_rollout_ref.rollout.name=sglang
    verl-mas train no_such_key=1
    verl-mas data --env sudoku --out ~/data/x --train 5 size=7
    bash recipes/sudoku/run_qwen3_1.7b.sh per_agent
    python -m verl_mas.main mas.env=sudoku +mas.timeline=/tmp/t.jsonl --cfg job
    pip install "verl-mas[gpu]"
    pip install -e ".[gpus]"
    pip install -e ".[gpu]" "dist/verl_mas-0.0.9-py3-none-any.whl[gpu]"
    verl-mas doctor --recipe recipes/sudoku/sudoku.yaml --gpu-memory 80 mas.rollout.kk=2

Prose with an override that does not compose: `mas.rollout.kk=4`, and one that does: `mas.rollout.k=4`.
A usage line is not a command: `bash recipes/launch.sh <env> 1.7b|8b LEVEL`.
"""


def test_a_doc_with_broken_commands_fails_naming_the_file_line_and_key(tmp_path):
    doc = tmp_path / "hostile.md"
    doc.write_text(HOSTILE_DOC)
    (tmp_path / "run").mkdir()
    failed = run_doc(doc, tmp_path / "run")
    expected = [
        (f"{doc}:3:", "Could not override 'mas.timeline'"),
        (f"{doc}:4:", "--config-path sudoku: no folder"),  # read from the current folder, the checkout
        (f"{doc}:5:", "actor_rollout_ref.rollout.name=sglang: not supported with several policies"),
        (f"{doc}:6:", "unknown config key 'no_such_key'"),
        (f"{doc}:7:", "size"),
        (f"{doc}:8:", "unknown level 'per_agent'"),
        (f"{doc}:10:", "verl-mas is not on the package index"),
        (f"{doc}:11:", "verl-mas has no extra ['gpus']"),
        (f"{doc}:12:", "the wheel of verl-mas 0.1.0 is named verl_mas-0.1.0-"),
        (f"{doc}:13:", "Could not override 'mas.rollout.kk'"),
        (f"{doc}:15:", "Could not override 'mas.rollout.kk'"),
    ]
    assert len(failed) == len(expected), "\n".join(failed)
    for line, (where, named) in zip(failed, expected, strict=True):
        assert line.startswith(where) and named in line, line


@pytest.mark.parametrize("target", sorted(doctor.INSTALL))
def test_doctors_install_hints_install_from_the_checkout(target):
    for command in doctor.INSTALL[target].split(" && "):
        check_pip(shlex.split(command))


def test_a_command_is_reported_once_per_line_with_what_failed(tmp_path):
    doc = tmp_path / "twice.md"
    doc.write_text("    verl-mas train no_such_key=1\n\ntext\n\n    verl-mas train no_such_key=1\n")
    (tmp_path / "run").mkdir()
    commands = extract(doc, tmp_path)
    assert commands == [
        DocCommand(Path("twice.md"), 1, "cli", ("verl-mas", "train", "no_such_key=1"), "verl-mas train no_such_key=1"),
        DocCommand(Path("twice.md"), 5, "cli", ("verl-mas", "train", "no_such_key=1"), "verl-mas train no_such_key=1"),
    ]
    with doc_session(REPO, tmp_path / "run", {}) as session:
        assert [line.split(": ", 1)[0] for line in failures(commands, session)] == ["twice.md:1", "twice.md:5"]
