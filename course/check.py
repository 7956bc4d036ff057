"""The course's exercise checks: each one runs the student's function and the project's on random inputs.

A notebook's exercise cell defines `my_...` (raising NotImplementedError until it is written) and calls the check
below. The check prints "not written yet" for an unwritten exercise, one line with a tick when the function agrees
with the project's on every input, and otherwise raises AssertionError naming the first input where they differ.
tests/test_course.py runs every check against a correct answer and against a plausible wrong one.
"""
from __future__ import annotations

import os
import random
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the project's files live one directory up
    sys.path.insert(0, ROOT)

import async_rollout  # noqa: E402
import c3po  # noqa: E402
import cispo  # noqa: E402
import curriculum  # noqa: E402
import dapo  # noqa: E402
import entropy  # noqa: E402
import grpo  # noqa: E402
from coding import code_reward  # noqa: E402

TRIALS = 200


def _run(name: str, reference: str, cases, fn, ref, close) -> bool:
    """Compare fn(*case) with ref(*case) on every case; print one line, or raise naming the first difference."""
    for i, case in enumerate(cases):
        try:
            got = fn(*case)
        except NotImplementedError:
            print(f"{name}: not written yet -- write it in the cell above and run the cell again")
            return False
        want = ref(*case)
        if not close(got, want):
            shown = ", ".join(_short(c) for c in case)
            raise AssertionError(f"{name}: differs from {reference} on input {i} ({shown}):\n"
                                 f"  yours:   {_short(got)}\n  project: {_short(want)}")
    print(f"{name}: \N{CHECK MARK} agrees with {reference} on {len(cases)} random inputs")
    return True


def _short(x) -> str:
    if isinstance(x, dict):
        return "; ".join(f"{k} {_short(v)}" for k, v in x.items())
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    s = repr(x)
    return s if len(s) < 300 else s[:297] + "..."


def _tensors_close(atol=1e-5):
    def close(a, b):
        a = torch.as_tensor(a, dtype=torch.float64)
        b = torch.as_tensor(b, dtype=torch.float64)
        return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=1e-4)
    return close


def group_advantages(fn) -> bool:
    """fn(rewards (N,), group_size) -> advantages (N,), as grpo.group_advantages (std + 1e-6, all-equal group 0)."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for t in range(TRIALS):
        G = int(torch.randint(2, 9, (1,), generator=g))
        B = int(torch.randint(1, 5, (1,), generator=g))
        if t % 3 == 0:
            r = torch.randint(0, 2, (B * G,), generator=g).float()  # 0/1 rewards, all-equal groups included
        elif t % 3 == 1:
            r = torch.randint(0, 2, (B * G,), generator=g).float() * 2 - 1  # +1 / -1 rewards
        else:
            r = torch.rand(B * G, generator=g)  # partial credit
        cases.append((r, G))
    return _run("group_advantages", "grpo.group_advantages", cases, fn, grpo.group_advantages, _tensors_close())


def clip_higher(fn) -> bool:
    """fn(logp, old_logp, advantages, eps_low, eps_high) -> per-token loss (N, T), as dapo.clipped_surrogate's."""
    g = torch.Generator().manual_seed(1)
    cases = []
    for _ in range(TRIALS):
        N, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 7, (1,), generator=g))
        old = -torch.rand(N, T, generator=g) * 3
        logp = old + torch.randn(N, T, generator=g) * 0.4  # ratios from about 0.3 to 3
        adv = torch.randn(N, generator=g)
        cases.append((logp, old, adv, 0.2, 0.28))
    return _run("clip_higher", "dapo.clipped_surrogate", cases, fn,
                lambda *c: dapo.clipped_surrogate(*c)[0], _tensors_close())


