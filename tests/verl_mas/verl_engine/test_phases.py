"""`run_phase` on Ray tasks standing in for two policies' worker calls, and the timeline's measures on hand-made
records. The real workers, phases and timeline are exercised by test_cpu_stack.py's `per_role` launches."""

from __future__ import annotations

import time

import pytest
import ray

from verl_mas.verl_engine.phases import Dispatched, SplitWorkerGroup, run_phase
from verl_mas.verl_engine.timeline import overlap, phase_overlaps, rollout_idle_shares, union_length

WORK_S = 0.6


@ray.remote(num_cpus=0)
class FakeWorker:
    """One policy's worker: a Ray actor of its own, as each policy's worker group has."""

    def work(self, policy: str, rows: list[int]) -> dict:
        start = time.time()
        time.sleep(WORK_S)
        return {"policy": policy, "sum": sum(rows), "start": start, "end": time.time()}


class FakeGroup:
    """A worker group whose `compute_log_prob` returns at once with its worker's ref, as a blocking=False method."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.world_size = 1
        self.worker = FakeWorker.remote()
        ray.get(self.worker.work.remote(policy, []))  # started before anything is timed

    def compute_log_prob(self, rows: list[int]) -> list:
        return [self.worker.work.remote(self.policy, rows)]


class Method:
    """A verl-like trainer method: work before the worker call, the call, work on its answer."""

    def __init__(self) -> None:
        self.before = []

    def __call__(self, policy: str, group: SplitWorkerGroup) -> dict:
        self.before.append(policy)
        rows = [1, 2, 3] if policy == "tool" else [10, 20]
        (answer,) = group.compute_log_prob(rows)
        return {**answer, "world_size": group.world_size}


@pytest.fixture(scope="module")
def groups(ray_session):
    return {policy: FakeGroup(policy) for policy in ("tool", "plan")}


def test_every_policy_computes_at_once_and_gets_what_the_blocking_call_gives(groups):
    method = Method()
    results, spans = run_phase(groups, groups, method)
    assert method.before == ["tool", "plan", "tool", "plan"]  # dispatch both, then finish both
    assert {p: r["sum"] for p, r in results.items()} == {"tool": 6, "plan": 30}
    assert all(r["world_size"] == 1 for r in results.values())  # other attributes are the group's
    work = {p: (r["start"], r["end"]) for p, r in results.items()}
    assert overlap(work["tool"], work["plan"]) > 0.5 * WORK_S
    for policy, span in spans.items():
        assert span.method == "compute_log_prob"
        assert span.start <= work[policy][0] and work[policy][1] <= span.ready <= span.end
        assert span.start <= span.dispatched <= span.ready
        assert span.seconds == pytest.approx(span.ready - span.start + span.finish_s)
    assert max(span.dispatched for span in spans.values()) < min(end for _, end in work.values())

    sequential, one_by_one_spans = run_phase(groups, groups, Method(), sequential=True)
    assert {p: r["sum"] for p, r in sequential.items()} == {"tool": 6, "plan": 30}
    one_by_one = {p: (r["start"], r["end"]) for p, r in sequential.items()}
    assert overlap(one_by_one["tool"], one_by_one["plan"]) == 0.0
    assert max(span.dispatched for span in one_by_one_spans.values()) > min(end for _, end in one_by_one.values())


def test_a_method_without_a_worker_call_finishes_in_the_first_pass(groups):
    results, spans = run_phase(["tool"], groups, lambda policy, group: f"{policy} bypassed")
    assert results == {"tool": "tool bypassed"} and spans["tool"].method is None
    assert spans["tool"].dispatched == spans["tool"].start


def test_the_split_refuses_what_it_cannot_answer(groups):
    split = SplitWorkerGroup(groups["tool"])
    with pytest.raises(Dispatched):
        split.compute_log_prob([1])
    split.answer()
    assert split.compute_log_prob([1])[0]["sum"] == 1
    with pytest.raises(RuntimeError, match="exactly one worker call"):
        split.compute_log_prob([1])  # a second call in the same method

    class Blocking:
        def update_actor(self, rows):
            return {"metrics": {}}  # a blocking worker method answers values, not refs

    with pytest.raises(TypeError, match="blocking=False"):
        SplitWorkerGroup(Blocking()).update_actor([1])


def phase(policy, start, ready, step=1, mode="concurrent"):
    record = {"kind": "phase", "step": step, "phase": "update_actor", "policy": policy, "mode": mode}
    return record | {"method": "update_actor", "start": start, "ready": ready, "end": ready + 0.1}


def worker(policy, start, end):
    return {"kind": "worker", "policy": policy, "method": "update_actor", "rank": 0, "start": start, "end": end}


def test_phase_overlaps_pair_each_phase_with_its_workers():
    records = [
        phase("tool", 0.0, 3.0),
        phase("plan", 0.01, 2.0),
        worker("tool", 0.2, 2.9),
        worker("plan", 0.3, 1.9),
        phase("tool", 10.0, 11.0, mode="sequential"),
        worker("tool", 10.1, 10.9),
        phase("plan", 11.2, 12.0, mode="sequential"),
        worker("plan", 11.3, 11.9),
    ]
    (row,) = phase_overlaps(records, "update_actor")
    assert row["worker"] == {"tool": (0.2, 2.9), "plan": (0.3, 1.9)}
    assert row["worker_overlap_s"] == pytest.approx(1.6)
    (reference,) = phase_overlaps(records, "update_actor", "sequential")
    assert reference["worker_overlap_s"] == 0.0


def test_idle_share_per_pool_over_the_rollout_window():
    assert union_length([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4.0)
    requests = [
        {"kind": "requests", "step": 1, "split": "train", "task": "a", "spans": [["tool", 0, 2], ["plan", 2, 4]]},
        {"kind": "requests", "step": 1, "split": "train", "task": "b", "spans": [["tool", 1, 3], ["plan", 6, 10]]},
        {"kind": "requests", "step": 0, "split": "eval", "task": "c", "spans": [["tool", 0, 100]]},
    ]
    shares = rollout_idle_shares(requests, ["tool", "plan"])
    assert list(shares) == [1]
    assert shares[1]["window_s"] == 10
    assert shares[1]["idle_share"] == pytest.approx({"tool": 0.7, "plan": 0.4})
    assert shares[1]["both_busy_share"] == pytest.approx(0.1)  # 2..3: tool's b and plan's a
    assert shares[1]["requests"] == {"tool": 2, "plan": 2}
