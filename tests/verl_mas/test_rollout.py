"""Tests of the tree rollout on the counting environment, with hand-computed rewards and trees."""

from __future__ import annotations

import asyncio
import copy
import random
import threading
import time

import pytest

from mas_testkit import BlockingCounterEnv, CounterEnv, ScriptedGenerator, spread_script
from verl_mas.env import Task
from verl_mas.offload import offloaded_steps
from verl_mas.rollout import Generation, RolloutConfig, rollout_task, rollout_tasks
from verl_mas.router import PolicyRouter

ROUTER = PolicyRouter.from_spec("per_role", ("a", "b"))


def counter_factory(target: int, mode: str = "sequential", max_turns: int = 5):
    def make(task: Task) -> CounterEnv:
        env = CounterEnv(mode=mode, max_turns=max_turns)
        env.reset(task)
        env.target = target
        return env

    return make


def run(tasks, generator, config, factory):
    return asyncio.run(rollout_tasks(tasks, generator, ROUTER, config, factory))


def test_sequential_tree_hand_computed():
    gen = ScriptedGenerator(spread_script)  # candidates -1, 0, 1, 2, 3
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=5, alpha=1.0), counter_factory(target=5))
    a = [s for s in ep.samples if s.role == "a"]
    b = [s for s in ep.samples if s.role == "b"]
    # role a at value 0: team 1-|5-v|/5 for v=-1..3, local (5-|5-v|)/3
    assert [s.team_reward for s in a] == pytest.approx([-0.2, 0.0, 0.2, 0.4, 0.6])
    assert [s.local_reward for s in a] == pytest.approx([-1 / 3, 0.0, 1 / 3, 2 / 3, 1.0])
    assert [s.reward for s in a] == pytest.approx([-0.2 - 1 / 3, 0.0, 0.2 + 1 / 3, 0.4 + 2 / 3, 1.6])
    assert [s.continued for s in a] == [False, False, False, False, True]
    # role b acts on the chosen branch (value 3): reference defect 2 read stale copies here
    assert gen.requests[1].messages[0]["content"] == "role=b value=3 target=5 moves=1"
    # ... and its candidates are scored on their own clones: rewards differ (reference defect 3)
    assert [s.reward for s in b] == pytest.approx([0.4 - 1 / 3, 0.6, 0.8 + 1 / 3, 1.0 + 2 / 3, 0.8 + 1 / 3])
    assert [s.continued for s in b] == [False, False, False, True, False]
    # b's delta 2 reaches the target: the episode ends early, no second turn is requested
    assert ep.success and ep.turns == 1 and len(gen.requests) == 2
    assert ep.team_reward == pytest.approx(1.0)
    assert [(s.turn, s.branch, s.policy) for s in b] == [(0, i, "b") for i in range(5)]


def test_mixing_weight_alpha_scales_team_reward_only():
    gen = ScriptedGenerator(spread_script)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=5, alpha=0.5), counter_factory(target=5))
    for s in ep.samples:
        assert s.reward == pytest.approx(0.5 * s.team_reward + s.local_reward)


def test_ties_continue_from_the_lowest_branch():
    gen = ScriptedGenerator(lambda f, n, r: ["1", "2", "2", "2"][:n])
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=4, max_turns=1), counter_factory(target=9))
    assert [s.continued for s in ep.samples if s.role == "a"] == [False, True, False, False]


def test_select_by_team_reward():
    # delta 3 overshoots to 6 with target 4: team 0.5, local 1/3 - but team reward alone prefers 4 (delta 1)
    gen = ScriptedGenerator(lambda f, n, r: ["3", "1"] if f["role"] == "b" else ["3", "3"])
    config = RolloutConfig(k=2, max_turns=1, select="team_reward", alpha=0.0)
    [ep] = run([Task("t0", "counter", 0)], gen, config, counter_factory(target=4))
    b = [s for s in ep.samples if s.role == "b"]
    assert [s.continued for s in b] == [False, True] and ep.success


