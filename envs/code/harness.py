"""Runs inside the sandbox: programs against a batch of cases, each case in a forked child; results as JSON.

`verl_mas_envs.code.judge` sends this file's source as the sandbox program and a job as JSON on stdin:
{"programs": [program (after the task's prelude), ...], "style": "stdin"|"function", "fn_name": name or null,
 "cases": [{"kind": "stdin", "input": text} | {"kind": "call", "args": literal argument list}
           | {"kind": "script", "code": test code}],
 "case_time_s": per case, "budget_s": for all cases of one program, "output_bytes": kept per case}
and reads one line back: MARK followed by a JSON list with one list per program, one {"status", "output", "error"}
per case. Status is "ok", "error" (raised or exited non-zero), "timeout", "output_limit", "syntax_error",
"no_function", "bad_return" (a function returned something that is not plain data), "not_run" (the budget was spent)
or "infra" (the harness's own pipes, folder or fork failed: the judge could not run the case). For a stdin case
"output" is what the program printed; for a call case the returned value's repr; the comparison with the expected
result happens outside the sandbox, which never holds it.

Each case runs in a fresh child forked from this process before any model code ran here, so a case cannot see the
state an earlier case left, and this process, which never executes the program, keeps the time: it kills a case's
whole process tree (it is their subreaper, so not even a setsid'd grandchild escapes) when the case ends.
Standard library only: it runs under `python -I -S`, and must not import verl_mas.
"""

import ast
import builtins
import ctypes
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback

