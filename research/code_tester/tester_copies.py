"""What a warm-started code tester gets wrong when it copies the shown examples into its cases, field by field.

With `brief_examples`, the tester's expert reply is the statement's examples written as cases (`9 2 -> 27` becomes an
input block `9 2` and an output block `27`). For each saved model given, this samples the tester's first-turn reply
on held-out arithmetic tasks with the project's own sampler (`BatchingGenerator`, the training temperature), reads
every stdin case out of it, and counts, per case position (the first and the second case against the first and the
second example), how often each field is the example's: the input's first integer, its second, the whole input, and
the expected output. It also counts the cases the correct program fails (the expected output is not the task's own
expression at the case's input, evaluated from our generated expression: no model-written code runs) and the replies
holding at least one such case among their first two, which are what sends a right program to a second turn. The
coder's first programs are sampled beside them and compared with the reference's expression, term by term. A model
is a saved model folder (a warm start) or a run folder of the local engine, whose latest checkpoint is read. Trains
nothing.

    OMP_NUM_THREADS=1 python -m research.code_tester.tester_copies runs/code_b128/code/seed30/warm_start_team \\
        --tasks 64 --samples 8 --out research/code_tester/data/tester_copies.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformers import AutoTokenizer

from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.config import CONFIG_FILE, read_config
from verl_mas.local.export import export_policies
from verl_mas.local.generator import BatchingGenerator, SamplingConfig
from verl_mas.local.model import load_model
from verl_mas.rollout import GenerationRequest
from verl_mas_envs.code.problems import evaluate_expression

CASE = re.compile(r"```input\n(.*?)\n```\n```output\n(.*?)\n```", re.DOTALL)
PROGRAM = re.compile(r"```python\n.*?\nprint\((.*?)\)\n```", re.DOTALL)
# the design's task space: two-term arithmetic on two integers, brief prompts with the examples shown
ENV_OPTIONS = {
    "brief_prompts": True,
    "brief_examples": True,
    "source_options": {"terms": 2},
    "max_turns": 2,
    "wrong_programs": 0,
}


@dataclass
class FieldCounts:
    """Of `cases` cases at one position, how many had each field as the example has it."""

    cases: int = 0
    first_integer: int = 0
    second_integer: int = 0
    input: int = 0
    output: int = 0
    right_for_its_input: int = 0  # the correct program passes it, whatever input it picked


@dataclass
class ModelReading:
    """One model's tester replies and coder programs over the sampled tasks."""

    model: str
    tasks: int
    samples: int
    replies: int = 0
    unreadable_replies: int = 0
    replies_with_a_failing_case: int = 0
    by_position: list[FieldCounts] = field(default_factory=lambda: [FieldCounts(), FieldCounts()])
    programs: int = 0
    programs_with_the_expression: int = 0
    programs_first_term_right: int = 0


def integers(text: str) -> list[int] | None:
    """The whitespace-separated integers of a case's input, or None when one of them is not an integer."""
    try:
        return [int(token) for token in text.split()]
    except ValueError:
        return None


def read_reply(reading: ModelReading, reply: str, examples: Sequence[tuple[str, str]], expression: str) -> None:
    """Add one tester reply's cases to `reading`."""
    reading.replies += 1
    cases = CASE.findall(reply)
    if not cases:
        reading.unreadable_replies += 1
        return
    failing = False
    for position, (written_input, written_output) in enumerate(cases[: len(reading.by_position)]):
        counts = reading.by_position[position]
        example_input, example_output = examples[position]
        counts.cases += 1
        wanted, written = integers(example_input) or [], integers(written_input)
        counts.input += written_input.split() == example_input.split()
        counts.output += written_output.strip() == example_output.strip()
        right = False
        if written and len(written) == len(wanted):  # an input the task can read
            counts.first_integer += written[0] == wanted[0]
            counts.second_integer += len(written) > 1 and written[1] == wanted[1]
            value = evaluate_expression(expression, dict(zip("ab", written, strict=False)))
            right = written_output.strip() == str(value)
        counts.right_for_its_input += right
        failing = failing or not right
    reading.replies_with_a_failing_case += failing


