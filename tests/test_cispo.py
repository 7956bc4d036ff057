"""cispo.py: CISPO's capped, detached weight on hand-computed numbers (float64), REINFORCE at ratio 1, and TRL's own loss.

Run:  python -m pytest tests/test_cispo.py -q        (about 30 s on 2 cores: importing TRL is most of it)
"""
import inspect
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/trl_standin.py
import cispo
import config
import dapo
import grpo

F64 = torch.float64


def _batch(n=8, t=6, seed=0):
    """Responses of unequal lengths with token ratios e^N(0, 1): some above the cap 5, some far below 1."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([6, 1, 3, 4, 2, 6, 5, 2])[:n]
    mask = (torch.arange(t) < lens.unsqueeze(1)).to(F64)  # (N, T)
    logp = (-torch.rand(n, t, generator=g, dtype=F64) * 3).requires_grad_()
    old = logp.detach() - 1.2 * torch.randn(n, t, generator=g, dtype=F64)
    adv = torch.tensor([-1.0, 1.0, 0.5, -0.5, 1.5, 1.0, -2.0, 0.25], dtype=F64)[:n]
    ref = logp.detach() + 0.1 * torch.randn(n, t, generator=g, dtype=F64)
    return logp, old, adv, mask, ref


@pytest.mark.parametrize("name", ["group_advantages", "kl_k3", "aggregate"])
def test_unchanged_functions_are_verbatim_copies(name):
    assert inspect.getsource(getattr(cispo, name)) == inspect.getsource(getattr(grpo, name))


def test_function_order_matches_grpo():
    names = ["group_advantages", "kl_k3", "clipped_surrogate", "dual_clip", "aggregate", "policy_loss"]
    lines = [inspect.getsourcelines(getattr(cispo, n))[1] for n in names]
    assert lines == sorted(lines)


def test_defaults():
    p = inspect.signature(cispo.policy_loss).parameters
    assert (p["clip_low"].default, p["clip_high"].default, p["kl_coef"].default) == (1.0, 4.0, 0.0)  # cap 5, no floor
    assert p["loss_agg"].default == "token-mean" and p["unified_mask"].default is False


def test_hand_computed_loss_and_gradient():
    # o_1: 3 tokens, log pi = (-1, -2, -0.5), r = (1, 2, 6), A = +1: weights (1, 2, 5) -- the 6 capped at 1 + 4
    # o_2: 1 token,  log pi = -0.3,          r = 0.5,       A = -2: weight 0.5 (no floor)
    # token mean over 4 tokens of -w A log pi = (1, 4, 2.5, -0.3) -> 1.8; d/d log pi = -w A / 4
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]], dtype=F64, requires_grad=True)
    r = torch.tensor([[1.0, 2.0, 6.0], [0.5, 1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0]], dtype=F64)
    old = logp.detach() - torch.log(r) + 7.0 * (1 - mask)  # pad positions hold anything: the mask keeps them out
    adv = torch.tensor([1.0, -2.0], dtype=F64)
    loss, m = cispo.policy_loss(logp, old, adv, mask)
    assert loss.item() == pytest.approx(1.8, rel=1e-14)
    (grad,) = torch.autograd.grad(loss, logp)
    # the capped token keeps its gradient, -cap A / 4 (a weight that is not detached would give it none)
    assert torch.allclose(grad, torch.tensor([[-0.25, -0.5, -1.25], [0.25, 0, 0]], dtype=F64), rtol=1e-14)
    assert (m["capped_frac_high"], m["capped_frac_low"], m["clip_frac_high"], m["clip_frac_low"]) == (0.25, 0.0, 0.25, 0.0)
    # the unified form (Eq. 7): M = 0 on the token PPO's clip would drop (A > 0, r > 5); the denominator stays 4
    loss, _ = cispo.policy_loss(logp, old, adv, mask, unified_mask=True)
    assert loss.item() == pytest.approx(4.7 / 4, rel=1e-14)
    assert torch.allclose(torch.autograd.grad(loss, logp)[0], torch.tensor([[-0.25, -0.5, 0], [0.25, 0, 0]], dtype=F64))
    # a floor (eps_low 0.2: 0.8): the r = 0.5 token of a negative advantage is capped below and would be dropped by PPO
    loss, m = cispo.policy_loss(logp, old, adv, mask, clip_low=0.2)
    assert loss.item() == pytest.approx((1 + 4 + 2.5 - 0.8 * 2 * 0.3) / 4, rel=1e-14)
    assert (m["capped_frac_low"], m["clip_frac_low"]) == (0.25, 0.25)


def test_gradient_is_reinforces_at_ratio_one():
    # mu = 1: old_logp = logp.detach(), every weight exactly 1: the gradient is -(1/sum|o|) sum A grad log pi,
    # REINFORCE with a token mean, which is DAPO's (and token-mean GRPO's) at ratio 1
    logp, _, adv, mask, _ = _batch()
    a, m = cispo.policy_loss(logp, logp.detach(), adv, mask)
    reinforce = -(adv.unsqueeze(1) * logp * mask).sum() / mask.sum()
    b, _ = dapo.policy_loss(logp, logp.detach(), adv, mask)
    ga = torch.autograd.grad(a, logp)[0]
    assert torch.equal(a, reinforce)
    assert torch.allclose(ga, torch.autograd.grad(reinforce, logp)[0], rtol=1e-14)
    assert torch.allclose(ga, torch.autograd.grad(b, logp)[0], rtol=1e-14)
    assert m["capped_frac_low"] == m["capped_frac_high"] == 0.0


def test_every_token_keeps_a_gradient_where_ppo_drops_some():
    logp, old, adv, mask, _ = _batch()
    a, m = cispo.policy_loss(logp, old, adv, mask)
    b, mb = dapo.policy_loss(logp, old, adv, mask)
    ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
    on = mask.bool()
    assert (ga[on] != 0).all() and (gb[on] == 0).any()  # PPO's clip zeroes some tokens' gradient, CISPO none
    assert m["clip_frac_high"] > 0 and m["clip_frac_low"] == 0  # no floor: nothing is capped below
    assert m["capped_frac_high"] >= m["clip_frac_high"]


def test_dual_clip_is_refused():
    logp, old, adv, mask, _ = _batch()
    with pytest.raises(ValueError, match="no dual clip"):
        cispo.policy_loss(logp, old, adv, mask, dual_clip_c=3.0)
    with pytest.raises(SystemExit, match=r"^error: --dual-clip: CISPO \(cispo.py\) has no dual clip"):
        config.parse_config(["--recipe", "cispo", "--dual-clip", "3"])


@pytest.mark.parametrize("kl", [0.0, 0.04])
def test_equals_trls_own_loss(kl):
    """TRL 1.16 GRPOTrainer._compute_loss (tests/trl_standin.py) with loss_type="cispo", epsilon_high=5.0 against
    cispo.policy_loss with its defaults (clip_high 4.0: the cap 1 + 4 = 5; clip_low 1.0: no floor, as TRL has none):
    loss, gradient and capped share to 1e-6 in float64 (they agree to rounding). Configured alike; the differences
    that remain, each named:
      * the cap's convention: TRL's epsilon_high is the cap itself, ours is 1 + clip_high; TRL with epsilon_high unset
        caps at epsilon, 0.2 (below: our clip_high = -0.8);
      * TRL's normaliser is num_items_in_batch, the generation batch's tokens over processes and accumulation steps;
        here one micro-batch is the batch, so both are its token count (ours: the trainer's num_tokens);
      * with beta > 0 TRL multiplies the KL by the ratio by default (use_bias_correction_kl=True): set False here;
      * TRL's cispo_clip_ratio counts tokens with r > cap and A > 0: our clip_frac_high; capped_frac_high counts
        every capped token, whatever the sign of A.
    """
    from trl_standin import trl_loss

    logp, old, adv, mask, ref = _batch()
    cfg = dict(loss_type="cispo", epsilon_high=5.0, beta=kl, use_bias_correction_kl=False)
    a, ma = trl_loss(logp, old, adv, mask, ref if kl else None, **cfg)
    b, mb = cispo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl)
    ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
    assert abs(a.item() - b.item()) < 1e-6 and (ga - gb).abs().max().item() < 1e-6
    assert ma["cispo_clip_ratio"] == pytest.approx(mb["clip_frac_high"], abs=1e-12) and mb["clip_frac_high"] > 0
    if not kl:  # TRL's trap: epsilon_high unset caps every weight at epsilon = 0.2
        a2, _ = trl_loss(logp, old, adv, mask, loss_type="cispo")
        b2, _ = cispo.policy_loss(logp, old, adv, mask, clip_high=-0.8)
        assert abs(a2.item() - b2.item()) < 1e-6 and not math.isclose(a2.item(), b.item(), rel_tol=1e-3)


def test_trls_bias_corrected_kl_and_dr_grpo_normaliser():
    """The TRL 1.16 settings test_equals_trls_own_loss sets aside, as docs/peers.md states them:
      * its default KL (use_bias_correction_kl=True) is k3 * r_it, r_it uncapped and with its gradient: ours plus
        beta * aggregate(k3 * (r_it - 1)); on-policy (r = 1) the values agree and the gradients do not;
      * its dr_grpo normaliser, rows x max_completion_length, is seq-mean-token-sum with num_seqs = N x L: on-policy
        TRL's dr_grpo (PPO's clip) has CISPO's gradient under it (REINFORCE, weight 1), an emptied row counted.
    """
    from trl_standin import trl_loss

    logp, old, adv, mask, ref = _batch()
    n, L = mask.shape[0], 16  # max_completion_length: TRL's configured cap, above the batch's width
    for o in (old, logp.detach()):  # off-policy (some ratios above the cap), then on-policy
        a, _ = trl_loss(logp, o, adv, mask, ref, loss_type="cispo", epsilon_high=5.0, beta=0.04)
        b, _ = cispo.policy_loss(logp, o, adv, mask, ref, kl_coef=0.04)
        c = b + 0.04 * cispo.aggregate(cispo.kl_k3(logp, ref) * (torch.exp(logp - o) - 1), mask, "token-mean")
        ga, gb, gc = (torch.autograd.grad(x, logp, retain_graph=True)[0] for x in (a, b, c))
        assert abs(a.item() - c.item()) < 1e-12 and (ga - gc).abs().max().item() < 1e-12
        assert (ga - gb).abs().max().item() > 1e-6  # the gradients differ (by beta k3 grad r, k3 ~ 0.005 here), on-policy too
    assert abs(a.item() - b.item()) < 1e-12  # on-policy the values agree
    m2 = mask.clone()
    m2[2] = 0
    for m in (mask, m2):
        a, _ = trl_loss(logp, logp.detach(), adv, m, loss_type="dr_grpo", max_completion_length=L)
        b, _ = cispo.policy_loss(logp, logp.detach(), adv, m, loss_agg="seq-mean-token-sum", num_seqs=n * L)
        ga, gb = torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0]
        assert (ga - gb).abs().max().item() < 1e-12 and ga.abs().max().item() > 0


def test_token_weights_multiply_the_capped_weight():
    # --rollout-lag's pi_prox/pi_behav (or the engine's TIS weight) times the cap on pi_theta/pi_prox: AReaL's form
    logp, old, adv, mask, _ = _batch()
    w = torch.rand(logp.shape, generator=torch.Generator().manual_seed(3), dtype=F64) + 0.5
    loss, _ = cispo.policy_loss(logp, old, adv, mask, token_weights=w)
    cap = torch.exp(logp - old).clamp(0.0, 5.0).detach()
    want_grad = -(w * cap * adv.unsqueeze(1) * mask) / mask.sum()
    assert torch.allclose(torch.autograd.grad(loss, logp)[0], want_grad, rtol=1e-13, atol=1e-17)
