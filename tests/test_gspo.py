"""gspo.py: GSPO's sequence ratio on hand-computed numbers (float64), its equivalences, and TRL's own loss.

Run:  python -m pytest tests/test_gspo.py -q        (about 30 s on 2 cores: importing TRL is most of it)
"""
import inspect
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/trl_standin.py
import grpo
import gspo

F64 = torch.float64


def _batch(n=8, t=6, seed=0):
    """Responses of unequal lengths whose sequence ratios fall below, inside and above [1 - 3e-4, 1 + 4e-4]: log s_i =
    c_i exactly, token log-ratios spread around it (zero mean over each response's tokens)."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([6, 1, 3, 4, 2, 6, 5, 2])[:n]
    mask = (torch.arange(t) < lens.unsqueeze(1)).to(F64)  # (N, T)
    c = torch.tensor([-1e-3, -1e-4, 0.0, 2e-4, 1e-3, -5e-4, 6e-4, 3e-4], dtype=F64)[:n]
    noise = 1e-2 * torch.randn(n, t, generator=g, dtype=F64) * mask
    noise = (noise - (noise.sum(1, keepdim=True) / mask.sum(1, keepdim=True)) * mask)  # zero mean per response
    logp = (-torch.rand(n, t, generator=g, dtype=F64) * 3).requires_grad_()
    old = logp.detach() - c.unsqueeze(1) - noise  # log r_it = c_i + noise_it on the tokens that count
    adv = torch.tensor([-1.0, 1.0, 0.5, -0.5, 1.5, 1.0, -2.0, 0.25], dtype=F64)[:n]
    ref = logp.detach() + 0.1 * torch.randn(n, t, generator=g, dtype=F64)
    return logp, old, adv, mask, ref


@pytest.mark.parametrize("name", ["group_advantages", "kl_k3", "dual_clip", "aggregate"])
def test_unchanged_functions_are_verbatim_copies(name):
    assert inspect.getsource(getattr(gspo, name)) == inspect.getsource(getattr(grpo, name))


def test_function_order_matches_grpo():
    names = ["group_advantages", "kl_k3", "clipped_surrogate", "dual_clip", "aggregate", "policy_loss"]
    lines = [inspect.getsourcelines(getattr(gspo, n))[1] for n in names]
    assert lines == sorted(lines)


def test_defaults_are_the_papers():
    p = inspect.signature(gspo.policy_loss).parameters
    assert (p["clip_low"].default, p["clip_high"].default, p["kl_coef"].default) == (3e-4, 4e-4, 0.0)
    assert p["loss_agg"].default == "seq-mean-token-mean" and p["token_form"].default is False


def test_hand_computed_loss_and_gradient():
    # four responses, eps 3e-4 / 4e-4; token log-ratios chosen so that log s_i is their mean:
    #   o_1: 3 tokens, log r = (2e-4, -1e-4, 5e-4) -> s = e^2e-4, inside the band, A = +1: loss -s, grad -s/(3*4) per token
    #   o_2: 2 tokens, log r = (1e-3, 1e-3)        -> s = e^1e-3 > 1 + 4e-4, A = +0.5: clipped, loss -0.5 (1 + 4e-4), no grad
    #   o_3: 1 token,  log r = -1e-3               -> s = e^-1e-3 < 1 - 3e-4, A = -2: clipped, loss 2 (1 - 3e-4), no grad
    #   o_4: 2 tokens, log r = (0, 2e-3)           -> s = e^1e-3, A = -1: min(-s, -(1 + 4e-4)) = -s: loss s, grad s/(2*4)
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0], [-1.5, 0.0, 0.0], [-0.2, -0.9, 0.0]], dtype=F64,
                        requires_grad=True)
    lr = torch.tensor([[2e-4, -1e-4, 5e-4], [1e-3, 1e-3, 0.0], [-1e-3, 0.0, 0.0], [0.0, 2e-3, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]], dtype=F64)
    old = logp.detach() - lr + 5.0 * (1 - mask)  # pad positions hold anything: the mask keeps them out
    adv = torch.tensor([1.0, 0.5, -2.0, -1.0], dtype=F64)
    loss, m = gspo.policy_loss(logp, old, adv, mask)
    s1, s4 = math.exp(2e-4), math.exp(1e-3)
    want = (-s1 - 0.5 * (1 + 4e-4) + 2 * (1 - 3e-4) + s4) / 4
    assert loss.item() == pytest.approx(want, rel=1e-13, abs=1e-15)
    (grad,) = torch.autograd.grad(loss, logp)
    want_grad = torch.tensor([[-s1 / 12] * 3, [0, 0, 0], [0, 0, 0], [s4 / 8, s4 / 8, 0]], dtype=F64)
    assert torch.allclose(grad, want_grad, rtol=1e-13, atol=1e-16)
    # shares: responses o_2 (high) and o_3 (low) of 4; their tokens 2 and 1 of 8
    assert (m["seq_clip_frac_high"], m["seq_clip_frac_low"]) == (0.25, 0.25)
    assert (m["clip_frac_high"], m["clip_frac_low"]) == (2 / 8, 1 / 8)


def test_gspo_token_has_gspos_value_and_gradient():
    logp, old, adv, mask, ref = _batch()
    for kl in (0.0, 0.05):
        a, ma = gspo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl)
        b, mb = gspo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl, token_form=True)
        ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
        assert torch.equal(a, b) and ma == mb  # the same value and the same clipping (Eq. 14: s_it = s_i in value)
        assert torch.allclose(ga, gb, rtol=1e-12, atol=1e-15)  # the same gradient (Eq. 17 = Eq. 10)
    assert 0 < ma["seq_clip_frac_low"] and 0 < ma["seq_clip_frac_high"]  # both bounds bind, on some responses
    assert ma["seq_clip_frac_low"] + ma["seq_clip_frac_high"] < 1
    # per-token weights (TIS): the value still agrees, the gradient does not (docs/peers.md)
    w = torch.rand(logp.shape, generator=torch.Generator().manual_seed(1), dtype=F64) + 0.5
    a, _ = gspo.policy_loss(logp, old, adv, mask, token_weights=w)
    b, _ = gspo.policy_loss(logp, old, adv, mask, token_weights=w, token_form=True)
    assert torch.allclose(a, b, rtol=1e-14)
    assert not torch.allclose(torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0])


def test_equals_grpo_when_every_response_has_one_token():
    # |o_i| = 1: s_i is the token's ratio, the sequence mean is the token: GSPO is GRPO, value, gradient and clipping
    g = torch.Generator().manual_seed(2)
    logp = (-torch.rand(16, 1, generator=g, dtype=F64) * 3).requires_grad_()
    old = logp.detach() - torch.linspace(-0.5, 0.5, 16, dtype=F64).unsqueeze(1)  # log r from -0.5 to 0.5
    adv = torch.randn(16, generator=g, dtype=F64).abs() * torch.tensor([1.0, -1.0], dtype=F64).repeat(8)
    mask, ref = torch.ones(16, 1, dtype=F64), logp.detach() * 0.9
    for kw in (dict(), dict(kl_coef=0.05), dict(dual_clip_c=3.0)):
        a, ma = gspo.policy_loss(logp, old, adv, mask, ref, clip_low=0.2, clip_high=0.2, **kw)
        b, mb = grpo.policy_loss(logp, old, adv, mask, ref, **kw)
        assert torch.allclose(a, b, rtol=1e-14)
        assert torch.allclose(torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0], rtol=1e-14)
        assert {k: v for k, v in ma.items() if not k.startswith("seq_")} == mb
    assert mb["clip_frac_low"] > 0 and mb["clip_frac_high"] > 0  # the comparison exercised clipping


def test_on_policy_gradient_is_grpos():
    # mu = 1: old_logp = logp.detach(), s_i = 1, no clipping: Eq. 10's gradient is GRPO's seq-mean-token-mean one
    logp, _, adv, mask, _ = _batch()
    a, ma = gspo.policy_loss(logp, logp.detach(), adv, mask)
    b, _ = grpo.policy_loss(logp, logp.detach(), adv, mask)
    assert torch.allclose(a, b, rtol=1e-14)
    assert torch.allclose(torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0], rtol=1e-13, atol=1e-16)
    assert ma["seq_clip_frac_low"] == ma["seq_clip_frac_high"] == 0.0


def test_empty_response_leaves_the_mean():
    # the overlong filter empties a response: it leaves numerator and denominator (verl: only with no global batch
    # size), its ratio is 1, not NaN
    logp, old, adv, mask, _ = _batch()
    m2 = mask.clone()
    m2[2] = 0
    a, _ = gspo.policy_loss(logp, old, adv, m2)
    keep = [i for i in range(len(adv)) if i != 2]
    b, _ = gspo.policy_loss(logp[keep], old[keep], adv[keep], mask[keep])
    assert torch.allclose(a, b, rtol=1e-14) and torch.isfinite(torch.autograd.grad(a, logp)[0]).all()


@pytest.mark.parametrize("kl", [0.0, 0.04])
def test_equals_trls_own_loss(kl):
    """TRL 1.16 GRPOTrainer._compute_loss (tests/trl_standin.py) with importance_sampling_level="sequence",
    loss_type="grpo" (the paper's 1/G over responses; TRL's default "dapo" weights each response by its length),
    epsilon=3e-4, epsilon_high=4e-4, against gspo.policy_loss with its defaults: loss, gradient and clip shares to 1e-6
    in float64 (they agree to rounding). Configured alike; the differences that remain, each named:
      * a response with no token in the loss counts as 0 in TRL's mean and leaves ours (below: the ratio of the means
        is (non-empty rows) / (rows));
      * with beta > 0 TRL multiplies the KL by the sequence ratio by default (use_bias_correction_kl=True); ours adds
        the plain k3 KL: set False to compare;
      * TRL's clip_ratio/* are shares of responses here: our seq_clip_frac_*; our clip_frac_* count their tokens.
    """
    from trl_standin import trl_loss

    logp, old, adv, mask, ref = _batch()
    cfg = dict(importance_sampling_level="sequence", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4, beta=kl,
               use_bias_correction_kl=False)
    a, ma = trl_loss(logp, old, adv, mask, ref if kl else None, **cfg)
    b, mb = gspo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl)
    ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
    assert abs(a.item() - b.item()) < 1e-6 and (ga - gb).abs().max().item() < 1e-6
    for side in ("low", "high"):  # both bounds bind on some responses, in the same ones
        assert ma[f"clip_ratio/{side}_mean"] == pytest.approx(mb[f"seq_clip_frac_{side}"], abs=1e-12)
        assert mb[f"seq_clip_frac_{side}"] > 0
    if not kl:  # an empty response: TRL counts it as 0 in the mean, ours leaves it
        m2 = mask.clone()
        m2[2] = 0
        a2, _ = trl_loss(logp, old, adv, m2, **cfg)
        b2, _ = gspo.policy_loss(logp, old, adv, m2)
        assert abs(a2.item() - b2.item() * 7 / 8) < 1e-6


def test_trls_bias_corrected_kl_and_dr_grpo():
    """The two TRL 1.16 settings test_equals_trls_own_loss sets aside, as docs/peers.md states them:
      * its default KL (use_bias_correction_kl=True) is k3 * s_i, s_i with its gradient: ours plus
        beta * aggregate(k3 * (s_i - 1)); on-policy (s_i = 1) the values agree and the gradients do not;
      * loss_type="dr_grpo" divides by rows x max_completion_length: seq-mean-token-sum with num_seqs = N x L,
        an emptied row counted (the trainer's own num_seqs, the non-empty rows, gives L times TRL's loss).
    """
    from trl_standin import trl_loss

    logp, old, adv, mask, ref = _batch()
    n, L = mask.shape[0], 16  # max_completion_length: TRL's configured cap, above the batch's width T = 6
    clip = dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)
    for o in (old, logp.detach()):  # off-policy, then on-policy (s_i = 1 exactly)
        a, _ = trl_loss(logp, o, adv, mask, ref, loss_type="grpo", beta=0.04, **clip)  # bias correction: TRL's default
        s = torch.exp(((logp - o) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))  # (N, 1), differentiable
        b, _ = gspo.policy_loss(logp, o, adv, mask, ref, kl_coef=0.04)
        c = b + 0.04 * gspo.aggregate(gspo.kl_k3(logp, ref) * (s - 1), mask, "seq-mean-token-mean")
        ga, gb, gc = (torch.autograd.grad(x, logp, retain_graph=True)[0] for x in (a, b, c))
        assert abs(a.item() - c.item()) < 1e-12 and (ga - gc).abs().max().item() < 1e-12
        assert (ga - gb).abs().max().item() > 1e-6  # the gradients differ (by beta k3 grad r, k3 ~ 0.005 here), on-policy too
    assert abs(a.item() - b.item()) < 1e-12  # on-policy the values agree
    m2 = mask.clone()
    m2[2] = 0
    for m in (m2, mask):
        a, _ = trl_loss(logp, old, adv, m, loss_type="dr_grpo", max_completion_length=L, **clip)
        b, _ = gspo.policy_loss(logp, old, adv, m, loss_agg="seq-mean-token-sum", num_seqs=n * L)
        ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
        assert abs(a.item() - b.item()) < 1e-12 and (ga - gb).abs().max().item() < 1e-12
    b, _ = gspo.policy_loss(logp, old, adv, mask, loss_agg="seq-mean-token-sum")  # every row non-empty: N rows
    assert b.item() == pytest.approx(L * a.item(), rel=1e-12)


def test_token_weights_weigh_each_response_by_the_mean_of_its_tokens():
    # TIS / --rollout-lag weights multiply the broadcast loss: response i counts as l_i * mean_t(w_it), as in verl
    logp, old, adv, mask, _ = _batch()
    w = torch.rand(logp.shape, generator=torch.Generator().manual_seed(3), dtype=F64) + 0.5
    loss, _ = gspo.policy_loss(logp, old, adv, mask, token_weights=w)
    per_resp, _, _ = gspo.clipped_surrogate(logp, old, adv, mask, 3e-4, 4e-4)
    want = (per_resp[:, 0] * (w * mask).sum(1) / mask.sum(1)).mean()
    assert torch.allclose(loss, want, rtol=1e-14)


def test_update_log_counts_response_shares_over_responses():
    """trainer.metrics.UpdateLog: seq_clip_frac_* are averaged over the update's responses, clip_frac_* over its tokens."""
    from trainer.metrics import UpdateLog

    log = UpdateLog()
    base = dict(loss=0.0, clip_frac_low=0.0, kl=0.0, entropy_sum=0.0, seq_clip_frac_low=0.0)
    log.add([dict(base, clip_frac_high=0.5, seq_clip_frac_high=1.0, tokens=30, seqs=1),
             dict(base, clip_frac_high=0.0, seq_clip_frac_high=0.0, tokens=10, seqs=3)], 1.0)
    assert log.agg["seq_clip_frac_high"] == 0.25 and log.agg["clip_frac_high"] == 0.375
