"""dapo.py: DAPO's five changes on hand-computed numbers, and dapo == grpo with the changes switched off.

Run:  python -m pytest tests/test_dapo.py -q        (about 1 s on CPU)
"""

import inspect
import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dapo
import grpo


def _batch(n=6, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g) * 3).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(n, t, generator=g)  # ratios far from 1, so both clip bounds bite
    ref = logp.detach() + 0.1 * torch.randn(n, t, generator=g)
    adv = torch.randn(n, generator=g)
    lens = torch.tensor([5, 1, 3, 4, 2, 5])[:n]
    mask = (torch.arange(t) < lens.unsqueeze(1)).float()  # (N, T) unequal lengths
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("name", ["group_advantages", "kl_k3", "aggregate"])
def test_unchanged_functions_are_verbatim_copies(name):
    assert inspect.getsource(getattr(dapo, name)) == inspect.getsource(getattr(grpo, name))


def test_function_order_matches_grpo():
    names = ["group_advantages", "kl_k3", "clipped_surrogate", "aggregate", "policy_loss"]
    lines = [inspect.getsourcelines(getattr(dapo, n))[1] for n in names]
    assert lines == sorted(lines)


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_changes_off_equals_grpo_value_and_gradient(kl_coef):
    logp, old, ref, adv, mask = _batch()
    a, ma = dapo.policy_loss(logp, old, adv, mask, ref, clip_high=0.2, loss_agg="seq-mean-token-mean", kl_coef=kl_coef)
    (ga,) = torch.autograd.grad(a, logp)
    b, mb = grpo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl_coef)
    (gb,) = torch.autograd.grad(b, logp)
    assert torch.equal(a, b) and torch.equal(ga, gb) and ma == mb
    assert ma["clip_frac_low"] > 0 and ma["clip_frac_high"] > 0  # the comparison exercised clipping


def test_defaults_are_dapo():
    p = inspect.signature(dapo.policy_loss).parameters
    assert (p["clip_low"].default, p["clip_high"].default, p["kl_coef"].default) == (0.2, 0.28, 0.0)
    assert p["loss_agg"].default == "token-mean"


def test_clip_higher_hand_values():
    # ratio 1.25, A = +1: GRPO clips at 1.2 (loss -1.2, no gradient); DAPO's 1.28 bound lets it through (-1.25, grad -1.25)
    logp = torch.tensor([[0.0]], requires_grad=True)
    old = torch.tensor([[-torch.log(torch.tensor(1.25)).item()]])
    adv, mask = torch.tensor([1.0]), torch.ones(1, 1)
    g_loss, g_m = grpo.policy_loss(logp, old, adv, mask)
    d_loss, d_m = dapo.policy_loss(logp, old, adv, mask)
    assert g_loss.item() == pytest.approx(-1.2) and d_loss.item() == pytest.approx(-1.25)
    assert torch.autograd.grad(g_loss, logp)[0].item() == 0.0
    assert torch.autograd.grad(d_loss, logp)[0].item() == pytest.approx(-1.25)
    assert g_m["clip_frac_high"] == 1.0 and d_m["clip_frac_high"] == 0.0


def test_token_mean_weighs_long_response_tokens_more():
    # long response: 4 tokens, short: 1 token, A = -1 on both, ratio 1 -> every per-token loss is r = 1 > 0.
    # d loss / d logp_t = weight of token t: seq-mean gives 1/(G |o_i|) = 1/8 (long), 1/2 (short); token-mean 1/5 each.
    logp = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([-1.0, -1.0])
    seq, _ = dapo.policy_loss(logp, logp.detach(), adv, mask, loss_agg="seq-mean-token-mean")
    tok, _ = dapo.policy_loss(logp, logp.detach(), adv, mask)
    g_seq = torch.autograd.grad(seq, logp)[0]
    g_tok = torch.autograd.grad(tok, logp)[0]
    assert torch.allclose(g_seq, torch.tensor([[1 / 8] * 4, [1 / 2, 0, 0, 0]]))
    assert torch.allclose(g_tok, torch.tensor([[1 / 5] * 4, [1 / 5, 0, 0, 0]]))
    assert (g_tok[0] > g_seq[0]).all() and g_tok[1, 0] < g_seq[1, 0]  # long weighs more, short less
    # values: per-token losses a (long) and b (short): token-mean - seq-mean = (4a+b)/5 - (a+b)/2 = 3(a-b)/10 > 0 if a > b
    lt = torch.tensor([[2.0, 2, 2, 2], [1, 0, 0, 0]])
    diff = dapo.aggregate(lt, mask, "token-mean") - dapo.aggregate(lt, mask, "seq-mean-token-mean")
    assert diff.item() == pytest.approx(3 * (2 - 1) / 10)


