"""Running one trainer phase (old log-probs, ref log-probs, update, weight sync, checkpoint save or load) on every
policy's worker group at the same time, with verl's own trainer methods and verl's non-blocking worker calls.

verl's trainer methods (`_compute_old_log_prob`, `_update_actor`, `_save_checkpoint`, ...) each make one call on the
worker group, between work before it (the batch's `extra_info`, paths) and work after it (reading the answer from
TransferQueue, metrics, the checkpoint tracker). `PolicyActorRolloutRefWorker` registers those worker methods with
verl's `register(..., blocking=False)`, so a call returns at once with the Ray object refs of its workers (a
`DataProtoFuture` for verl's nd-compute dispatch, a list of `ObjectRef`s for `ONE_TO_ALL`), as verl's own
`TrainingWorker.train_mini_batch` and `infer_batch` do. `run_phase` then runs a phase in three passes:

1. per policy, the verl method runs against a `SplitWorkerGroup`, which dispatches its worker call and stops it
   there (`Dispatched`), so the calls of all policies are in flight together;
2. `ray.wait` until every policy's refs are done (the time each policy finished is kept);
3. per policy, the verl method runs again from the start; the `SplitWorkerGroup` answers its worker call with the
   awaited result, collected as verl's blocking call collects it (`ray.get`, then the dispatch mode's concat), and
   the method finishes.

The work before the call runs twice; in verl 0.9.1 it only sets fields (`extra_info`, paths, `global_steps`). The
second run must make the same call (same method): anything else raises. With `sequential=True` each policy's
three passes finish before the next policy's start: the path verl's blocking calls take, policy after policy.
No threads: the driver dispatches and waits, as verl's trainers do with `DataProtoFuture` and `ray.get`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import ray
from verl.protocol import BatchData, DataProtoFuture

T = TypeVar("T")

# Worker methods verl's trainer calls blocking and PolicyActorRolloutRefWorker registers with blocking=False:
# the split call answers them with the awaited, collected result.
ANSWERED_WITH_RESULT = (
    "compute_log_prob",
    "compute_ref_log_prob",
    "update_actor",
    "save_checkpoint",
    "load_checkpoint",
)
# Worker methods verl itself registers with blocking=False (the caller does ray.get): answered with the done refs.
ANSWERED_WITH_REFS = ("update_weights",)


class Dispatched(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """Stops a verl trainer method right after its worker call went out (pass 1 of `run_phase`)."""


_UNSET = object()


class SplitWorkerGroup:
    """A policy's worker group as one verl trainer method sees it during `run_phase`.

    Every attribute is the worker group's, except the split methods: the first call dispatches (non-blocking) and
    raises `Dispatched`; after `answer(...)`, one more call of the same method returns the answer.
    """

    def __init__(self, group: Any) -> None:
        self._group = group
        self.method: str | None = None
        self.pending: Any = None
        self._answer: Any = _UNSET
        self._answered = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._group, name)
        if name in ANSWERED_WITH_RESULT or name in ANSWERED_WITH_REFS:
            return functools.partial(self._split, name, attribute)
        return attribute

    def _split(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.method is None:
            self.method = name
            self.pending = method(*args, **kwargs)
            if not isinstance(self.pending, DataProtoFuture | list):
                raise TypeError(
                    f"{name}: the worker group answered {type(self.pending).__name__}, not object refs; the policy "
                    "workers must register it with blocking=False (PolicyActorRolloutRefWorker)"
                )
            raise Dispatched
        if name != self.method or self._answer is _UNSET or self._answered:
            raise RuntimeError(
                f"a verl trainer method called the worker group's {name} after {self.method}: run_phase splits "
                "a method that makes exactly one worker call (has verl's trainer changed?)"
            )
        self._answered = True
        return self._answer

    def refs(self) -> list[ray.ObjectRef]:
        return list(self.pending.futures) if isinstance(self.pending, DataProtoFuture) else list(self.pending)

    def answer(self) -> None:
        """Collect the done refs as verl's blocking call would have returned them."""
        if self.method in ANSWERED_WITH_REFS:
            self._answer = self.pending
        elif isinstance(self.pending, DataProtoFuture):  # nd-compute dispatch: ray.get, then the same concat
            self._answer = BatchData(ray.get(self.pending.futures)).concat()
        else:  # ONE_TO_ALL: one value per worker
            self._answer = ray.get(self.pending)


