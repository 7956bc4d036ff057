"""Answers to the course's exercises, to compare with yours once the check in the notebook passes (or to unblock you).

Each is written from the formula in its notebook, not copied from the project's files; course/check.py compares them
with the project's functions (tests/test_course.py runs that comparison, and feeds the checks a wrong answer too).
"""
from __future__ import annotations

import torch


def group_advantages(rewards, group_size):  # 01: A_i = (R_i - mean) / (std + 1e-6); all-equal group -> 0
    r = rewards.double().view(-1, group_size)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
    adv[(r == r[:, :1]).all(1)] = 0.0
    return adv.view(-1).float()


def clip_higher(logp, old_logp, advantages, eps_low, eps_high):  # 02: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    return -torch.minimum(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)


def entropy_controller(entropies, target, delta, c_max):  # 03: alpha_k = c_k 1[e_k <= target]; then c moves by delta
    c, alphas = 0.0, []
    for e in entropies:
        alphas.append(c if e <= target else 0.0)
        if e < target:
            c += delta
        elif e > target:
            c -= delta
        c = min(max(c, 0.0), c_max)
    return alphas


def budget_select(lengths, budget):  # 04: whole responses in order until the budget, the last one cut
    kept, used = [], 0
    for n in lengths:
        take = max(0, min(n, budget - used))
        kept.append(take)
        used += take
    return torch.tensor(kept)


def test_difficulty_reward(passed, levels, mode):  # 05: each level worth 1 / #levels, easiest first
    total, distinct = 0.0, sorted(set(levels))
    for lv in distinct:
        ok = [p for p, l in zip(passed, levels) if l == lv]
        if mode == "strict":
            if not all(ok):
                break
            total += 1 / len(distinct)
        else:
            total += sum(ok) / len(ok) / len(distinct)
    return total


def reject_zero_advantage(rewards, group_size):  # 06: keep a group unless all its rewards are equal
    r = rewards.view(-1, group_size)
    return torch.tensor([len(set(row.tolist())) > 1 for row in r])


def tis_weights(trainer_logp, engine_logp, mask, cap):  # 07: min(pi_trainer / pi_engine, C) on counted tokens
    w = torch.exp(trainer_logp - engine_logp).clamp(max=cap)
    return w * mask


def cispo_loss(logp, old_logp, advantages, eps_low, eps_high):  # 08: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi
    weight = torch.exp(logp - old_logp).clamp(1 - eps_low, 1 + eps_high).detach()
    return -weight * advantages[:, None] * logp


def overlong_penalty(lengths, max_len, cache_len):  # 09: 0 before L_max - L_cache, then a ramp to -1 at L_max, -1 after
    y = torch.as_tensor(lengths).float()
    return (((max_len - cache_len) - y) / cache_len).clamp(min=-1.0, max=0.0)