def read_program(reading: ModelReading, reply: str, expression: str) -> None:
    """Add one coder program to `reading`: whether it prints the expression, and whether its first term is right."""
    reading.programs += 1
    match = PROGRAM.search(reply)
    printed = match.group(1).strip() if match else ""
    reading.programs_with_the_expression += printed == expression
    reading.programs_first_term_right += printed.split()[:3] == expression.split()[:3]


async def sample(generator: BatchingGenerator, requests: list[GenerationRequest]) -> list[list[str]]:
    generations = await asyncio.gather(*(generator(request) for request in requests))
    return [[g.text for g in group] for group in generations]


def model_folder(path: str, scratch: Path) -> str:
    """`path` when it holds a saved model; a run folder's latest checkpoint, exported under `scratch`, otherwise."""
    run = Path(path)
    if (run / "model.safetensors").is_file():
        return path
    if not (run / CONFIG_FILE).is_file():
        raise SystemExit(f"{path}: neither a saved model folder nor a run folder with {CONFIG_FILE}")
    folders = export_policies(read_config(run / CONFIG_FILE), scratch / "model", checkpoint=run, log=lambda _: None)
    if len(folders) != 1:
        raise SystemExit(f"{path}: the run has {len(folders)} policies; this reads one shared model")
    return str(next(iter(folders.values())))


def read_model(path: str, tasks: int, samples: int, seed: int, task_seed: int) -> ModelReading:
    """Sample every task's first-turn tester and coder replies from the model at `path` and count what they copy."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(path, Path(scratch))
        model = load_model(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    generator = BatchingGenerator({"shared": (model, tokenizer)}, SamplingConfig(max_new_tokens=72), seed=seed)
    env = make_env("code", **ENV_OPTIONS)
    reading = ModelReading(model=path, tasks=tasks, samples=samples)
    boards, requests = [], []
    for index, task in enumerate(split_tasks("code", "eval", tasks, task_seed, ENV_OPTIONS)):
        env.reset(task)
        problem = env.problem
        expression = problem.uid.split("/", 2)[2]
        examples = [(case.input.strip(), case.expected.strip()) for case in problem.visible]
        boards.append((expression, examples))
        for role in ("tester", "coder"):
            messages = tuple(env.observe(role))
            requests.append(GenerationRequest(f"{index}/{role}", "shared", role, messages, samples, order=(index,)))
    replies = asyncio.run(sample(generator, requests))
    for index, (expression, examples) in enumerate(boards):
        for reply in replies[2 * index]:
            read_reply(reading, reply, examples, expression)
        for reply in replies[2 * index + 1]:
            read_program(reading, reply, expression)
    return reading


def shares(reading: ModelReading) -> dict[str, float]:
    """Each count as a share of what it counts over."""
    replies, programs = max(reading.replies, 1), max(reading.programs, 1)
    out = {
        "unreadable replies": reading.unreadable_replies / replies,
        "replies with a case the correct program fails": reading.replies_with_a_failing_case / replies,
        "programs printing the expression": reading.programs_with_the_expression / programs,
        "programs with the first term right": reading.programs_first_term_right / programs,
    }
    for position, counts in enumerate(reading.by_position, start=1):
        for name in ("first_integer", "second_integer", "input", "output", "right_for_its_input"):
            out[f"case {position}: {name.replace('_', ' ')}"] = getattr(counts, name) / max(counts.cases, 1)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.code_tester.tester_copies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("models", nargs="+", help="saved model folders (warm starts) or local-engine run folders")
    parser.add_argument("--tasks", type=int, default=64, help="held-out tasks (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=8, help="replies a task and role (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (default: %(default)s)")
    parser.add_argument("--task-seed", type=int, default=0, help="which held-out tasks (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the readings here as JSON")
    args = parser.parse_args(argv)
    for name in ("tasks", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    results = []
    for path in args.models:
        reading = read_model(path, args.tasks, args.samples, args.seed, args.task_seed)
        table = shares(reading)
        results.append({"counts": asdict(reading), "shares": table})
        print(f"== {path}: {reading.tasks} tasks x {reading.samples} samples")
        for name, value in table.items():
            print(f"  {name}: {value:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(
            ["python", "-m", "research.code_tester.tester_copies", *(argv if argv is not None else sys.argv[1:])]
        )
        args.out.write_text(json.dumps({"command": command, "env_options": ENV_OPTIONS, "models": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
