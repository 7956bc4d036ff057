"""entropy.py: the entropy bonus's sign and aggregation, the two entropy estimates, and Skywork-OR1's adaptive
controller stepped through a scripted entropy sequence (paper vs code timing and equality rules).

Run:  python -m pytest tests/test_entropy.py -q        (about 1 s on CPU)
"""

import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import entropy
import grpo


def test_entropy_loss_hand_values_and_sign():
    """-coef * H through the idea file's aggregate (grpo.aggregate; c3po.aggregate for C3PO's budget)."""
    import c3po

    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0]])
    term = entropy.entropy_loss(ent, mask, 0.5, grpo.aggregate)  # token-mean: -0.5 * (1+2+3+4)/4
    assert term.item() == pytest.approx(-1.25)
    assert (torch.autograd.grad(term, ent)[0][mask.bool()] < 0).all()  # minimising raises entropy: a bonus
    seq = entropy.entropy_loss(ent, mask, 0.5, grpo.aggregate, loss_agg="seq-mean-token-mean")  # -0.5 * (2 + 4)/2
    assert seq.item() == pytest.approx(-1.5)
    bud = entropy.entropy_loss(ent, mask, 0.5, c3po.aggregate, loss_agg="budget", budget=20)  # -0.5 * 10/20
    assert bud.item() == pytest.approx(-0.25)
    tok = entropy.entropy_loss(ent, mask, 0.5, grpo.aggregate, num_tokens=8)  # the policy loss's mini-batch count
    assert tok.item() == pytest.approx(-0.5 * 10 / 8)


def test_estimate_hand_values_and_nll_estimates_entropy():
    """e = -mean log pi_old over the observed tokens: micro-batches (and processes, through `reduce`) add up to the
    rollout's mean; each timing takes only its own tokens (paper: coef's this_rollout, code: observe)."""
    logp = torch.tensor([[-0.5, -1.5], [-2.0, -9.0]])
    mask = torch.tensor([[1.0, 1], [1, 0]])
    rollout = [torch.tensor([-0.5, -1.5]), torch.tensor([-2.0])]  # the same tokens, (len_i,) per response
    for timing in ("paper", "code"):
        ctrl = entropy.AdaptiveEntropy(timing=timing, target=10.0)
        ctrl.observe(logp[:1], mask[:1])  # two micro-batches of one rollout (code timing; ignored under paper)
        ctrl.observe(logp[1:], mask[1:])
        alpha, m = ctrl.coef(lambda: rollout)
        assert m["policy/entropy_estimate"] == pytest.approx(4.0 / 3)
        assert alpha == (1e-4 if timing == "code" else 0.0)  # code: c updated, then used; paper: c_0 = 0 used
        assert ctrl.estimate(reduce=lambda sums: [2 * x for x in sums]) == (None if timing == "paper" else pytest.approx(4.0 / 3))
        ctrl.observe(logp, mask)
        alpha, m = ctrl.coef(lambda: rollout, reduce=lambda sums: [sums[0] + 1.0, sums[1] + 1.0])  # another process
        assert m["policy/entropy_estimate"] == pytest.approx(5.0 / 4)
        assert alpha == pytest.approx(2e-4 if timing == "code" else 1e-4)
    assert entropy.AdaptiveEntropy(timing="code").coef() == (0.0, {"policy/entropy_coef": 0.0})  # nothing observed yet
    # at tau = 1, E_y~pi[-log pi(y)] = H(pi): the code's NLL estimate and the full-vocabulary entropy agree on average
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 1, 6, generator=g) * 2
    y = torch.multinomial(torch.softmax(logits[0, 0], -1), 40000, replacement=True, generator=g)
    logp_y, ent = grpo.token_logprobs(logits.expand(1, 40000, 6), y.view(1, -1), with_entropy=True)
    ctrl = entropy.AdaptiveEntropy(timing="code")
    ctrl.observe(logp_y, torch.ones_like(logp_y))
    assert ctrl.estimate() == pytest.approx(ent[0, 0].item(), abs=0.03)


E = [0.3, 0.1, 0.1, 0.1, 0.2, 0.3, 0.1]  # the scripted entropy estimates e_0..e_6 around target 0.2
# Delta = 0.125, clamp [0, 0.25] (exact in binary). c_k before each step, by hand:
#   paper equality (strict=False, c unchanged at e = tgt): 0, 0, .125, .25, .25(clamped), .25, .125 -> final .25
#   code  equality (strict=True,  c decreases at e = tgt): 0, 0, .125, .25, .25, .125, 0          -> final .125
# code timing ("update, then use"), the i-th call fed e_i: c after the update, then alpha = c * 1{e_i on}:
#   strict (code):      c = 0, .125, .25, .25, .125, 0, .125 -> alpha 0, .125, .25, .25, 0 (0.2 < 0.2 off), 0, .125
#   non-strict:         c = 0, .125, .25, .25, .25, .125, .25 -> alpha 0, .125, .25, .25, .25, 0, .25
EXPECTED = {  # (timing, strict) -> alpha per call
    ("paper", False): [0, 0, 0.125, 0.25, 0.25, 0, 0.125],  # alpha_k = c_k * 1{e_k <= tgt}        (paper Eq. 3.2)
    ("paper", True): [0, 0, 0.125, 0.25, 0, 0, 0],          # alpha_k = c_k * 1{e_k < tgt}
    ("code", False): [0, 0.125, 0.25, 0.25, 0.25, 0, 0.25],
    ("code", True): [0, 0.125, 0.25, 0.25, 0, 0, 0.125],    # c updated by e_{k-1}, then c * 1{e_{k-1} < tgt} (code)
}


@pytest.mark.parametrize("timing,strict", list(EXPECTED))
def test_adaptive_controller_follows_script(timing, strict):
    ctrl = entropy.AdaptiveEntropy(target=0.2, delta=0.125, c_min=0.0, c_max=0.25, timing=timing, strict=strict)
    assert [ctrl.step(e) for e in E] == EXPECTED[(timing, strict)]
    assert ctrl.c == (0.125 if strict else 0.25)
    assert ctrl.metrics()["policy/entropy_coef_c"] == ctrl.c


def test_adaptive_defaults():
    ctrl = entropy.AdaptiveEntropy()
    assert (ctrl.target, ctrl.delta, ctrl.c, ctrl.c_min, ctrl.c_max, ctrl.timing, ctrl.strict) == (
        0.2, 1e-4, 0.0, 0.0, 0.005, "paper", False)
    assert entropy.AdaptiveEntropy(c0=0.3).c == 0.3  # c_0 is not clamped (Skywork's code clamps after updates only)
    for _ in range(100):
        ctrl.step(0.1)
    assert ctrl.c == pytest.approx(0.005)  # ramps at Delta per step, clamped at c_max
    with pytest.raises(ValueError):
        entropy.AdaptiveEntropy(timing="later")


def test_adaptive_state_dict_resumes_exactly():
    full = entropy.AdaptiveEntropy(delta=0.125, c_max=0.25, timing="code", strict=True)
    ref = [full.step(e) for e in E]
    a = entropy.AdaptiveEntropy(delta=0.125, c_max=0.25, timing="code", strict=True)
    first = [a.step(e) for e in E[:3]]
    b = entropy.AdaptiveEntropy(delta=0.125, c_max=0.25, timing="code", strict=True)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert first + [b.step(e) for e in E[3:]] == ref
    assert not math.isnan(b.c)