def test_token_mean_over_micro_batches_needs_the_mini_batch_count():
    logp, old, _, adv, mask = _batch()
    whole, _ = dapo.policy_loss(logp, old, adv, mask)
    total = mask.sum().item()
    parts = [dapo.policy_loss(logp[s], old[s], adv[s], mask[s], num_tokens=total)[0] for s in (slice(0, 2), slice(2, 6))]
    assert torch.allclose(sum(parts), whole)
    naive = sum(dapo.policy_loss(logp[s], old[s], adv[s], mask[s])[0] for s in (slice(0, 2), slice(2, 6))) / 2
    assert not torch.allclose(naive, whole)  # per-micro-batch means, averaged: not the mini-batch token mean


def test_filter_groups_hand_values():
    correct = [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1]
    assert dapo.filter_groups(correct, 4).tolist() == [False, False, True, True]
    assert dapo.filter_groups(torch.tensor(correct, dtype=torch.bool), 4).tolist() == [False, False, True, True]
    assert dapo.filter_groups([True, False], 1).tolist() == [True, True]  # single-sample groups kept, as verl
    with pytest.raises(ValueError):
        dapo.filter_groups([1, 0, 1], 2)


@pytest.mark.parametrize("metric", ["auto", "acc", "score"])
def test_filter_uses_correctness_not_shaped_reward(metric):
    """What the trainer hands dynamic sampling (trainer.collect.Collector.round, its `filt`): a group of two wrong
    answers, one cut at the length limit, gets shaped rewards -1 and -2 (DAPO Eq. 13; std > 0), but the filter sees
    correctness (acc; auto for math) or the unshaped rewards (score), equal within the group: dropped."""
    import types

    from trainer.collect import Collector

    comps = [types.SimpleNamespace(text="no", length=5, truncated=False),
             types.SimpleNamespace(text="no", length=20, truncated=True)]
    plan = types.SimpleNamespace(group_size=2, sampling=types.SimpleNamespace(max_new_tokens=20),
                                 stage=types.SimpleNamespace(reward="math"),
                                 task=types.SimpleNamespace(train_set=[types.SimpleNamespace(prompt="q", answer="7")],
                                                            reward_fn=lambda texts, golds, truncated: (
                                                                [-1.0, -1.0], [False, False], {"reward/timeouts": 0})))
    fake = types.SimpleNamespace(cfg=types.SimpleNamespace(overlong_buffer=4, filter_metric=metric), observed=[],
                                 engine=types.SimpleNamespace(generate=lambda prompts, G, sp: [comps]),
                                 take_prompts=lambda plan, n: [0], prompt=lambda plan, q: q)
    fake.shape = lambda c, r, sp: Collector.shape(fake, c, r, sp)
    rnd, timeouts = Collector.round(fake, plan, 1)
    assert rnd.rewards == [-1.0, -2.0]  # the shaped rewards go to the advantages
    assert rnd.filter_values == ([-1.0, -1.0] if metric == "score" else [False, False])  # the filter's input
    assert dapo.filter_groups(torch.tensor(rnd.filter_values, dtype=torch.float64), 2).tolist() == [False]
    assert dapo.filter_groups(torch.tensor(rnd.rewards), 2).tolist() == [True]  # the shaped rewards would keep it


