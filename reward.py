"""Math reward: is the model's final answer equivalent to the gold answer? Checked with math-verify.

Notable features
  * Answer extraction as Skywork-OR1's verifier (algorithms.md Sec. 3.7): only the text after the last
    `</think>` counts when there is one; the answer is the content of the last `\\boxed{...}`; no `\\boxed{}`
    means wrong. (DAPO's own checker reads an "Answer:" line instead; this project uses \\boxed{} for every
    recipe, with the instruction from data.py.)
  * The gold answer is wrapped in `\\boxed{}` before parsing ("a crucial step", Skywork-OR1 Sec. 7.1), so a
    bare "3/4" is read as the number 3/4 and not as a date or a ratio of strings.
  * An exact string match is accepted before the symbolic check (as Skywork-OR1's code does), and two plain
    integers are compared as integers: math-verify's verdict on them, without its ~1 ms per call. This makes
    the built-in integer task nearly free to score (one worker call per wrong answer was ~20% of a step).
  * Correct / wrong score `correct_reward` / `wrong_reward`: +1/-1 for DAPO and Compass-Thinker (DAPO Eq. 7),
    1/0 for Ring-lite, Skywork-OR1 and MiMo. Group advantages are invariant to this affine change; it matters
    once overlong shaping or other terms are added to the reward.
  * Every check runs under a timeout in a worker process: a pathological string (a power tower, a huge
    matrix) cannot hang training. A timed-out check scores 0, whatever the scoring scale, and is counted in
    the `reward/timeouts` metric. A worker that does not come back is killed and the pool restarted.
  * Batched: a pool of worker processes scores completions in parallel.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
from dataclasses import dataclass

from data import last_boxed


@dataclass
class Verdict:
    correct: bool
    timed_out: bool = False
    extracted: str | None = None


def extract_answer(completion: str) -> str | None:
    """Content of the last \\boxed{} in the text after the last </think> (the whole text if there is none)."""
    if "</think>" in completion:
        completion = completion.rsplit("</think>", 1)[1]
    return last_boxed(completion)


def _norm(s: str) -> str:
    return s.strip().replace(" ", "").rstrip(".")


_INT = re.compile(r"[+-]?\d+")


def _fast_verdict(pred: str | None, gold: str) -> bool | None:
    """The verdicts that need no math-verify: no answer (wrong), the same string, two plain integers; else None."""
    if pred is None or not pred.strip():
        return False
    p, g = _norm(pred), _norm(gold)
    if p == g:
        return True
    if _INT.fullmatch(p) and _INT.fullmatch(g):
        return int(p) == int(g)
    return None


def check(completion: str, gold: str, timeout: float = 5.0) -> Verdict:
    """Verdict for one completion, in this process. math-verify's own timeouts use SIGALRM: main thread only."""
    pred = extract_answer(completion)
    fast = _fast_verdict(pred, gold)
    if fast is not None:
        return Verdict(fast, extracted=pred)
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException  # a BaseException: `except Exception` does not catch it

    to = max(1, int(round(timeout)))
    try:
        g = parse("\\boxed{" + gold + "}", parsing_timeout=to, raise_on_error=True)
        p = parse("\\boxed{" + pred + "}", parsing_timeout=to, raise_on_error=True)
        ok = bool(g) and bool(p) and verify(g, p, timeout_seconds=to, raise_on_error=True)
    except (TimeoutError, TimeoutException):
        return Verdict(False, timed_out=True, extracted=pred)
    except Exception:  # an unparseable answer is a wrong answer
        return Verdict(False, extracted=pred)
    return Verdict(bool(ok), extracted=pred)


def _work(args):
    return check(*args)


class MathReward:
    """Scores completions against gold answers on a pool of `workers` processes (0 = in this process)."""

    def __init__(self, correct_reward: float = 1.0, wrong_reward: float = 0.0, timeout: float = 5.0, workers: int | None = None):
        self.correct_reward, self.wrong_reward, self.timeout = correct_reward, wrong_reward, timeout
        self.workers = min(2, os.cpu_count() or 1) if workers is None else workers
        self._pool = None

    def _get_pool(self):
        if self._pool is None and self.workers > 0:
            # spawn, not fork: the trainer has torch threads (and maybe CUDA) that must not be forked
            self._pool = mp.get_context("spawn").Pool(self.workers)
        return self._pool

    def close(self):
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def verdicts(self, completions: list[str], golds: list[str]) -> list[Verdict]:
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold answers")
        # Missing answers, exact matches and integers need no worker: the whole built-in task.
        out: list[Verdict | None] = [None] * len(completions)
        todo = []
        for i, (c, g) in enumerate(zip(completions, golds)):
            pred = extract_answer(c)
            fast = _fast_verdict(pred, g)
            if fast is None:
                todo.append(i)
            else:
                out[i] = Verdict(fast, extracted=pred)
        pool = self._get_pool() if todo else None
        if pool is None:
            for i in todo:
                out[i] = check(completions[i], golds[i], self.timeout)
            return out
        jobs = {i: pool.apply_async(_work, ((completions[i], golds[i], self.timeout),)) for i in todo}
        # Backstop for hangs that math-verify's own SIGALRM cannot interrupt: every job must be done by this
        # deadline (queueing included); whatever is not is scored as a timeout and the pool is restarted.
        deadline = time.monotonic() + 2 * self.timeout + self.timeout * len(todo) / max(1, self.workers)
        hung = False
        for i, job in jobs.items():
            try:
                out[i] = job.get(timeout=max(0.0, deadline - time.monotonic()))
            except mp.TimeoutError:
                out[i] = Verdict(False, timed_out=True, extracted=extract_answer(completions[i]))
                hung = True
        if hung:
            self.close()
        return out

    def __call__(self, completions: list[str], golds: list[str]):
        """(rewards, correct, metrics): floats, bools and a dict with `reward/timeouts`."""
        v = self.verdicts(completions, golds)
        rewards = [0.0 if x.timed_out else (self.correct_reward if x.correct else self.wrong_reward) for x in v]
        correct = [x.correct for x in v]
        return rewards, correct, {"reward/timeouts": sum(x.timed_out for x in v)}
