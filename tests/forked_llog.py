"""``python -m llog ...`` for the suite, forked from a process that has imported llog.

A broker's start is mostly its imports (about a thousand modules: 1.4 CPU-seconds on
the suite's two-core machine, against 0.5 forked), a command's too, and the suite
starts hundreds of brokers and commands. Each pytest process keeps one multiprocessing
forkserver that has imported the CLI and the broker; a command is a fork of it that
takes its own environment, stdin, stdout and stderr and then runs ``llog.cli.main``,
what ``python -m llog`` runs. It is a real process of its own: the tests signal, pause
and kill it by pid, read its output and see its exit status as with ``subprocess``.

What cannot be forked is started by exec as before (:func:`forkable`): an environment
that changes how the interpreter starts or its libraries load (``LD_PRELOAD``,
``PYTHON*``, ``GRPC_*``) is only read at exec.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import io
import multiprocessing
import os
import pkgutil
import signal
import subprocess
import sys
import threading
from multiprocessing import reduction
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import IO, Any

#: What a broker imports on its way to listening, besides the CLI's commands.
PRELOAD = (
    "llog.cli.broker", "llog.broker.server", "llog.broker.workers", "llog.kafka.listener", "llog.gc_tuning",
    "anyio._backends._asyncio", "anyio.streams.memory", "anyio.streams.stapled", "anyio.streams.tls",
    "boto3.s3.inject", "boto3.s3.transfer", "uvicorn.lifespan.on", "uvicorn.loops.auto", "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.auto", "uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.websockets.auto",
)
#: Variables a forked command may take from the test beyond the forkserver's own:
#: read by llog (and boto3) when it runs, not by the interpreter at start.
FORKABLE_PREFIXES = ("LLOG_", "AWS_")


def forkable(env: dict[str, str] | None) -> bool:
    """Whether a command with environment ``env`` (``None``: the test's) can be forked."""
    return env is None or all(v == os.environ.get(k) or k.startswith(FORKABLE_PREFIXES) or k == "PYTHONFAULTHANDLER"
                              for k, v in env.items())


@functools.cache
def _context() -> ForkServerContext:
    import llog.cli

    ctx = multiprocessing.get_context("forkserver")
    commands = [f"llog.cli.{m.name}" for m in pkgutil.iter_modules(llog.cli.__path__)]
    ctx.set_forkserver_preload(["llog.cli", *commands, *PRELOAD, "tests.forkserver_warmup"])
    return ctx


class ForkedProcess:
    """The part of ``subprocess.Popen`` the suite uses, for a forked command."""

    def __init__(self, process: BaseProcess, stdin: IO[str] | None, stdout: IO[str] | None,
                 stderr: IO[str] | None) -> None:
        self._process = process
        self.args = process.name
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def popen(args: list[str], env: dict[str, str] | None = None, *, stdin: bool = False, stdout: bool = True,
          stderr: bool = False) -> ForkedProcess:
    """``python -m llog args...`` with environment ``env``, forked. Each of ``stdin``,
    ``stdout``, ``stderr`` that is true is a text pipe (as ``subprocess.PIPE``); stdin
    is otherwise ``/dev/null``, stdout and stderr the test's."""
    ends: list[int] = []  # the child's ends, closed here once it has them
    mine: list[IO[str] | None] = []
    theirs: list[_Fd] = []
    for wanted, fd, reading in ((stdin, 0, False), (stdout, 1, True), (stderr, 2, True)):
        if not wanted:
            mine.append(None)
            theirs.append(_Fd(os.open(os.devnull, os.O_RDONLY) if fd == 0 else fd))
            if fd == 0:
                ends.append(theirs[-1].fd)
            continue
        r, w = os.pipe()
        here, there = (r, w) if reading else (w, r)
        mine.append(os.fdopen(here, "r" if reading else "w"))
        theirs.append(_Fd(there))
        ends.append(there)
    process = _context().Process(target=_main, args=(args, dict(os.environ if env is None else env), *theirs),
                                 name=f"llog {' '.join(args)}", daemon=True)
    try:
        process.start()
    finally:
        for fd in ends:
            os.close(fd)
    return ForkedProcess(process, *mine)


def run(args: list[str], env: dict[str, str] | None = None, *, input: str | None = None,
        timeout: float = 120.0, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, llog, *args], env=env, input=input,
    capture_output=True, text=True, timeout=timeout, check=check)``, forked where
    :func:`forkable`."""
    if not forkable(env):
        return subprocess.run([sys.executable, "-m", "llog", *args], env=env, input=input, capture_output=True,
                              text=True, timeout=timeout, check=check)
    proc = popen(args, env, stdin=input is not None, stderr=True)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()), daemon=True)
               for k, f in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in readers:
        t.start()
    if proc.stdin is not None:  # a command may exit without reading it all, as subprocess allows
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(input or "")
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    for t in readers:
        t.join()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    done = subprocess.CompletedProcess(["llog", *args], code, out.get("stdout", ""), out.get("stderr", ""))
    if check:
        done.check_returncode()
    return done


class _Fd:
    """A file descriptor for the forked process: the forkserver passes it on
    (``SCM_RIGHTS``) while the process is being started."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _received, (reduction.DupFd(self.fd),)


def _received(dup: Any) -> int:
    return int(dup.detach())


def _main(args: list[str], env: dict[str, str], stdin: int, stdout: int, stderr: int) -> None:
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    sys.argv = ["llog", *args]
    from llog.cli import main

    sys.exit(main(args))
