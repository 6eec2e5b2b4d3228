"""A fork server that runs ``clustersim`` command lines under limits (``python -m
tests.fuzz.worker``).

It imports clustersim once, then reads one JSON request a line on stdin, ``{"dir": ..., "argv":
[...], "cpu_s": ..., "wall_s": ..., "memory_bytes": ...}``, and for each forks a child that
works in ``dir`` with stdin from /dev/null, stdout and stderr into ``dir/stdout.txt`` and
``dir/stderr.txt``, its address space capped at ``memory_bytes`` (``RLIMIT_AS``) and its CPU
time at ``cpu_s`` (``RLIMIT_CPU``: the kernel sends SIGXCPU, then SIGKILL a second later), and
runs the command as the console script would. The limit is CPU time, so that a loaded machine
slows a case without failing it; ``wall_s`` is only a backstop against a child that waits for
ever without spending CPU (a pipe that nothing writes to): the child is killed once it has run
that long. The answer is one JSON line on stdout: the exit code (or the signal), the wall and
CPU time, the child's peak resident memory, whether it passed its CPU limit and whether the
backstop killed it. A fork costs milliseconds where a fresh Python with clustersim's imports
costs half a second, and two servers started with different ``PYTHONHASHSEED`` values tell a
byte-identical rerun from one that only looks so in one process.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any

MEMORY_ERROR_CODE = 99
"""The child's exit code when the command ended in a ``MemoryError`` (its address-space cap)."""
_POLL_S = 0.002
_MAX_FILE_BYTES = 512 << 20
"""Largest file a command may write (a larger one ends it with SIGXFSZ: a finding)."""
_CPU_GRACE_S = 1
"""CPU seconds between SIGXCPU (the soft limit) and SIGKILL (the hard one)."""


def _child(request: dict[str, Any]) -> None:
    """In the forked child: limits, redirections, then the command; never returns."""
    code = 1
    try:
        os.chdir(request["dir"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        limit = int(request["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        cpu_s = max(1, math.ceil(float(request["cpu_s"])))  # whole seconds, counted from the fork
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + _CPU_GRACE_S))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU dumps no core in the case
        resource.setrlimit(resource.RLIMIT_FSIZE, (_MAX_FILE_BYTES, _MAX_FILE_BYTES))
        from clustersim.cli import app

        try:
            app(args=list(request["argv"]), prog_name="clustersim", standalone_mode=True)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except MemoryError:
            traceback.print_exc()
            code = MEMORY_ERROR_CODE
    except BaseException:  # a crash is the finding: its traceback goes to stderr.txt
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Fork, run ``request`` in the child and wait for it: until it ends, at its CPU limit, or
    at the wall-clock backstop ``wall_s``."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(request)
    wall_limit_s = float(request["wall_s"])
    hung = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.perf_counter() - started > wall_limit_s:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            hung = True
            break
        time.sleep(_POLL_S)
    wall_s = time.perf_counter() - started
    cpu_s = usage.ru_utime + usage.ru_stime
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    # SIGXCPU at the soft limit; SIGKILL at the hard one, if the child ignored SIGXCPU
    past_cpu = not hung and (killed_by == signal.SIGXCPU or (
        killed_by == signal.SIGKILL and cpu_s >= 0.9 * math.ceil(float(request["cpu_s"]))))
    return {
        "code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": killed_by,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "maxrss_bytes": usage.ru_maxrss * 1024,
        "past_cpu": past_cpu,
        "hung": hung,
    }


def main() -> None:
    import clustersim.cli  # noqa: F401 - imported once, shared by every fork
    import clustersim.output  # noqa: F401
    import clustersim.sim  # noqa: F401

    for line in sys.stdin:
        if not line.strip():
            continue
        answer = run(json.loads(line))
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