def entropy_controller(fn) -> bool:
    """fn(entropies, target, delta, c_max) -> list of alpha_k, as entropy.AdaptiveEntropy(timing='paper') gives them."""
    rng = random.Random(2)
    cases = []
    for _ in range(TRIALS // 4):
        target = rng.choice([0.2, 0.5, 1.0])
        es = [max(0.0, target + rng.gauss(0, 0.3)) for _ in range(rng.randint(1, 30))]
        cases.append((es, target, rng.choice([1e-4, 1e-3, 0.01]), rng.choice([0.005, 0.02])))

    def ref(es, target, delta, c_max):
        ctrl = entropy.AdaptiveEntropy(target=target, delta=delta, c_max=c_max, timing="paper")
        return [ctrl.step(e) for e in es]

    return _run("entropy_controller", "entropy.AdaptiveEntropy(timing='paper')", cases, fn, ref, _tensors_close(1e-9))


def budget_select(fn) -> bool:
    """fn(lengths, budget) -> kept tokens per response (N,), as c3po.budget_select in rollout order."""
    rng = random.Random(3)
    cases = [([rng.randint(1, 60) for _ in range(rng.randint(1, 16))], rng.randint(1, 400)) for _ in range(TRIALS)]
    return _run("budget_select", "c3po.budget_select", cases, fn, c3po.budget_select, _tensors_close(0))


def test_difficulty_reward(fn) -> bool:
    """fn(passed, levels, mode) -> reward, as coding.code_reward.score for mode 'strict' and 'soft' (equal weights)."""
    rng = random.Random(4)
    cases = []
    for _ in range(TRIALS):
        n = rng.randint(1, 10)
        levels = [rng.randint(1, 3) for _ in range(n)]
        passed = [rng.random() < 0.7 for _ in range(n)]
        cases.append((passed, levels, rng.choice(["strict", "soft"])))
    return _run("test_difficulty_reward", "coding.code_reward.score", cases, fn, code_reward.score, _tensors_close(1e-9))


def reject_zero_advantage(fn) -> bool:
    """fn(rewards (N,), group_size) -> keep mask (B,) bool, as curriculum.reject_zero_advantage."""
    g = torch.Generator().manual_seed(5)
    cases = []
    for _ in range(TRIALS):
        G, B = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g))
        cases.append((torch.randint(0, 2, (B * G,), generator=g).float(), G))
    return _run("reject_zero_advantage", "curriculum.reject_zero_advantage", cases, fn,
                curriculum.reject_zero_advantage, lambda a, b: torch.equal(torch.as_tensor(a).bool(), b))


def tis_weights(fn) -> bool:
    """fn(trainer_logp, engine_logp, mask, cap) -> per-token weights (N, T), as async_rollout.tis_weights."""
    g = torch.Generator().manual_seed(6)
    cases = []
    for _ in range(TRIALS):
        N, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        eng = -torch.rand(N, T, generator=g) * 4
        trn = eng + torch.randn(N, T, generator=g) * 0.5
        mask = (torch.rand(N, T, generator=g) < 0.8).float()
        cases.append((trn, eng, mask, 2.0))
    return _run("tis_weights", "async_rollout.tis_weights", cases, fn, async_rollout.tis_weights, _tensors_close())


def cispo_loss(fn) -> bool:
    """fn(logp, old_logp, advantages, eps_low, eps_high) -> per-token loss (N, T), as cispo.clipped_surrogate's: its
    value and its gradient with respect to logp (the weight must be detached, so the value alone cannot tell)."""
    g = torch.Generator().manual_seed(7)
    cases = []
    for t in range(TRIALS):
        N, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 7, (1,), generator=g))
        old = -torch.rand(N, T, generator=g) * 3
        logp = old + torch.randn(N, T, generator=g) * 1.0  # ratios from about 0.05 to 20: both sides of any cap
        adv = torch.randn(N, generator=g)
        cases.append((logp, old, adv, 1.0, (4.0, 0.28)[t % 2]))  # cispo.py's cap 1 + 4, and a cap of 1.28

    def value_and_grad(f):
        def run(logp, old, adv, eps_low, eps_high):
            x = logp.clone().requires_grad_()
            loss = f(x, old, adv, eps_low, eps_high)
            grad = torch.autograd.grad(loss.sum(), x)[0] if loss.requires_grad else torch.zeros_like(x)
            return {"loss": loss.detach(), "d loss / d logp": grad}
        return run

    def close(a, b):
        return all(_tensors_close()(a[k], b[k]) for k in b)

    return _run("cispo_loss", "cispo.clipped_surrogate", cases, value_and_grad(fn),
                value_and_grad(lambda *c: cispo.clipped_surrogate(*c)[0]), close)


def overlong_penalty(fn) -> bool:
    """fn(lengths, max_len, cache_len) -> R_length (N,), as dapo.overlong_penalty's (DAPO Eq. 13): 0 up to
    L_max - L_cache, a ramp down to -1 over the last L_cache tokens, -1 past L_max."""
    g = torch.Generator().manual_seed(8)
    cases = []
    for _ in range(TRIALS):
        max_len = int(torch.randint(8, 64, (1,), generator=g))
        cache_len = int(torch.randint(1, max_len + 1, (1,), generator=g))
        lengths = torch.randint(0, max_len + 8, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g)
        cases.append((lengths, max_len, cache_len))
    return _run("overlong_penalty", "dapo.overlong_penalty", cases, fn, dapo.overlong_penalty, _tensors_close())
