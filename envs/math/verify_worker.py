"""One math-verify worker process: reads (gold, answer) pairs as JSON lines on stdin, answers each on its own line.

Started by `verl_mas_envs.math.verify_pool` as `python -m verl_mas_envs.math.verify_worker TIMEOUT_S MEMORY_MB`. It runs
math-verify on its main thread, where math-verify's `signal.alarm` timeouts work; the pool's hard deadline (it kills
this process) covers whatever those miss. Replies: "ready" once math-verify is imported (or "failed: ..."), then per
pair "1" (equal), "0" (not equal) or "e" (math-verify raised).
"""

from __future__ import annotations

import json
import os
import resource
import sys


def main() -> None:
    timeout_s, memory_mb = int(sys.argv[1]), int(sys.argv[2])
    # math-verify prints ("Timeout during comparison"): replies go to a private copy of stdout, prints to stderr
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    # A huge integer (a power tower) then fails with MemoryError instead of taking the host's memory
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from math_verify import LatexExtractionConfig, parse, verify
        from sympy import I
    except Exception as exc:  # the pool reports this as a start-up failure naming the cause
        replies.write(f"failed: {type(exc).__name__}: {exc}\n")
        replies.flush()
        return
    # LaTeX only: math-verify's plain-expression extraction calls sympy's parse_expr, which evaluates Python
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    replies.write("ready\n")
    replies.flush()
    for line in sys.stdin:
        gold, answer = json.loads(line)
        try:
            golds = parse(gold, config, parsing_timeout=timeout_s)
            answers = parse(answer, config, parsing_timeout=timeout_s)
            golds, answers = _imaginary_unit(golds, answers, I)
            reply = "1" if verify(golds, answers, timeout_seconds=timeout_s) else "0"
        except Exception:  # MemoryError and RecursionError included: that pair is not graded equal
            reply = "e"
        replies.write(reply + "\n")
        replies.flush()


def _imaginary_unit(golds: list, answers: list, unit: object) -> tuple[list, list]:
    """Both parses with the letter `i` read as the imaginary unit when no other letter appears.

    math-verify reads `i` as a symbol, so `i` differs from `\\sqrt{-1}` and `i^2` from `-1`. A side with another
    letter (`i + j`, `x = i`) keeps `i` a symbol: there it may be an index or a variable.
    """
    parsed = [item for item in golds + answers if hasattr(item, "free_symbols")]
    letters = set().union(*(item.free_symbols for item in parsed))
    if not letters or any(letter.name != "i" for letter in letters):  # math-verify's `i` carries assumptions
        return golds, answers
    as_unit = dict.fromkeys(letters, unit)

    def read(items: list) -> list:
        return [item.xreplace(as_unit) if hasattr(item, "free_symbols") else item for item in items]

    return read(golds), read(answers)


if __name__ == "__main__":
    main()
