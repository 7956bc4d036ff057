"""A hard wall-time bound per check: a SIGALRM over the whole call in the calling process (`alarm`), and worker
processes killed one at a time (`WorkerPool`) for what SIGALRM cannot interrupt.

A pool job that has not answered `limit` seconds after its worker got it (a C-level loop SIGALRM cannot interrupt) is
given up, its worker killed, and a warm spare takes the worker's place at once (a new spare starts in the
background). So a pathological job costs its worker at most one limit, and the jobs beside it still run on the other
workers. Workers are spawned (never forked: the trainer has torch threads and maybe CUDA) with SIGINT blocked and
ignored: Ctrl-C is the trainer's to handle.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker

KILL_GRACE = 0.25  # seconds past a check's own timeout before a silent worker is killed (the caller's limit)
START_TIMEOUT = 120.0  # seconds a fresh pool may take to start (the math reward's workers import math-verify)


class Timeout(BaseException):
    """Raised by SIGALRM; a BaseException so that no `except Exception` on the way (sympy, math-verify) eats it."""


def _on_alarm(signum, frame):
    raise Timeout()


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise Timeout in the body after `seconds` of wall time. Armed in the main thread only (signals are delivered
    there); elsewhere, or with seconds <= 0, the body runs unbounded."""
    armed = seconds > 0 and threading.current_thread() is threading.main_thread()
    if armed:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    """One pool job's result: its value (None when it failed or timed out) and the wall time the caller saw."""
    value: object = None
    seconds: float = 0.0
    timed_out: bool = False  # given up after `limit` seconds, or its worker died
    failed: bool = False  # the job raised


def _worker_main(conn, warmup):
    """Worker loop: run `warmup`, say 'ready', then run jobs (job id, function, args) until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    if warmup is not None:
        warmup()
    try:
        conn.send("ready")
    except (BrokenPipeError, OSError):  # the trainer ended while this worker started (Ctrl-C)
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        jid, fn, args = msg
        try:
            reply = (jid, True, fn(*args))
        except BaseException:
            reply = (jid, False, None)
        conn.send(reply)


class _Worker:
    def __init__(self, ctx, warmup):
        self.conn, child = ctx.Pipe()
        # spawn, not fork: the trainer has torch threads (and maybe CUDA) that must not be forked
        self.proc = ctx.Process(target=_worker_main, args=(child, warmup), daemon=True)
        # Started with SIGINT blocked in the calling thread: the mask is inherited through spawn's fork and exec, so
        # the new interpreter never sees a Ctrl-C sent to the process group (a terminal sends it to every process in
        # it), not even while it starts up (~1 s of imports), where it would end in a KeyboardInterrupt traceback, or
        # in an EOFError one when the trainer stops half-way through handing it its start-up data. Ctrl-C is the
        # trainer's to handle: a signal that arrives during start() is delivered to it right after. Any thread may
        # start a worker (the --rollout-lag producer replaces a timed-out one); _worker_main also ignores SIGINT.
        resource_tracker.ensure_running()  # first: starting it unblocks SIGINT and SIGTERM in this thread afterwards
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child.close()
        self.ready, self.job, self.t0 = False, None, 0.0

    def kill(self):
        self.proc.kill()
        self.proc.join()
        self.conn.close()


class WorkerPool:
    """`size` worker processes and a warm spare. warmup: a module-level function (it is pickled by name) each worker
    runs before it says it is ready, so that the first job does not pay for lazy imports."""

    def __init__(self, size: int, warmup=None):
        self.size, self.warmup = size, warmup
        self.workers: list[_Worker] = []
        self.spare: _Worker | None = None
        self._ctx = mp.get_context("spawn")

    def start(self):
        while len(self.workers) < self.size:
            self.workers.append(_Worker(self._ctx, self.warmup))
        if self.spare is None:
            self.spare = _Worker(self._ctx, self.warmup)

    def replace(self, w: _Worker):
        """Kill a worker; the spare takes its place and a new spare starts (in the background)."""
        w.kill()
        self.workers[self.workers.index(w)] = self.spare
        self.spare = _Worker(self._ctx, self.warmup)

    def warm(self, wait: float = START_TIMEOUT):
        """Start the workers and the spare and wait until every one is ready."""
        self.start()
        deadline = time.monotonic() + wait
        for w in self.workers + [self.spare]:
            while not w.ready:
                if not w.conn.poll(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"a reward worker did not start within {wait:.0f} s")
                w.ready = w.conn.recv() == "ready"

    def close(self):
        for w in self.workers + ([self.spare] if self.spare else []):
            w.kill()
        self.workers, self.spare = [], None

    def run(self, jobs: dict, limit: float) -> dict:
        """{key: (function, args)} -> {key: Outcome}. Deals the jobs to idle workers; kills and replaces a worker
        whose job overruns `limit` seconds (that job's Outcome: timed_out)."""
        self.start()
        todo, out = list(jobs), {}
        started = time.monotonic()
        while todo or any(w.job is not None for w in self.workers):
            now = time.monotonic()
            for w in self.workers:
                if w.ready and w.job is None and todo:
                    key = todo.pop(0)
                    fn, args = jobs[key]
                    w.conn.send((key, fn, args))
                    w.job, w.t0 = key, now
            for w in list(self.workers):
                if w.job is not None and now - w.t0 > limit:
                    out[w.job] = Outcome(seconds=now - w.t0, timed_out=True)
                    self.replace(w)
            busy = [w.t0 + limit for w in self.workers if w.job is not None]
            if not busy and not any(w.ready for w in self.workers) and now - started > START_TIMEOUT:
                raise RuntimeError(f"no reward worker started within {START_TIMEOUT:.0f} s")
            wait = max(0.0, min(busy) - now) if busy else 0.5
            conns = [w.conn for w in self.workers] + ([self.spare.conn] if self.spare and not self.spare.ready else [])
            for conn in mp.connection.wait(conns, timeout=wait):
                w = next((x for x in self.workers + [self.spare] if x is not None and x.conn is conn), None)
                if w is None:
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):  # the worker died (out of memory, killed from outside)
                    if w.job is not None:
                        out[w.job] = Outcome(seconds=time.monotonic() - w.t0, timed_out=True)
                    if w is self.spare:
                        w.kill()
                        self.spare = _Worker(self._ctx, self.warmup)
                    else:
                        self.replace(w)
                    continue
                if msg == "ready":
                    w.ready = True
                elif w.job is not None and msg[0] == w.job:
                    _, ok, value = msg
                    out[w.job] = Outcome(value if ok else None, seconds=time.monotonic() - w.t0, failed=not ok)
                    w.job = None
        return out
