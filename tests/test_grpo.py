"""The GRPO math, checked by hand and against identities.  Run: python -m pytest tests/test_grpo.py -q"""
import math

import pytest
import torch

import grpo


def test_advantages_hand_computed():
    # group [1,1,0,0]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> A = +-0.5 / 0.57735 = +-0.8660
    a = grpo.group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), 4)
    assert torch.allclose(a, torch.tensor([0.8660, 0.8660, -0.8660, -0.8660]), atol=1e-4)
    # two groups are normalised separately; [1,0,0,0]: mean .25, std .5 -> A = 1.5, -0.5 x3
    a = grpo.group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]), 4)
    assert torch.allclose(a[4:], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5)


def test_advantages_affine_invariant_to_reward_scale():
    r01 = torch.tensor([1.0, 0.0, 1.0, 1.0])
    assert torch.allclose(grpo.group_advantages(r01, 4), grpo.group_advantages(2 * r01 - 1, 4), atol=1e-5)


def test_all_equal_group_gives_zeros_not_nan():
    for v in (0.0, 1.0, -1.0):
        a = grpo.group_advantages(torch.full((8,), v), 4)
        assert torch.equal(a, torch.zeros(8)) and not torch.isnan(a).any()


@pytest.mark.parametrize("v", [0.1, 1 / 3, 0.7, 0.3, 1e6 + 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("G", [3, 4, 8, 16])
def test_equal_rewards_give_exactly_zero_for_any_value(v, dtype, G):
    # float32 statistics gave +0.06 on an all-0.7 group (mean's rounding error / (0 + 1e-6)); now exactly zero
    for scale in (True, False):
        a = grpo.group_advantages(torch.full((2 * G,), v, dtype=dtype), G, scale_by_std=scale)
        assert torch.equal(a, torch.zeros(2 * G))


def test_advantages_match_float64_reference():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(64 * 8, generator=g, dtype=torch.float64) * 0.9 + 0.05  # partial-credit-like rewards
    ref = r.view(-1, 8)
    ref = ((ref - ref.mean(1, keepdim=True)) / (ref.std(1, keepdim=True) + 1e-6)).view(-1)
    a = grpo.group_advantages(r, 8)
    assert a.dtype == torch.float32
    assert torch.equal(a, ref.float())  # the float64 result, rounded once (float32 statistics: off by up to ~4e-7)


def test_dr_grpo_mean_only():
    a = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, scale_by_std=False)
    assert torch.allclose(a, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_bad_group_size():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        grpo.group_advantages(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="do not split"):
        grpo.group_advantages(torch.zeros(6), 4)


def test_token_logprobs_and_entropy_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))  # (1, 1, 3)
    logp, ent = grpo.token_logprobs(logits, torch.tensor([[1]]), with_entropy=True)
    assert math.isclose(logp.item(), math.log(0.25), rel_tol=1e-6)
    assert math.isclose(ent.item(), -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)), rel_tol=1e-6)
    # temperature 2: softmax(logits / 2) ~ sqrt(p)
    q = torch.tensor([0.5, 0.25, 0.25]).sqrt()
    logp2, _ = grpo.token_logprobs(logits, torch.tensor([[0]]), temperature=2.0)
    assert math.isclose(logp2.item(), math.log(q[0] / q.sum()), rel_tol=1e-6)


def test_token_logprobs_equal_minus_hf_cross_entropy():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, max_position_embeddings=64)
    model = Qwen2ForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (3, 12))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    logp, _ = grpo.token_logprobs(out.logits[:, :-1], ids[:, 1:])  # logits at t-1 predict token t
    assert torch.allclose(-logp.mean(), out.loss, atol=1e-6)
    per_tok = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1), reduction="none")
    assert torch.allclose(logp.reshape(-1), -per_tok, atol=1e-6)


