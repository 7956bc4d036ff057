"""c3po.py: exact-budget greedy selection, the constant 1/Phi normaliser, and c3po == grpo with the changes off.

Run:  python -m pytest tests/test_c3po.py -q        (about 1 s on CPU)
"""

import inspect
import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import c3po
import grpo


@pytest.mark.parametrize("name", ["group_advantages", "kl_k3", "clipped_surrogate"])
def test_unchanged_functions_are_verbatim_copies(name):
    assert inspect.getsource(getattr(c3po, name)) == inspect.getsource(getattr(grpo, name))


@pytest.mark.parametrize("kl_coef", [0.0, 1e-3])
def test_changes_off_equals_grpo_value_and_gradient(kl_coef):
    g = torch.Generator().manual_seed(1)
    logp = (-torch.rand(4, 6, generator=g) * 2).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(4, 6, generator=g)
    ref = logp.detach() + 0.1 * torch.randn(4, 6, generator=g)
    adv = torch.randn(4, generator=g)
    mask = (torch.arange(6) < torch.tensor([[6], [2], [4], [1]])).float()
    for agg in grpo.LOSS_AGG:
        a, ma = c3po.policy_loss(logp, old, adv, mask, ref, kl_coef=kl_coef, loss_agg=agg)
        b, mb = grpo.policy_loss(logp, old, adv, mask, ref, kl_coef=kl_coef, loss_agg=agg)
        assert torch.equal(a, b) and ma == mb
        assert torch.equal(torch.autograd.grad(a, logp)[0], torch.autograd.grad(b, logp)[0])


def test_defaults_are_ring_lite():
    p = inspect.signature(c3po.policy_loss).parameters
    assert (p["clip_low"].default, p["clip_high"].default, p["kl_coef"].default, p["loss_agg"].default) == (
        0.2, 0.2, 1e-3, "budget")


def test_budget_select_hand_values():
    assert c3po.budget_select([5, 3, 4, 2], 10).tolist() == [5, 3, 2, 0]  # last one cut at token level
    assert c3po.budget_select([5, 3, 4, 2], 8).tolist() == [5, 3, 0, 0]  # exact fill, nothing cut
    assert c3po.budget_select(torch.tensor([5, 3, 4, 2]), 20).tolist() == [5, 3, 4, 2]  # under budget: all
    assert c3po.budget_select([0, 4, 0, 4], 6).tolist() == [0, 4, 0, 2]
    assert c3po.budget_select([], 6).tolist() == []


def test_budget_select_counts_exactly_phi_with_shuffle():
    lens = [7, 1, 9, 4, 6, 3, 8]
    order = list(range(7))
    random.Random(3).shuffle(order)
    expected, used = [0] * 7, 0
    for i in order:  # the greedy written out by hand for this seed
        expected[i] = max(min(lens[i], 20 - used), 0)
        used += expected[i]
    kept = c3po.budget_select(lens, 20, shuffle_seed=3)
    assert kept.tolist() == expected and kept.sum().item() == 20
    assert all(0 <= k <= n for k, n in zip(kept.tolist(), lens))
    for phi in range(40):
        assert c3po.budget_select(lens, phi, shuffle_seed=phi).sum().item() == min(phi, sum(lens))


def test_budget_mask_keeps_first_tokens_any_padding_side():
    right = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0]])
    left = torch.tensor([[0.0, 1, 1, 1], [0, 0, 1, 1]])
    kept = torch.tensor([2, 0])
    assert c3po.budget_mask(right, kept).tolist() == [[1, 1, 0, 0], [0, 0, 0, 0]]
    assert c3po.budget_mask(left, kept).tolist() == [[0, 1, 1, 0], [0, 0, 0, 0]]