def test_parallel_roles_score_against_the_same_state_then_apply_together():
    gen = ScriptedGenerator(spread_script)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=5, max_turns=2), counter_factory(5, mode="parallel"))
    first_turn = gen.requests[:2]
    assert {r.role for r in first_turn} == {"a", "b"}
    assert all(r.messages[0]["content"].endswith("value=0 target=5 moves=0") for r in first_turn)
    # each role's best is delta 3, applied together: 0 + 3 + 3 = 6
    assert all(r.messages[0]["content"].endswith("value=6 target=5 moves=2") for r in gen.requests[2:4])
    a0 = [s for s in ep.samples if s.role == "a" and s.turn == 0]
    b0 = [s for s in ep.samples if s.role == "b" and s.turn == 0]
    assert [s.reward for s in a0] == pytest.approx([s.reward for s in b0])
    assert ep.turns == 2 and not ep.success


def test_parallel_episode_team_reward_is_that_of_the_joint_state():
    """Each candidate alone moves the counter 0 -> 2 (team reward 0.5); applied together they reach 4 (1.0): the
    episode reports the joint state's reward, not a lone candidate's."""
    gen = ScriptedGenerator(lambda f, n, r: ["2"] * n)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=2, max_turns=3), counter_factory(4, mode="parallel"))
    assert {s.team_reward for s in ep.samples} == {0.5}
    assert ep.success and ep.turns == 1
    assert ep.team_reward == pytest.approx(1.0)


def test_max_turns_bounds_an_episode_that_never_ends():
    gen = ScriptedGenerator(lambda f, n, r: ["0"] * n)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=2, max_turns=3), counter_factory(target=5))
    assert ep.turns == 3 and len(gen.requests) == 6 and not ep.success
    assert sorted({s.turn for s in ep.samples}) == [0, 1, 2]


def test_request_id_is_stable_per_task_and_role():
    gen = ScriptedGenerator(lambda f, n, r: ["0"] * n)
    run([Task("t0", "counter", 0)], gen, RolloutConfig(k=2, max_turns=3), counter_factory(target=5))
    assert [r.request_id for r in gen.requests] == ["t0/a", "t0/b"] * 3


def test_invalid_output_is_a_scored_move_not_an_exception():
    gen = ScriptedGenerator(lambda f, n, r: ["garbage", "1", "", "99"][:n])
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=4, max_turns=1), counter_factory(target=5))
    a = [s for s in ep.samples if s.role == "a"]
    assert [s.valid for s in a] == [False, True, False, False]
    assert a[0].reward == pytest.approx(0.0 - 1.0)  # team unchanged at 0, invalid penalty -1
    assert ep.invalid_moves == 6 and ep.error is None


def test_environment_exception_is_isolated_to_its_task():
    def script(fields, n, request):
        return ["raise"] * n if request.request_id == "t1/b" else ["1"] * n

    gen = ScriptedGenerator(script)
    tasks = [Task("t0", "counter", 0), Task("t1", "counter", 1)]
    ok, broken = run(tasks, gen, RolloutConfig(k=2, max_turns=2), counter_factory(target=9))
    assert ok.error is None and ok.turns == 2 and len(ok.samples) == 8
    assert "RuntimeError: counter env bug" in broken.error and "step(b)" in broken.error
    # the completed group of role a survives; the broken group is not half-recorded
    assert [(s.role, s.turn) for s in broken.samples] == [("a", 0), ("a", 0)]


def test_clone_is_used_k_times_per_role_turn_and_deepcopy_never(monkeypatch):
    def no_deepcopy(*args, **kwargs):
        raise AssertionError("deepcopy called: clones must be explicit (reference defect 9)")

    monkeypatch.setattr(copy, "deepcopy", no_deepcopy)
    gen = ScriptedGenerator(lambda f, n, r: ["1"] * n)
    for mode, clones_per_turn in (("sequential", 2 * 4), ("parallel", 2 * 4 + 1)):
        envs: list[CounterEnv] = []

        def factory(task, mode=mode, envs=envs):
            envs.append(counter_factory(target=50, mode=mode, max_turns=3)(task))
            return envs[-1]

        run([Task("t0", "counter", 0)], gen, RolloutConfig(k=4), factory)
        assert envs[0].clone_calls[0] == 3 * clones_per_turn


def test_all_tasks_are_in_flight_together():
    gen = ScriptedGenerator(lambda f, n, r: ["1"] * n, yield_steps=3)
    run([Task(f"t{i}", "counter", i) for i in range(8)], gen, RolloutConfig(k=4, max_turns=1), counter_factory(9))
    assert gen.peak_in_flight == 8