def test_filter_on_partial_scores_keeps_groups_without_a_full_pass():
    # MiMo's code rewards: no response passes every test; partial scores 0.1 vs 1/3 differ -> kept under metric=score
    scores = [0.1, 0.1, 1 / 3, 0.1, 0.7, 0.7, 0.7, 0.7, 0.0, 0.0, 0.0, 0.0]
    correct = [False] * 12
    assert dapo.filter_groups(correct, 4).tolist() == [False, False, False]
    assert dapo.filter_groups(scores, 4).tolist() == [True, False, False]
    s = dapo.DynamicSampler(target_groups=1, group_size=4)
    assert s.add(["a", "b", "c"], torch.tensor(scores, dtype=torch.float64)) and s.take() == ["a"]


def _stub_round(rng, n_groups, g, p_correct):
    groups, correct = [], []
    for _ in range(n_groups):
        c = [rng.random() < p_correct for _ in range(g)]
        groups.append({"id": rng.random(), "correct": c})
        correct += c
    return groups, correct


def test_dynamic_sampler_refills_with_mixed_groups_only_first_in_order():
    rng, g = random.Random(0), 4
    s = dapo.DynamicSampler(target_groups=8, group_size=g, max_gen_rounds=10)
    generated = []
    while not s.full:
        groups, correct = _stub_round(rng, 6, g, p_correct=0.8)
        generated += groups
        s.add(groups, correct)
    assert s.rounds > 1  # the stub makes ~40% of groups all-correct, so a refill round was needed
    kept = s.take()
    mixed = [x for x in generated if 0 < sum(x["correct"]) < g]
    assert len(kept) == 8 and kept == mixed[:8]  # the first kept groups in generation order; surplus discarded
    assert all(0 < sum(x["correct"]) < g for x in kept)  # no zero-std group gets through
    assert s.last_metrics["rollout/groups_discarded_surplus"] == len(mixed) - 8
    assert s.kept == [] and s.rounds == 0  # reset for the next step


def test_dynamic_sampler_round_cap_raises_clear_error():
    s = dapo.DynamicSampler(target_groups=16, group_size=2, max_gen_rounds=3)
    s.add(["a", "b", "c", "d"], [1, 1, 0, 1, 0, 0, 1, 1])  # one mixed group
    s.add(["e", "f"], [1, 1, 0, 0])
    with pytest.raises(RuntimeError, match=r"only 1/16 groups with mixed correctness after 3 generation rounds"):
        s.add(["g", "h"], [1, 1, 1, 1])
    unlimited = dapo.DynamicSampler(target_groups=1, group_size=2, max_gen_rounds=0)
    for _ in range(20):
        unlimited.add(["x"], [1, 1])  # <= 0: never raises
    assert unlimited.add(["y"], [0, 1]) and unlimited.take() == ["y"]


def test_overlong_penalty_eq13_hand_values():
    # L_max = 20, L_cache = 4: 0 up to 16, then (16 - |y|)/4, -1 at 20 and beyond
    out = dapo.overlong_penalty(torch.tensor([10, 16, 17, 18, 19, 20, 24]), max_len=20, cache_len=4)
    assert out.tolist() == [0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]
    assert dapo.overlong_penalty([18], 20, 4, factor=0.5).tolist() == [-0.25]
    with pytest.raises(ValueError):
        dapo.overlong_penalty([1], max_len=4, cache_len=8)


def test_overlong_mask_zeroes_truncated_rows_only():
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 0, 0]])
    out = dapo.overlong_mask(mask, [False, True, False])
    assert out.tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    # the truncated response's reward still shapes its group's advantages; only its loss tokens vanish
    logp = torch.zeros(3, 3, requires_grad=True)
    loss, _ = dapo.policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0, 0.5]), out)
    assert torch.autograd.grad(loss, logp)[0][1].abs().sum() == 0