def test_kl_k3_hand():
    kl = grpo.kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert math.isclose(kl.item(), 0.5 - math.log(0.5) - 1, rel_tol=1e-6)  # exp(d) - d - 1 with d = ln(1/2)
    assert grpo.kl_k3(torch.tensor([0.3]), torch.tensor([0.3])).item() == 0.0


def test_clipped_surrogate_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]]))  # ratios vs old_logp = 0
    old = torch.zeros(1, 4)
    # A > 0: ratio 1.5 -> clipped at 1.2;  the same token row with A < 0 below
    loss, lo, hi = grpo.clipped_surrogate(logp, old, torch.tensor([2.0]), 0.2, 0.2)
    assert torch.allclose(loss, -2.0 * torch.tensor([[1.2, 0.5, 1.1, 0.7]]))
    assert hi.tolist() == [[True, False, False, False]] and not lo.any()
    loss, lo, hi = grpo.clipped_surrogate(logp, old, torch.tensor([-1.0]), 0.2, 0.2)
    # A < 0: -min(r A, clip(r) A) = max(r, clip(r)) : 1.5, 0.8, 1.1, 0.8
    assert torch.allclose(loss, torch.tensor([[1.5, 0.8, 1.1, 0.8]]))
    assert lo.tolist() == [[False, True, False, True]] and not hi.any()