def test_same_seed_same_tree():
    def seeded_script(fields, n, request):
        rng = random.Random(f"{request.request_id}|{fields['value']}|{fields['moves']}")
        return [str(rng.randint(-3, 3)) for _ in range(n)]

    tasks = [Task(f"t{i}", "counter", seed=i) for i in range(4)]
    from verl_mas.rollout import default_env_factory

    first = run(tasks, ScriptedGenerator(seeded_script), RolloutConfig(k=4), default_env_factory)
    second = run(tasks, ScriptedGenerator(seeded_script), RolloutConfig(k=4), default_env_factory)
    assert [ep.samples for ep in first] == [ep.samples for ep in second]
    assert len({s.reward for ep in first for s in ep.samples}) > 3


def test_plain_rollout_is_k_equal_one():
    gen = ScriptedGenerator(lambda f, n, r: ["3"] * n)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=1), counter_factory(target=9))
    assert all(r.n == 1 for r in gen.requests)
    assert all(s.continued for s in ep.samples) and ep.success and ep.turns == 2


def test_generator_returning_wrong_count_is_an_error():
    gen = ScriptedGenerator(lambda f, n, r: ["1"])
    with pytest.raises(RuntimeError, match="returned 1 candidates for t0/a, expected 3"):
        asyncio.run(rollout_task(Task("t0", "counter", 0), gen, ROUTER, RolloutConfig(k=3), counter_factory(5)))


def test_duplicate_task_uids_rejected():
    with pytest.raises(ValueError, match="unique"):
        run(
            [Task("t", "counter", 0), Task("t", "counter", 1)],
            ScriptedGenerator(spread_script),
            RolloutConfig(k=2),
            counter_factory(5),
        )


@pytest.mark.parametrize(
    "kwargs, message", [({"k": 0}, "k must be"), ({"max_turns": 0}, "max_turns"), ({"select": "x"}, "select")]
)
def test_bad_rollout_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RolloutConfig(**kwargs)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
@pytest.mark.parametrize("blocking", [True, False])
def test_blocking_steps_and_only_those_run_off_the_event_loop(monkeypatch, mode, blocking):
    """Every step of a `blocking_step` env runs in a worker thread: candidates and, in parallel mode, the replay of
    the chosen moves; a non-blocking env steps on the loop. The tree is the same either way."""
    steps_on_loop, steps_off_loop = [], []
    loop_thread = threading.get_ident()
    original_step = CounterEnv.step

    def recording_step(self, role, text):
        (steps_on_loop if threading.get_ident() == loop_thread else steps_off_loop).append(role)
        return original_step(self, role, text)

    monkeypatch.setattr(CounterEnv, "step", recording_step)
    monkeypatch.setattr(CounterEnv, "blocking_step", property(lambda self: blocking))
    gen = ScriptedGenerator(spread_script)
    [ep] = run([Task("t0", "counter", 0)], gen, RolloutConfig(k=5, max_turns=2), counter_factory(5, mode=mode))
    # sequential: 5 candidates of a, then of b (b reaches 5); parallel: 2 turns of 5 + 5 candidates and 2 replays
    expected = 10 if mode == "sequential" else 2 * (10 + 2)
    assert (len(steps_off_loop), len(steps_on_loop)) == ((expected, 0) if blocking else (0, expected))
    if mode == "sequential":  # same tree as when stepping on the loop (see test_sequential_tree_hand_computed)
        assert [s.continued for s in ep.samples] == [False] * 4 + [True] + [False] * 3 + [True, False]
    else:
        assert ep.turns == 2 and not ep.success


class SleepCount:
    """How many steps are asleep right now (steps run in threads)."""

    def __init__(self) -> None:
        self.asleep = 0
        self.lock = threading.Lock()

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.asleep += 1
        time.sleep(seconds)
        with self.lock:
            self.asleep -= 1


def sleepy_factory(sleeps: SleepCount):
    """Task t0's steps sleep 0.2 s each, the others' none."""

    def make(task: Task) -> BlockingCounterEnv:
        pause = (lambda: sleeps.sleep(0.2)) if task.uid == "t0" else (lambda: None)
        env = BlockingCounterEnv(pause, max_turns=2, roles=("a",))
        env.reset(task)
        env.target = 9
        return env

    return make


