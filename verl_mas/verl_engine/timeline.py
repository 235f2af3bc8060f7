"""The per-policy timeline of a run (`mas.timeline`): when each policy's phases ran and when each policy's servers
had requests in flight, as JSONL records that the trainer, the actor workers and the agent-loop workers append to
one file; and what the tests and `benchmarks/bench_policy_overlap.py` read from it.

Records (times are `time.time()` seconds, comparable across the processes of one machine):

- `{"kind": "phase", "step", "phase", "policy", "mode", "method", "start", "dispatched", "ready", "end"}`, written by
  the trainer for every phase it runs per policy (several policies only): `start` when verl's method for the policy
  began, `dispatched` when its worker call had gone out, `ready` when all its workers had answered, `end` when the
  trainer had finished with the answer; `mode` is `concurrent` or `sequential` (the reference run of the phase
  check, `diagnostics.PhaseCheck`); `method` is the worker method called (null when the phase needed none); `step` is
  null at set-up (checkpoint load, first weight sync);
- `{"kind": "worker", "policy", "method", "rank", "start", "end"}`, written by each actor worker around the compute
  of one call (`compute_log_prob`, `compute_ref_log_prob`, `update_actor`, `update_weights`, `save_checkpoint`,
  `load_checkpoint`);
- `{"kind": "requests", "step", "split", "task", "spans": [[policy, start, end], ...]}`, written by the agent loop
  once per rollout session: each generation request of that session, from sending to its answer.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

Span = tuple[float, float]


def append_records(path: str, records: Iterable[Mapping[str, Any]]) -> None:
    """Append `records` as JSON lines in one `write` on an `O_APPEND` descriptor, so that lines from several
    processes never interleave."""
    data = "".join(json.dumps(dict(record)) + "\n" for record in records).encode()
    if not data:
        return
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_timeline(path: str | Path) -> list[dict]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def overlap(a: Span, b: Span) -> float:
    """Seconds during which both spans were open."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def union_length(spans: Iterable[Span]) -> float:
    """Seconds covered by at least one span."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def clipped(spans: Iterable[Span], window: Span) -> list[Span]:
    return [(max(s, window[0]), min(e, window[1])) for s, e in spans if min(e, window[1]) > max(s, window[0])]


def phase_records(records: Sequence[Mapping[str, Any]], phase: str | None = None) -> list[dict]:
    return [dict(r) for r in records if r.get("kind") == "phase" and (phase is None or r["phase"] == phase)]


def worker_spans_of(records: Sequence[Mapping[str, Any]], phase: Mapping[str, Any], slack_s: float = 0.5) -> list[Span]:
    """The worker compute spans that answered one trainer phase record: same policy and method, inside the time from
    its dispatch to its answer (with `slack_s` for clock rounding between processes)."""
    if phase.get("method") is None:
        return []
    return [
        (r["start"], r["end"])
        for r in records
        if r.get("kind") == "worker"
        and r["policy"] == phase["policy"]
        and r["method"] == phase["method"]
        and r["start"] >= phase["start"] - slack_s
        and r["end"] <= phase["ready"] + slack_s
    ]


def phase_overlaps(records: Sequence[Mapping[str, Any]], phase: str, mode: str = "concurrent") -> list[dict]:
    """For each step in which two or more policies ran `phase` in `mode`: each policy's trainer span (dispatch to
    answer) and worker compute span (first worker start to last worker end), and, for the first two policies, how
    long their worker spans overlapped."""
    by_step: dict[Any, list[dict]] = defaultdict(list)
    for record in phase_records(records, phase):
        if record["mode"] == mode:
            by_step[record["step"]].append(record)
    rows = []
    for step, recs in by_step.items():
        if len(recs) < 2:
            continue
        workers = {}
        for rec in recs:
            spans = worker_spans_of(records, rec)
            workers[rec["policy"]] = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None
        a, b = recs[0]["policy"], recs[1]["policy"]
        row = {
            "step": step,
            "policies": [a, b],
            "trainer": {r["policy"]: (r["start"], r["ready"]) for r in recs},
            "dispatched": {r["policy"]: r.get("dispatched") for r in recs},
            "worker": workers,
            "trainer_overlap_s": overlap((recs[0]["start"], recs[0]["ready"]), (recs[1]["start"], recs[1]["ready"])),
        }
        if workers[a] is not None and workers[b] is not None:
            row["worker_overlap_s"] = overlap(workers[a], workers[b])
        rows.append(row)
    return rows


def request_spans(records: Sequence[Mapping[str, Any]], split: str = "train") -> dict[Any, dict[str, list[Span]]]:
    """step -> policy -> the (start, end) of every generation request of that step's `split` sessions."""
    out: dict[Any, dict[str, list[Span]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if record.get("kind") == "requests" and record.get("split") == split:
            for policy, start, end in record["spans"]:
                out[record["step"]][policy].append((start, end))
    return {step: dict(spans) for step, spans in out.items()}


def rollout_idle_shares(records: Sequence[Mapping[str, Any]], policies: Sequence[str], split: str = "train") -> dict:
    """Per step: the rollout window (first request sent to last answer, over every policy) and, per policy pool, the
    share of that window in which it had no request in flight (a policy with no request at all is idle 1.0)."""
    out = {}
    for step, spans in sorted(request_spans(records, split).items(), key=lambda item: (item[0] is None, item[0])):
        every = [span for policy_spans in spans.values() for span in policy_spans]
        window = (min(s for s, _ in every), max(e for _, e in every))
        length = window[1] - window[0]
        idle = {
            policy: (1.0 - union_length(clipped(spans.get(policy, []), window)) / length) if length > 0 else 0.0
            for policy in policies
        }
        both_busy = None
        if len(policies) == 2 and length > 0:
            a, b = (spans.get(p, []) for p in policies)
            busy = union_length(a) + union_length(b) - union_length(a + b)  # inclusion-exclusion: both at once
            both_busy = busy / length
        out[step] = {
            "window_s": length,
            "requests": {p: len(spans.get(p, [])) for p in policies},
            "idle_share": idle,
            "both_busy_share": both_busy,
        }
    return out