MARK = "@@verl-mas-harness-results@@"
PLAIN_TYPES = (int, float, complex, str, bytes, bool, type(None), list, tuple, dict, set, frozenset)
RECURSION_LIMIT = 10_000
ERROR_CHARS = 600
POLL_S = 0.02  # how often a running case's child is checked for having exited
PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # without it a setsid'd grandchild outlives its case; the sandbox still kills it when the run ends
    for name in ("exit", "quit"):  # `python -S` leaves them out; programs written for judges call them
        if not hasattr(builtins, name):
            setattr(builtins, name, sys.exit)
    results = [run_program(source, job) for source in job["programs"]]
    sys.stdout.write(MARK + json.dumps(results, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def run_program(source: str, job: dict) -> list[dict]:
    cases = job["cases"]
    try:
        code = compile(source, "program.py", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return [{"status": "syntax_error", "output": "", "error": detail} for _ in cases]
    deadline = time.monotonic() + job["budget_s"]
    pristine_builtins = dict(vars(builtins))
    results = []
    for case in cases:
        left = deadline - time.monotonic()
        if left <= 0:
            results.append({"status": "not_run", "output": "", "error": "the time budget was spent on earlier cases"})
            continue
        results.append(run_case(code, job, case, pristine_builtins, min(job["case_time_s"], left)))
    return results


def run_case(code, job: dict, case: dict, pristine_builtins: dict, seconds: float) -> dict:
    """One case in a forked child, in a working directory of its own (removed after), so that a file one case or
    program writes there is never another's input."""
    opened, folder = [], None
    try:  # the harness's own pipes, folder and fork: failing here is the host's doing, before any program code ran
        folder = tempfile.mkdtemp(prefix="case-", dir=os.getcwd())
        for _ in range(4):
            opened.extend(os.pipe())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except OSError as exc:
        for fd in opened:
            os.close(fd)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        return {"status": "infra", "output": "", "error": f"the judge could not start the case: {exc}"}
    try:
        return watch_case(pid, opened, folder, code, job, case, pristine_builtins, seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def watch_case(
    pid: int, opened: list, folder: str, code, job: dict, case: dict, pristine_builtins: dict, seconds: float
) -> dict:
    """Both sides of the fork: the child runs the case in `folder`; this process feeds it, times it and reads it."""
    stdin_r, stdin_w, out_r, out_w, err_r, err_w, result_r, result_w = opened
    if pid == 0:
        for fd in (stdin_w, out_r, err_r, result_r):
            os.close(fd)
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
        child(code, job, case, pristine_builtins, result_w, folder)  # never returns
    for fd in (stdin_r, out_w, err_w, result_w):
        os.close(fd)
    feed = case.get("input", "").encode("utf-8", "surrogatepass") if case["kind"] == "stdin" else b""
    readers = {"out": out_r, "err": err_r, "result": result_r}
    judged = "out" if case["kind"] == "stdin" else "result"  # only the stream compared can run over the limit
    streams, status, exit_status = pump(pid, stdin_w, feed, readers, judged, job["output_bytes"], seconds)
    exit_code = stop_case(pid, exit_status)
    error = streams["err"].decode("utf-8", "replace")[-ERROR_CHARS:]
    if status == "ok" and exit_code != 0:
        status = "error"
    reported = streams["result"].decode("utf-8", "replace")
    if status == "ok" and case["kind"] != "stdin":
        kind, _, detail = reported.partition("\n")
        status = kind if kind in ("ok", "no_function", "bad_return") else "error"
        reported = detail
    output = streams["out"] if case["kind"] == "stdin" else reported.encode("utf-8", "replace")
    return {"status": status, "output": output.decode("utf-8", "replace"), "error": error}


def pump(
    pid: int, stdin_w: int, feed: bytes, readers: dict, judged: str, limit: int, seconds: float
) -> tuple[dict, str, int | None]:
    """Feed the case's input and read its streams until the child has exited and they are drained (a process it
    left holding them is not waited for), the time is up or output runs over; the child's wait status if reaped."""
    got = {name: bytearray() for name in readers}
    open_fds = {fd: name for name, fd in readers.items()}
    writing = stdin_w
    os.set_blocking(stdin_w, False)
    end = time.monotonic() + seconds
    status, exit_status, draining = "ok", None, False
    while open_fds:
        left = end - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        if exit_status is None:
            reaped, wait_status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                exit_status = wait_status
        elif draining:
            break  # the child is gone and what it wrote has been read
        wanted_out = [writing] if writing is not None else []
        ready_in, ready_out, _ = select.select(list(open_fds), wanted_out, [], min(left, POLL_S))
        draining = exit_status is not None and not ready_in
        if ready_out:
            try:
                sent = os.write(writing, feed[:65536])
                feed = feed[sent:]
            except (BrokenPipeError, BlockingIOError):
                feed = b""  # the program stopped reading: the rest of its input is not needed
            if not feed:
                os.close(writing)
                writing = None
        for fd in ready_in:
            chunk = os.read(fd, 65536)
            if not chunk:
                os.close(fd)
                del open_fds[fd]
                continue
            name = open_fds[fd]
            if len(got[name]) <= limit:  # beyond the limit a stream is drained, not kept
                got[name] += chunk
        if len(got[judged]) > limit:
            status = "output_limit"
            break
    for fd in open_fds:
        os.close(fd)
    if writing is not None:
        os.close(writing)
    return {name: bytes(data[:limit]) for name, data in got.items()}, status, exit_status


def stop_case(pid: int, exit_status: int | None) -> int:
    """Kill the case's child (unless reaped) and every process it left (orphans are reparented here); the child's
    exit code."""
    for victim in [*([pid] if exit_status is None else []), *descendants(os.getpid())]:
        kill(victim)
    status = os.waitpid(pid, 0)[1] if exit_status is None else exit_status
    reap_until = time.monotonic() + 1.0
    while time.monotonic() < reap_until:  # reap the orphans
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if reaped == 0:
            time.sleep(0.001)
    return os.waitstatus_to_exitcode(status)


def kill(pid: int) -> None:
    """SIGKILL through a pidfd: the sandbox's os.kill refuses a process that left the group with setsid."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return
    try:
        signal.pidfd_send_signal(handle, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(handle)


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def child(code, job: dict, case: dict, pristine_builtins: dict, result_w: int, folder: str) -> None:
    """The forked child: run the program for one case in `folder` and exit, never returning into the harness."""
    exit_code = 0
    try:
        os.chdir(folder)
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 (lives until _exit)
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.setrecursionlimit(RECURSION_LIMIT)
        if case["kind"] == "stdin":
            exec(code, {"__name__": "__main__", "__builtins__": builtins})
        else:
            report = call_case(code, job["fn_name"], case, pristine_builtins)
            os.write(result_w, report.encode("utf-8", "replace"))
    except SystemExit as stop:
        exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # the program's error, reported on stderr as Python would
        traceback.print_exc(limit=-3)
        exit_code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        exit_code = exit_code or 1
    os._exit(exit_code & 0xFF)


def call_case(code, fn_name: str, case: dict, pristine_builtins: dict) -> str:
    """Run the program as a module, then the case against its function: "ok\\n<repr>", or a status line."""
    namespace = {"__name__": "program", "__builtins__": builtins}
    exec(code, namespace)
    function = find_function(namespace, fn_name)
    if function is None:
        return f"no_function\nthe program defines no function {fn_name!r} (nor a class Solution with it)"
    if case["kind"] == "call":
        args, kwargs = literal_arguments(case["args"])
        value = function(*args, **kwargs)
        if not is_plain(value):
            return f"bad_return\nreturned a {type(value).__name__}, which is not plain data"
        return "ok\n" + repr(value)
    test_namespace = dict(namespace)
    test_namespace["__builtins__"] = pristine_builtins
    test_namespace["candidate"] = plain_only(function)
    exec(compile(case["code"], "test.py", "exec"), test_namespace)
    return "ok\n"


def find_function(namespace: dict, fn_name: str):
    function = namespace.get(fn_name)
    if callable(function):
        return function
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, fn_name, None)):
        return getattr(solution(), fn_name)
    return None


def literal_arguments(source: str) -> tuple[list, dict]:
    call = ast.parse(f"f({source})", mode="eval").body
    return [ast.literal_eval(a) for a in call.args], {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def plain_only(function):
    """The function, refusing to return anything but plain data (an object whose __eq__ always says yes is not)."""

    def guarded(*args, **kwargs):
        value = function(*args, **kwargs)
        if not is_plain(value):
            raise TypeError(f"returned a {type(value).__name__}, which is not plain data")
        return value

    return guarded


def is_plain(value, depth: int = 0) -> bool:
    if depth > 100 or type(value) not in PLAIN_TYPES:
        return False
    if type(value) in (list, tuple, set, frozenset):
        return all(is_plain(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return True


if __name__ == "__main__":
    main()