@pytest.mark.parametrize("lockstep", [False, True])
def test_episodes_wait_for_each_others_thread_steps_only_in_lockstep(lockstep):
    """Without lockstep (a server answers each request alone) a fast episode plays on while a slow step runs;
    with it (a batching generator) no episode asks again while any step is in flight."""
    calls: list[tuple[str, int, tuple[int, ...], bool]] = []
    sleeps = SleepCount()

    async def generate(request):
        offloaded_steps().lockstep = lockstep
        calls.append((request.request_id, request.turn, request.order, sleeps.asleep > 0))
        return [Generation("1", (), ())] * request.n

    tasks = [Task("t0", "counter", 0), Task("t1", "counter", 1)]
    router = PolicyRouter.from_spec("shared", ("a",))
    results = asyncio.run(rollout_tasks(tasks, generate, router, RolloutConfig(k=2), sleepy_factory(sleeps)))
    assert [r.turns for r in results] == [2, 2] and all(r.error is None for r in results)
    assert calls[:2] == [("t0/a", 0, (0, 0), False), ("t1/a", 0, (1, 0), False)]
    if lockstep:
        assert sorted(calls[2:]) == [("t0/a", 1, (0, 0), False), ("t1/a", 1, (1, 0), False)]
    else:  # t1's second turn is asked for while t0's first steps still sleep
        assert calls[2:] == [("t1/a", 1, (1, 0), True), ("t0/a", 1, (0, 0), False)]


def test_with_expert_moves_requests_arrive_in_rollout_order_whatever_thread_finishes_first(monkeypatch):
    """A recorder (a warm start's) answers at once and keeps what it is asked in arrival order: episodes of a
    blocking env meet at a barrier after their steps and go on in rollout order, as if the steps ran on the loop."""

    def factory(task: Task) -> BlockingCounterEnv:
        env = BlockingCounterEnv(lambda: time.sleep(random.random() * 0.003), max_turns=3)
        env.reset(task)
        env.target = 9
        return env

    def arrivals(blocking: bool) -> list[tuple[str, int]]:
        monkeypatch.setattr(BlockingCounterEnv, "blocking_step", property(lambda self: blocking))
        seen: list[tuple[str, int]] = []

        async def record(request):
            seen.append((request.request_id, request.turn))
            return [Generation(request.expert, (), ())] * request.n

        tasks = [Task(f"t{i}", "counter", i) for i in range(8)]
        asyncio.run(rollout_tasks(tasks, record, ROUTER, RolloutConfig(k=3, with_expert=True), factory))
        return seen

    on_the_loop = arrivals(blocking=False)
    assert len(on_the_loop) == 8 * 3  # the expert adds 3 a move: a and b in turn 0, a in turn 1 reaches 9
    for _ in range(3):
        assert arrivals(blocking=True) == on_the_loop


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -float("inf"), -0.5, "1", True])
def test_rollout_config_refuses_an_alpha_that_is_not_a_finite_number_at_least_zero(alpha):
    with pytest.raises(ValueError, match=r"^rollout\.alpha must be a finite number >= 0"):
        RolloutConfig(alpha=alpha)


def test_demo_with_a_nan_alpha_fails_before_any_rollout():
    from verl_mas.demo import DemoConfig, run_demo

    with pytest.raises(ValueError, match=r"rollout\.alpha must be a finite number >= 0, got nan"):
        run_demo(DemoConfig(alpha=float("nan")))


class NearMissCounterEnv(CounterEnv):
    """The counting env with a near miss per state: the expert's delta minus one."""

    def near_misses(self, role: str) -> tuple[str, ...]:
        return (str(int(self.expert(role)) - 1),)

    def clone(self) -> NearMissCounterEnv:
        other = super().clone()
        other.__class__ = NearMissCounterEnv
        return other


def test_requests_carry_the_states_near_misses_only_when_asked_with_expert_moves():
    def factory(task: Task) -> NearMissCounterEnv:
        env = NearMissCounterEnv(max_turns=3)
        env.reset(task)
        env.target = 9
        return env

    def requests(with_expert: bool, with_near_misses: bool) -> list:
        seen = []

        async def record(request):
            seen.append(request)
            return [Generation(request.expert or "1", (), ())] * request.n

        asyncio.run(
            rollout_tasks(
                [Task("t0", "counter", 0)],
                record,
                ROUTER,
                RolloutConfig(k=2, with_expert=with_expert, with_near_misses=with_near_misses),
                factory,
            )
        )
        return seen

    asked = requests(True, True)
    assert asked and all(r.near_misses == (str(int(r.expert) - 1),) for r in asked)
    assert all(r.near_misses == () and r.expert is not None for r in requests(True, False))
    assert all(r.near_misses == () and r.expert is None for r in requests(False, True))