def test_loss_divided_by_phi_hand_values():
    # ratio 1, no KL: per-token loss = -A. A = [+1, -1], lengths [3, 2].
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    kept = c3po.budget_select(mask.sum(-1), 4)  # [3, 1]
    assert kept.tolist() == [3, 1]
    loss, _ = c3po.policy_loss(logp, logp.detach(), adv, c3po.budget_mask(mask, kept), kl_coef=0.0, budget=4)
    assert loss.item() == pytest.approx((-3 + 1) / 4)  # 4 tokens count, / Phi = 4
    grad = torch.autograd.grad(loss, logp)[0]
    assert torch.allclose(grad, torch.tensor([[-0.25, -0.25, -0.25], [0.25, 0, 0]]))  # -A / Phi on kept tokens
    # under budget: all 5 tokens count and the loss is still divided by Phi = 10
    kept = c3po.budget_select(mask.sum(-1), 10)
    loss, _ = c3po.policy_loss(logp, logp.detach(), adv, c3po.budget_mask(mask, kept), kl_coef=0.0, budget=10)
    assert loss.item() == pytest.approx((-3 + 2) / 10)


def test_micro_batches_sum_to_the_whole_and_budget_required():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g)
    old, ref = logp + 0.2 * torch.randn(4, 5, generator=g), logp + 0.1 * torch.randn(4, 5, generator=g)
    adv, mask = torch.randn(4, generator=g), torch.ones(4, 5)
    whole, _ = c3po.policy_loss(logp, old, adv, mask, ref, budget=12)
    parts = sum(c3po.policy_loss(logp[s], old[s], adv[s], mask[s], ref[s], budget=12)[0] for s in (slice(0, 1), slice(1, 4)))
    assert torch.allclose(whole, parts)
    with pytest.raises(ValueError, match="budget"):
        c3po.policy_loss(logp, old, adv, mask, ref)


def test_budget_metrics():
    m = c3po.budget_metrics([5, 3, 4, 2], c3po.budget_select([5, 3, 4, 2], 10), 10)
    assert m == {"c3po/tokens_used": 10, "c3po/budget_fill": 1.0, "c3po/responses_used": 3, "c3po/tokens_dropped": 4}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_loss_divides_by_the_per_process_budget(world):
    """train.update_policy's loss with --token-budget Phi on W processes divides by Phi / W (DDP's all-reduce averages
    the W gradients, so the sum over processes is the 1/Phi loss); a fake world size, no processes launched. Ratio 1
    (on-policy), no KL: the loss is sum of -A over the kept tokens / (Phi / W), by hand."""
    import config
    import train
    from trainer import batches

    logp = torch.log(torch.tensor([[0.5, 0.25, 0.4], [0.2, 0.3, 0.9]], dtype=torch.float64)).requires_grad_()
    cfg = config.parse_config(["--recipe", "c3po", "--token-budget", "8", "--kl-coef", "0", "--entropy-coef", "0"])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float64)  # 3 and 2 kept tokens
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    import types

    rows = batches.Batch(None, None, None, None, mask, 0)
    learner = types.SimpleNamespace(cfg=cfg, ref_model=None)
    old, ref, tis, _ = train.loss_inputs(learner, batches.MicroBatch(rows, adv, mask, None, None), logp)
    loss, _ = train.algorithm(cfg).policy_loss(logp, old, adv, mask, ref, token_weights=tis, num_seqs=2.0, num_tokens=5.0,
                                               **train.loss_settings(cfg, world))
    assert loss.item() == pytest.approx((-1.0 * 3 + 2.0 * 2) / (8 / world), abs=1e-12)  # 1 / (8 / W)


def test_process_budget_splits_phi_exactly_or_refuses():
    """Phi / W on each of W processes, so the W greedy selections keep exactly Phi tokens; a Phi that W does not divide
    is refused (trainer/setup.py turns the refusal into one `error:` line before the run starts)."""
    assert [c3po.process_budget(12, w) for w in (1, 2, 3, 4)] == [12, 6, 4, 3]
    with pytest.raises(ValueError, match="does not split over 5 processes"):
        c3po.process_budget(12, 5)