@dataclass
class PolicySpan:
    """One policy's part of a phase, in `time.time()` seconds.

    Attributes:
        start: the verl method started.
        dispatched: its worker call had gone out (equal to `start` when the method made no worker call).
        ready: every worker of the policy had answered (equal to `end` when the method made no worker call).
        end: the method finished with the answer.
        finish_s: the time of pass 3 alone (reading the answer, metrics); the policy's own share of the wall time
            is `ready - start + finish_s`.
        method: the worker method the phase called, or None.
    """

    start: float
    dispatched: float
    ready: float
    end: float
    finish_s: float
    method: str | None

    @property
    def seconds(self) -> float:
        return self.ready - self.start + self.finish_s


def prime_dispatch_layout(group: Any, meshes: Iterable[str]) -> None:
    """Ask `group`'s workers for their data-parallel layout of each mesh now, into the caches verl's nd-compute
    dispatch and collect read (`_dispatch_info`, `_collect_info`).

    verl asks lazily, on a group's first nd-compute call, with a blocking call to every worker. In `run_phase` that
    round trip would sit between one policy's dispatch and the next, at a launch's first old log-prob, while the
    first policy's workers already compute on every core. Asked at set-up, every first call goes out at once."""
    for mesh in meshes:
        if mesh not in group._dispatch_info:
            group._dispatch_info[mesh] = group._query_dispatch_info(mesh)
        if mesh not in group._collect_info:
            group._collect_info[mesh] = group._query_collect_info(mesh)


def wait_all(pending: dict[str, list[ray.ObjectRef]]) -> dict[str, float]:
    """Block until every ref is done; returns policy -> the time its last ref was seen done."""
    owner = {ref: policy for policy, refs in pending.items() for ref in refs}
    left = {policy: len(refs) for policy, refs in pending.items()}
    now = time.time()
    ready = {policy: now for policy, count in left.items() if count == 0}
    remaining = list(owner)
    while remaining:
        done, remaining = ray.wait(remaining, num_returns=1)
        now = time.time()
        for ref in done:
            policy = owner[ref]
            left[policy] -= 1
            if left[policy] == 0:
                ready[policy] = now
    return ready


def run_phase(
    policies: Iterable[str],
    groups: dict[str, Any],
    run: Callable[[str, SplitWorkerGroup], T],
    *,
    sequential: bool = False,
) -> tuple[dict[str, T], dict[str, PolicySpan]]:
    """Run `run(policy, split_group)` (a verl trainer method acting as `policy` with `split_group` as its worker
    group) for every policy, their worker calls in flight together (or one policy after another with
    `sequential`). Returns each policy's result and span."""
    results: dict[str, T] = {}
    spans: dict[str, PolicySpan] = {}
    split = {policy: SplitWorkerGroup(groups[policy]) for policy in policies}
    started: dict[str, float] = {}
    dispatched: dict[str, float] = {}

    def dispatch(policy: str) -> bool:
        started[policy] = time.time()
        try:
            results[policy] = run(policy, split[policy])
        except Dispatched:
            dispatched[policy] = time.time()
            return True
        end = time.time()
        spans[policy] = PolicySpan(started[policy], started[policy], end, end, end - started[policy], None)
        return False

    def finish(policy: str, ready: float) -> None:
        begin = time.time()
        split[policy].answer()
        results[policy] = run(policy, split[policy])
        end = time.time()
        spans[policy] = PolicySpan(started[policy], dispatched[policy], ready, end, end - begin, split[policy].method)

    if sequential:
        for policy in split:
            if dispatch(policy):
                finish(policy, wait_all({policy: split[policy].refs()})[policy])
        return results, spans
    in_flight = [policy for policy in split if dispatch(policy)]
    ready = wait_all({policy: split[policy].refs() for policy in in_flight})
    for policy in in_flight:
        finish(policy, ready[policy])
    return {policy: results[policy] for policy in split}, {policy: spans[policy] for policy in split}