def test_aggregation_modes_hand():
    loss = torch.tensor([[1.0, 3.0, 0.0, 0.0], [2.0, 2.0, 2.0, 6.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    assert math.isclose(grpo.aggregate(loss, mask, "seq-mean-token-mean").item(), (2.0 + 3.0) / 2)
    assert math.isclose(grpo.aggregate(loss, mask, "token-mean").item(), 16.0 / 6, rel_tol=1e-6)
    assert math.isclose(grpo.aggregate(loss, mask, "seq-mean-token-sum").item(), (4.0 + 12.0) / 2)
    # micro-batches with global denominators sum to the whole-batch value
    whole = grpo.aggregate(loss, mask, "token-mean")
    parts = sum(grpo.aggregate(loss[i : i + 1], mask[i : i + 1], "token-mean", num_tokens=6) for i in range(2))
    assert torch.allclose(whole, parts)
    with pytest.raises(ValueError):
        grpo.aggregate(loss, mask, "nope")


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_fully_masked_rows_leave_the_sequence_mean(mode):
    # row 1 is fully masked (overlong filter): the mean is over rows 0 and 2, not over 3 rows (TRL; verl's trainer)
    import c3po
    import dapo

    loss = torch.tensor([[1.0, 3.0, 0.0], [5.0, 5.0, 5.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    want = {"seq-mean-token-mean": (2.0 + 2.0) / 2, "seq-mean-token-sum": (4.0 + 6.0) / 2}[mode]
    for agg in (grpo.aggregate, dapo.aggregate, c3po.aggregate):
        assert agg(loss, mask, mode).item() == want
        assert agg(loss, mask, mode).item() == agg(loss[[0, 2]], mask[[0, 2]], mode).item()  # = dropping the row
        assert agg(loss, torch.zeros_like(mask), mode).item() == 0.0  # nothing in the loss: 0, not NaN


def _reduce_by_hand(x, mask, mode):
    """A reference for grpo.aggregate that shares no code with it: Python sums over each row's masked tokens."""
    rows = [[x[i, t] for t in range(x.shape[1]) if mask[i, t]] for i in range(x.shape[0])]
    rows = [r for r in rows if r]
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    assert mode == "seq-mean-token-sum"
    return sum(sum(r) for r in rows) / len(rows)


def test_ratio_one_gradient_equals_reinforce():
    """On the first on-policy update old_logp = logp.detach(): the clipped loss's gradient is the REINFORCE one."""
    torch.manual_seed(0)
    N, T, V = 6, 5, 7
    logits = torch.randn(N, T, V, requires_grad=True)
    tokens = torch.randint(0, V, (N, T))
    mask = (torch.arange(T) < torch.tensor([5, 3, 4, 2, 5, 1]).unsqueeze(1)).long()
    adv = grpo.group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]), 3)
    for agg in grpo.LOSS_AGG:
        logp, _ = grpo.token_logprobs(logits, tokens)
        loss, m = grpo.policy_loss(logp, logp.detach(), adv, mask, clip_low=0.2, clip_high=0.2, loss_agg=agg)
        (g1,) = torch.autograd.grad(loss, logits)
        logp = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # log pi, by hand
        reinforce = -_reduce_by_hand(adv.unsqueeze(1) * logp, mask, agg)  # -(agg of A * log pi)
        (g2,) = torch.autograd.grad(reinforce, logits)
        assert torch.allclose(g1, g2, atol=1e-7), agg
        assert m["clip_frac_low"] == m["clip_frac_high"] == 0.0
        # the loss value is -agg(A): about 0, and not a progress signal
        want = -_reduce_by_hand(adv.double().unsqueeze(1).expand(N, T), mask, agg).item()
        assert math.isclose(loss.item(), want, abs_tol=1e-6)


def test_kl_term_added_and_requires_ref():
    logp = torch.log(torch.full((2, 3), 0.5))
    ref = torch.log(torch.full((2, 3), 0.25))
    mask = torch.ones(2, 3)
    l0, _ = grpo.policy_loss(logp, logp, torch.zeros(2), mask)
    l1, m = grpo.policy_loss(logp, logp, torch.zeros(2), mask, ref, kl_coef=0.1)
    assert math.isclose(l1.item() - l0.item(), 0.1 * (0.5 - math.log(0.5) - 1), rel_tol=1e-5)
    assert math.isclose(m["kl"], 0.5 - math.log(0.5) - 1, rel_tol=1e-5)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo.policy_loss(logp, logp, torch.zeros(2), mask, kl_coef=0.1)


def test_token_weights_scale_the_surrogate_not_the_kl():
    """token_weights (truncated importance sampling) multiply each token's surrogate term: at ratio 1 the gradient is
    the importance-weighted REINFORCE gradient; all-ones weights change nothing; the KL term is not weighted."""
    torch.manual_seed(1)
    N, T, V = 4, 5, 7
    logits = torch.randn(N, T, V, requires_grad=True)
    tokens = torch.randint(0, V, (N, T))
    mask = (torch.arange(T) < torch.tensor([5, 3, 4, 2]).unsqueeze(1)).long()
    adv = torch.tensor([0.5, -1.0, 2.0, -0.3])
    w = torch.rand(N, T) * 2
    ref = torch.randn(N, T).clamp(max=-0.1)
    for agg in grpo.LOSS_AGG:
        logp, _ = grpo.token_logprobs(logits, tokens)
        loss, _ = grpo.policy_loss(logp, logp.detach(), adv, mask, loss_agg=agg, token_weights=w)
        (g1,) = torch.autograd.grad(loss, logits)
        logp = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        (g2,) = torch.autograd.grad(-_reduce_by_hand(w * adv.unsqueeze(1) * logp, mask, agg), logits)
        assert torch.allclose(g1, g2, atol=1e-7), agg
        logp, _ = grpo.token_logprobs(logits, tokens)
        a, _ = grpo.policy_loss(logp, logp.detach(), adv, mask, ref, kl_coef=0.1, loss_agg=agg, token_weights=torch.ones(N, T))
        b, _ = grpo.policy_loss(logp, logp.detach(), adv, mask, ref, kl_coef=0.1, loss_agg=agg)
        assert torch.equal(a, b)
        # with zero weights only the KL term is left
        z, _ = grpo.policy_loss(logp, logp.detach(), adv, mask, ref, kl_coef=0.1, loss_agg=agg, token_weights=torch.zeros(N, T))
        d = (ref - logp).double()
        assert math.isclose(z.item(), 0.1 * _reduce_by_hand(d.exp() - d - 1, mask, agg).item(), rel_tol=1e-6)


# verl's agg_loss (verl-project/verl 1dda039, 2026-08-22, verl/trainer/ppo/core_algos.py) for the sequence means,
# transcribed line for line with verl_F.masked_sum (verl/utils/torch_functional.py); dp_size 1
def _verl_masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def _verl_agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, global_batch_size=None):
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # token-sum
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()  # exclude fully masked sequences
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        return _verl_masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean
    assert loss_agg_mode == "seq-mean-token-mean"
    seq_mask = torch.sum(loss_mask, dim=-1)  # per-sequence token count
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)  # token-mean
    seq_mask = (seq_mask > 0).float()  # exclude fully masked sequences
    if global_batch_size is None:
        global_batch_size = seq_mask.sum()
    return _verl_masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean


def test_verl_sequence_mean_counts_every_row_of_a_split_mini_batch():
    """docs/peers.md (grpo.py:aggregate): with no global batch size verl counts the non-empty rows, as the project does; its
    trainer passes global_batch_size = every row of the mini-batch, so an emptied row stays in verl's divisor.
    Two rows, one emptied (the overlong filter), the other's token loss -1: verl -0.5, the project -1.0."""
    loss = torch.tensor([[-1.0, -1.0], [5.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [False, False]])  # verl's ppo_loss passes response_mask.to(bool)
    assert _verl_agg_loss(loss, mask, "seq-mean-token-mean", global_batch_size=2).item() == -0.5
    assert _verl_agg_loss(loss, mask, "seq-mean-token-mean").item() == -1.0  # no global batch info: non-empty rows
    assert grpo.aggregate(loss, mask, "seq-mean-token-mean").item() == -1.0
    assert grpo.aggregate(loss, mask, "seq-mean-token-mean", num_seqs=2).item() == -0.5  # verl's divisor, passed in


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_verl_micro_batched_sequence_mean_float64(mode):
    """Random float64 mini-batches cut into micro-batches, verl's per-micro-batch losses summed (its gradient
    accumulation): equal to the project's aggregate with num_seqs = all rows (verl) and with the non-empty count
    (the project) exactly when no row is empty; with an emptied row the two differ by the factor rows / non-empty."""
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        n, T = 8, 6
        loss = torch.randn(n, T, generator=g, dtype=torch.float64)
        mask = torch.arange(T) < torch.randint(1, T + 1, (n, 1), generator=g)  # bool, every row non-empty
        if trial % 2:
            mask[torch.randperm(n, generator=g)[: 1 + trial % 3]] = False  # the overlong filter empties 1-3 rows
        verl = sum(_verl_agg_loss(loss[i : i + 4], mask[i : i + 4], mode, global_batch_size=n) for i in range(0, n, 4))
        nonempty = int(mask.any(-1).sum())
        ours = sum(grpo.aggregate(loss[i : i + 4], mask[i : i + 4], mode, num_seqs=nonempty) for i in range(0, n, 4))
        assert verl.item() == pytest.approx(grpo.aggregate(loss, mask, mode, num_seqs=n).item(), abs=1e-12)
        assert ours.item() == pytest.approx(grpo.aggregate(loss, mask, mode).item(), abs=1e-12)
        assert verl.item() == pytest.approx(ours.item() * nonempty / n, abs=1e-12)
        assert (verl.item() == pytest.approx(ours.item(), abs=1e-12)) == (nonempty == n)


def test_verl_row_divisor_plus_1e8_rounds_away():
    """verl divides each row by its token count + 1e-8; with its bool mask the count is int64, and int64 + 1e-8 is a
    float32 that is the count again: the row means are the project's, exactly."""
    g = torch.Generator().manual_seed(1)
    loss = torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = torch.arange(9) < torch.tensor([[9], [1], [4], [7], [2], [5]])
    assert torch.equal(mask.sum(-1) + 1e-8, mask.sum(-1).float())
    agg = "seq-mean-token-mean"
    assert _verl_agg_loss(loss, mask, agg).item() == grpo.aggregate(loss, mask, agg).item()
