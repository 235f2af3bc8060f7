"""What replies that ignore the board score on Plan-Path, per board size and turns: the level a start has to beat.

    python -m research.plan_path_chance [--boards N] [--out FILE]

Writes data/chance.json; `python -m research.figures` redoes the page from it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas_envs.puzzles.grid import MOVES

DATA = Path(__file__).resolve().parent / "data"
RESULT_FILE = "chance.json"
# The design (README.md), fixed before the first run.
SIZES = (4, 5, 6)
TURNS = (1, 2)
WALL_RATIO = 0.2
BOARDS = 256
LONGEST_LIST = 6  # fixed and random lists hold 1 to this many moves
RANDOM_DRAWS = 32  # random episodes per board
LETTERS = tuple(MOVES)


def options(size: int, turns: int) -> dict:
    """The smollm2 preset's Plan-Path options at `size` and `turns` (its own are 4 and 2)."""
    return {"size": size, "wall_ratio": WALL_RATIO, "tool_mode": "compact", "max_turns": turns, "brief_prompts": True}


def solves(env, reply: Callable[[], Sequence[str]], turns: int) -> bool:
    """Whether committing `reply()` each turn, `turns` times, solves the loaded board (an illegal move stops that
    turn's list there, the moves before it stay: the plan's commit under the env's own rules)."""
    position = env.board.start
    for _ in range(turns):
        simulation = env.simulate(position, list(reply()))
        if simulation.solved:
            return True
        position = simulation.end
    return False


def every_list() -> list[tuple[str, ...]]:
    """Every move list of 1 to LONGEST_LIST moves, shortest first."""
    return [moves for length in range(1, LONGEST_LIST + 1) for moves in itertools.product(LETTERS, repeat=length)]


def setting(size: int, turns: int, boards: int) -> dict:
    """One (size, turns): the worked example's reply, the best fixed list (chosen on these boards) and random lists."""
    env = make_env("plan_path", **options(size, turns), worked_example=True)
    lists = every_list()
    fixed_wins = dict.fromkeys(lists, 0)
    example_wins, random_wins = 0, 0
    rng = random.Random(f"chance/{size}/{turns}")

    def random_list() -> list[str]:
        return [rng.choice(LETTERS) for _ in range(rng.randint(1, LONGEST_LIST))]

    for task in split_tasks("plan_path", "eval", boards, 0, options(size, turns)):
        env.reset(task)
        example = env.observe("plan")[-2]["content"].removeprefix("Actions: ").split()
        example_wins += solves(env, lambda example=example: example, turns)
        for moves in lists:
            fixed_wins[moves] += solves(env, lambda moves=moves: moves, turns)
        random_wins += sum(solves(env, random_list, turns) for _ in range(RANDOM_DRAWS))
    best = max(lists, key=fixed_wins.__getitem__)  # the first (shortest) of the lists that win most
    return {
        "size": size,
        "turns": turns,
        "boards": boards,
        "example": " ".join(example),
        "example_success": example_wins / boards,
        "best_fixed": " ".join(best),
        "best_fixed_success": fixed_wins[best] / boards,
        "random_success": random_wins / (boards * RANDOM_DRAWS),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", type=int, default=BOARDS)
    parser.add_argument("--out", type=Path, default=DATA / RESULT_FILE)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = [setting(size, turns, args.boards) for size in SIZES for turns in TURNS]
    found = {"date": time.strftime("%Y-%m-%d"), "command": "python -m research.plan_path_chance", "rows": rows,
             "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(json.dumps(found, indent=1))
