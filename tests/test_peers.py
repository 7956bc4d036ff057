"""The peers' own loss code, transcribed line for line, run beside the project's functions in float64.

Each transcription names the commit it was read at:
  verl        = verl-project/verl 1dda039 (2026-08-22)
  AReaL       = areal-project/AReaL cbff54d (2026-08-22)
  verl-recipe = verl-project/verl-recipe 48ea0a7 (2026-08-05)
Only what the docstrings claim is transcribed: the config objects the peers read are replaced by plain arguments, and
verl's `**config.global_batch_info` by the `global_batch_size` its trainer passes (every row of the mini-batch).
TRL's losses are compared with TRL 1.16 itself (tests/trl_standin.py, in test_gspo.py and test_cispo.py).

Run:  python -m pytest tests/test_peers.py -q        (a few seconds)
"""
import numpy as np
import pytest
import torch

import c3po
import cispo
import dapo
import grpo
import gspo

F64 = torch.float64


# ---- verl 1dda039: verl/utils/torch_functional.py, verl/trainer/ppo/core_algos.py ----------------------------------
def _verl_masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def _verl_masked_mean(values, mask, axis=None):
    s = _verl_masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def _verl_agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None):
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
        loss = _verl_masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_mask = torch.sum(loss_mask, dim=-1)  # per-sequence token count
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)  # token-mean
        seq_mask = (seq_mask > 0).float()  # exclude fully masked sequences
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        loss = _verl_masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean
    else:
        raise ValueError(loss_agg_mode)
    return loss


def _verl_gspo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high,
               rollout_is_weights=None, **global_batch_info):
    """compute_policy_loss_gspo: the loss and actor/pg_clipfrac."""
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths
    log_seq_importance_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    log_seq_importance_ratio = torch.clamp(log_seq_importance_ratio, max=10.0)  # clamp for numerical stability
    seq_importance_ratio = torch.exp(log_seq_importance_ratio)
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * torch.clamp(seq_importance_ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = _verl_agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode="seq-mean-token-mean",
                             **global_batch_info)
    pg_clipfrac = _verl_masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    return pg_loss, pg_clipfrac


def _verl_cispo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high,
                loss_agg_mode="token-mean", rollout_is_weights=None, **global_batch_info):
    """compute_policy_loss_cispo: the loss and actor/pg_clipfrac."""
    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clipped_ratio_sg = clipped_ratio.detach()
    pg_losses = -clipped_ratio_sg * advantages * log_prob
    pg_clipfrac = _verl_masked_mean((ratio != clipped_ratio).float(), response_mask)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = _verl_agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                             **global_batch_info)
    return pg_loss, pg_clipfrac



def _verl_vanilla(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high, clip_ratio_c=3.0,
                  loss_agg_mode="token-mean", rollout_is_weights=None, **global_batch_info):
    """compute_policy_loss_vanilla (clip_ratio_c read with config.get("clip_ratio_c", 3.0)): loss, pg_clipfrac_lower."""
    assert clip_ratio_c > 1.0
    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = _verl_masked_mean(
        torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask
    )
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = _verl_agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                             **global_batch_info)
    return pg_loss, pg_clipfrac_lower

# verl 1dda039: verl/experimental/reward_loop/reward_manager/dapo.py, the overlong shaping of one response's score
def _verl_overlong_reward(valid_response_length, max_resp_len, overlong_buffer_len, overlong_penalty_factor):
    expected_len = max_resp_len - overlong_buffer_len
    exceed_len = valid_response_length - expected_len
    overlong_reward = min(-exceed_len / overlong_buffer_len * overlong_penalty_factor, 0)
    return overlong_reward


# ---- verl-recipe 48ea0a7: dapo/dapo_ray_trainer.py, the group filter of dynamic sampling ----------------------------
def _verl_recipe_kept_uids(uids, metric_vals_in):
    from collections import defaultdict

    prompt_uid2metric_vals = defaultdict(list)
    for uid, metric_val in zip(uids, metric_vals_in, strict=True):
        prompt_uid2metric_vals[uid].append(metric_val)
    prompt_uid2metric_std = {}
    for prompt_uid, metric_vals in prompt_uid2metric_vals.items():
        prompt_uid2metric_std[prompt_uid] = np.std(metric_vals)
    kept_prompt_uids = [
        uid
        for uid, std in prompt_uid2metric_std.items()
        if std > 0 or len(prompt_uid2metric_vals[uid]) == 1
    ]
    return kept_prompt_uids


# ---- AReaL cbff54d: areal/utils/functional/functional.py -----------------------------------------------------------
def _areal_cispo(logprobs, proximal_logprobs, advantages, eps_clip, loss_mask, eps_clip_higher, behave_imp_weight=None):
    """cispo_loss_fn; `behave_imp_weight` stands for apply_rejection_sampling's (None: rejection_sampling=None)."""
    loss_mask_count = loss_mask.count_nonzero() or 1
    advantages = advantages.detach()
    log_ratio = (logprobs - proximal_logprobs).detach()
    ratio = torch.exp(log_ratio)
    ratio_clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip_higher).detach()
    pg_loss = -ratio_clipped * advantages * logprobs
    if behave_imp_weight is not None:
        pg_loss = pg_loss * behave_imp_weight
    pg_loss = torch.where(loss_mask, pg_loss, 0).sum() / loss_mask_count
    clip_mask = (ratio_clipped != ratio).logical_and(loss_mask)
    return pg_loss, clip_mask


def _areal_sequence_ratio_2d(log_ratio, advantages, loss_mask):
    """_compute_sequence_level_ratio_and_advantages, its 2D (padded) branch."""
    seq_log_ratio_mean = torch.where(loss_mask, log_ratio, 0.0).sum(dim=1) / (loss_mask.sum(dim=1).clamp(min=1))
    ratio = torch.exp(seq_log_ratio_mean.unsqueeze(1).expand_as(log_ratio))
    ratio = torch.where(loss_mask, ratio, 0.0)
    seq_lengths = loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)
    masked_advantages = torch.where(loss_mask, advantages, 0.0)
    advantages = (masked_advantages.sum(dim=-1, keepdim=True) / seq_lengths).expand_as(log_ratio)
    advantages = torch.where(loss_mask, advantages, 0.0)
    return ratio, advantages


def _areal_ppo_sequence_per_token(logprobs, proximal_logprobs, advantages, eps_clip, loss_mask, eps_clip_higher,
                                   c_clip):
    """ppo_actor_loss_fn with importance_sampling_level="sequence", rejection_sampling=None: the per-token loss before
    its token sum (AReaL then divides by the micro-batch's tokens)."""
    log_ratio = logprobs - proximal_logprobs
    ratio, advantages = _areal_sequence_ratio_2d(log_ratio, advantages, loss_mask)
    clipped_ratio = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + (eps_clip if eps_clip_higher is None else eps_clip_higher))
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * clipped_ratio
    pg_loss = torch.max(pg_loss1, pg_loss2)
    if c_clip is not None:
        assert c_clip > 1.0, c_clip
        pg_loss3 = torch.sign(advantages) * c_clip * advantages
        dual_clip_mask = pg_loss3.detach() < pg_loss.detach()
        pg_loss = torch.min(pg_loss, pg_loss3)
    return pg_loss, dual_clip_mask


# ---- shared batch ---------------------------------------------------------------------------------------------------
def _batch(n=8, t=7, scale=0.3, seed=0):
    """Responses of unequal lengths (bool mask, as verl's ppo_loss passes), log-ratios of spread `scale`."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([7, 1, 3, 5, 2, 7, 6, 4])[:n]
    mask = torch.arange(t) < lens.unsqueeze(1)  # (N, T) bool
    logp = (-torch.rand(n, t, generator=g, dtype=F64) * 3).requires_grad_()
    old = logp.detach() - scale * torch.randn(n, t, generator=g, dtype=F64)
    adv = torch.tensor([-1.0, 1.0, 0.5, -0.5, 1.5, 1.0, -2.0, 0.25], dtype=F64)[:n]
    w = torch.rand(n, t, generator=g, dtype=F64) + 0.5  # TIS / behaviour weights, detached
    return logp, old, adv, mask, w


def _grad(loss, x):
    return torch.autograd.grad(loss, x)[0]


# ---- GSPO ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [False, True])
def test_gspo_token_form_equals_verls_loss(weights):
    """gspo.py: token_form=True is verl's only form (GSPO-token), its weights multiply the broadcast per-token loss, and
    verl forces seq-mean-token-mean. With no empty row and the log-ratio below verl's clamp, value and gradient
    agree."""
    logp, old, adv, mask, w = _batch(scale=0.002, seed=1)  # ratios around 1 +- 2e-3: both GSPO bounds bind
    a, _ = _verl_gspo(old, logp, adv.unsqueeze(-1).expand_as(logp), mask, 3e-4, 4e-4, w if weights else None)
    b, mb = gspo.policy_loss(logp, old, adv, mask, token_form=True, token_weights=w if weights else None)
    assert a.item() == pytest.approx(b.item(), rel=1e-12, abs=1e-15)
    assert torch.allclose(_grad(a, logp), _grad(b, logp), rtol=1e-12, atol=1e-15)
    assert mb["seq_clip_frac_low"] > 0 and mb["seq_clip_frac_high"] > 0  # the comparison exercised clipping


def test_gspo_verl_clamps_the_log_ratio_at_10_the_project_does_not():
    """gspo.py: no clamp on the log-ratio here; verl clamps log s_it at 10. A response with mean log-ratio 12 and A < 0
    (the unclipped term is the max): verl's loss is |A| e^10 with no gradient, the project's |A| e^12."""
    logp = torch.zeros(1, 3, dtype=F64, requires_grad=True)
    old, mask = torch.full((1, 3), -12.0, dtype=F64), torch.ones(1, 3, dtype=torch.bool)
    adv = torch.tensor([-1.0], dtype=F64)
    a, _ = _verl_gspo(old, logp, adv.unsqueeze(-1).expand(1, 3), mask, 3e-4, 4e-4)
    b, _ = gspo.policy_loss(logp, old, adv, mask, token_form=True)
    assert a.item() == pytest.approx(np.exp(10.0), rel=1e-12) and b.item() == pytest.approx(np.exp(12.0), rel=1e-12)
    assert torch.equal(_grad(a, logp), torch.zeros(1, 3, dtype=F64)) and (_grad(b, logp) > 0).all()


def test_gspo_empty_row_verls_trainer_counts_it():
    """gspo.py: a response with no token in the loss leaves the project's mean; verl's agg_loss leaves it only when
    given no global batch size, and its trainer passes every row of the mini-batch (num_seqs = rows here)."""
    logp, old, adv, mask, _ = _batch(scale=0.002, seed=1)
    mask[2] = False  # the overlong filter emptied it
    n, kept = len(adv), len(adv) - 1
    verl_alone, _ = _verl_gspo(old, logp, adv.unsqueeze(-1).expand_as(logp), mask, 3e-4, 4e-4)
    verl_trainer, _ = _verl_gspo(old, logp, adv.unsqueeze(-1).expand_as(logp), mask, 3e-4, 4e-4, global_batch_size=n)
    ours = gspo.policy_loss(logp, old, adv, mask, token_form=True)[0]
    as_verl = gspo.policy_loss(logp, old, adv, mask, token_form=True, num_seqs=n)[0]
    assert verl_alone.item() == pytest.approx(ours.item(), rel=1e-12)
    assert verl_trainer.item() == pytest.approx(as_verl.item(), rel=1e-12)
    assert verl_trainer.item() == pytest.approx(ours.item() * kept / n, rel=1e-12) and ours.item() != 0


def test_gspo_dual_clip_on_the_sequence_ratio_is_areals():
    """gspo.py: AReaL applies the dual clip to the sequence ratio (ppo_actor_loss_fn, importance_sampling_level=
    "sequence", c_clip): its per-token loss, before its token sum, is gspo.py's clipped loss after dual_clip."""
    logp, old, adv, mask, _ = _batch(scale=1.5)
    old = old - 1.2  # sequence ratios around e^1.2: the bound c |A| binds for some A < 0, not for all
    a, dual_a = _areal_ppo_sequence_per_token(logp, old, adv.unsqueeze(-1).expand_as(logp), 0.2, mask, 0.28, 3.0)
    loss_tok, _, _ = gspo.clipped_surrogate(logp, old, adv, mask, 0.2, 0.28)
    b, dual_b = gspo.dual_clip(loss_tok, adv, 3.0)
    assert torch.allclose(a[mask], b[mask], rtol=1e-13) and torch.equal(dual_a[mask], dual_b[mask])
    assert dual_b[mask].any() and not dual_b[mask].all()
    assert torch.allclose(_grad(a[mask].sum(), logp), _grad(b[mask].sum(), logp), rtol=1e-12, atol=1e-15)


def test_sequence_level_rollout_weights_product_vs_geometric_mean():
    """gspo.py: TRL's and verl's sequence-level rollout IS weigh a response by the product of its token weights (TRL
    sequence_*: exp of the summed log-ratio; verl rollout_is="sequence": the same, its log clamped at +-20), AReaL's
    level="sequence" by their geometric mean; the project's token weights give the response the arithmetic mean."""
    _, _, adv, mask, w = _batch()
    m = mask.to(F64)
    product = torch.exp((w.log() * m).sum(-1))  # TRL f2cd577: exp((old - sampling) * mask).sum(-1)); verl 1dda039 alike
    geo = torch.exp((w.log() * m).sum(-1) / m.sum(-1).clamp(min=1))  # AReaL cbff54d: exp(mean log-ratio)
    arith = (w * m).sum(-1) / m.sum(-1)  # gspo.py's: the broadcast loss times w, averaged over the response
    per_resp, _, _ = gspo.clipped_surrogate(torch.zeros_like(w), torch.zeros_like(w), adv, mask)
    loss = gspo.policy_loss(torch.zeros_like(w), torch.zeros_like(w), adv, mask, token_weights=w)[0]
    assert loss.item() == pytest.approx((per_resp[:, 0] * arith).mean().item(), rel=1e-13)
    long = mask.sum(-1) > 1
    assert not torch.allclose(arith[long], geo[long]) and not torch.allclose(geo[long], product[long])


# ---- CISPO --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [False, True])
def test_cispo_equals_verls_loss(weights):
    """cispo.py: the cap is 1 + eps_high and the floor 1 - eps_low in verl's compute_policy_loss_cispo too; with the
    defaults (clip_low 1, clip_high 4), token-mean over the batch's tokens and verl's rollout IS weights multiplying
    the per-token loss, value and gradient agree (log-ratios inside verl's +-20 clamp); verl's pg_clipfrac is the
    share of capped tokens, both sides, our capped_frac_low + capped_frac_high."""
    logp, old, adv, mask, w = _batch(scale=1.2)  # some weights above the cap 5, some near the floor
    a, clipfrac = _verl_cispo(old, logp, adv.unsqueeze(-1).expand_as(logp), mask, 1.0, 4.0,
                              rollout_is_weights=w if weights else None)
    b, mb = cispo.policy_loss(logp, old, adv, mask, token_weights=w if weights else None)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)
    assert torch.allclose(_grad(a, logp), _grad(b, logp), rtol=1e-12, atol=1e-15)
    assert clipfrac.item() == pytest.approx(mb["capped_frac_low"] + mb["capped_frac_high"], rel=1e-7)
    assert mb["capped_frac_high"] > 0


@pytest.mark.parametrize("weights", [False, True])
def test_cispo_equals_areals_loss(weights):
    """cispo.py: AReaL's cispo_loss_fn with eps_clip=1.0, eps_clip_higher=4.0 (its recommended single-sided range, a
    cap of 5): the cap on pi_theta/pi_prox, then the behaviour weight (the decoupled form), divided by the micro-batch's
    tokens: cispo.policy_loss with token_weights = that weight. Its clip_mask is our capped tokens, both sides."""
    logp, old, adv, mask, w = _batch(scale=1.2)
    a, clip_mask = _areal_cispo(logp, old, adv.unsqueeze(-1).expand_as(logp), 1.0, mask, 4.0, w if weights else None)
    b, mb = cispo.policy_loss(logp, old, adv, mask, token_weights=w if weights else None)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)
    assert torch.allclose(_grad(a, logp), _grad(b, logp), rtol=1e-12, atol=1e-15)
    n = mask.sum().item()
    assert clip_mask.sum().item() / n == pytest.approx(mb["capped_frac_low"] + mb["capped_frac_high"], abs=1e-12)


# ---- DAPO ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_overlong_penalty_equals_verls_reward_manager(factor):
    """dapo.py Eq. 13: verl's DAPO reward manager has no -1 floor (min(-exceed / L_cache * factor, 0)); generation
    stops at L_max, so for every length up to L_max the two agree; past it verl would go below -factor."""
    max_len, cache = 40, 8
    lengths = list(range(0, max_len + 1))
    ours = dapo.overlong_penalty(lengths, max_len, cache, factor).double()
    verl = torch.tensor([_verl_overlong_reward(n, max_len, cache, factor) for n in lengths], dtype=F64)
    assert torch.allclose(ours, verl, rtol=1e-6, atol=1e-7)  # ours is float32
    assert _verl_overlong_reward(max_len + cache, max_len, cache, factor) == -2 * factor
    assert dapo.overlong_penalty([max_len + cache], max_len, cache, factor).item() == -factor


def test_filter_groups_equals_verl_recipes_on_correctness():
    """dapo.py: with correctness flags (verl-recipe's metric=acc) the group filter keeps the groups verl-recipe's DAPO
    trainer keeps (np.std > 0, or a group of one sample)."""
    g = torch.Generator().manual_seed(0)
    for group_size in (1, 2, 4, 8):
        acc = (torch.rand(64 * group_size, generator=g) < torch.rand(64, generator=g).repeat_interleave(group_size))
        uids = [i // group_size for i in range(acc.numel())]
        kept = set(_verl_recipe_kept_uids(uids, acc.double().tolist()))
        ours = dapo.filter_groups(acc.tolist(), group_size)
        assert [i in kept for i in range(64)] == ours.tolist()
        if group_size > 1:
            assert 0 < ours.sum() < 64


def test_filter_groups_equal_scores_verl_recipe_keeps_by_rounding():
    """dapo.py: with partial-credit scores (metric=score) any two different values keep a group, as in verl-recipe; it
    computes np.std, which is 1.4e-17, not 0, for three scores of 0.1: it keeps that group, the project drops it."""
    scores = [0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 0.1, 0.5, 0.5]
    kept = set(_verl_recipe_kept_uids([0, 0, 0, 1, 1, 1, 2, 2, 2], scores))
    assert kept == {0, 2}
    assert dapo.filter_groups(scores, 3).tolist() == [False, False, True]


# verl 4f80e46 (2025-05-01), the commit of the DAPO run that reached 50-52% AIME: core_algos.agg_loss's token-mean
# (verl_F.masked_mean) per micro-batch, scaled in dp_actor.update_policy with use_dynamic_bsz (its 32B script) by
# len(data) / ppo_mini_batch_size; one rank
def _verl_4f80e46_token_mean(loss_mat, loss_mask, micro_batches, ppo_mini_batch_size):
    total = 0.0
    for idx in micro_batches:
        values, mask = loss_mat[idx], loss_mask[idx]
        pg_loss = (values * mask).sum() / (mask.sum() + 1e-8)  # masked_mean
        total = total + pg_loss * (len(idx) / ppo_mini_batch_size)
    return total


def test_token_mean_verl_now_and_the_dapo_run():
    """dapo.py: verl 1dda039's token-mean divides by the mini-batch's tokens (dapo.aggregate with num_tokens = them);
    the reproduction run's verl (4f80e46) averaged micro-batch token means weighted by rows: equal only when every
    micro-batch holds the same tokens per response."""
    g = torch.Generator().manual_seed(2)
    loss = torch.randn(8, 6, generator=g, dtype=F64)
    mask = (torch.arange(6) < torch.tensor([[6], [1], [3], [5], [2], [6], [4], [4]])).to(F64)
    micro = [[0, 1, 2, 3], [4, 5, 6, 7]]  # 15 and 16 tokens
    total = mask.sum()
    now = sum(_verl_agg_loss(loss[i], mask[i], "token-mean", batch_num_tokens=total) for i in micro)
    ours = sum(dapo.aggregate(loss[i], mask[i], "token-mean", num_tokens=total) for i in micro)
    assert now.item() == pytest.approx(ours.item(), rel=1e-13)
    assert now.item() == pytest.approx(dapo.aggregate(loss, mask, "token-mean").item(), rel=1e-13)
    then = _verl_4f80e46_token_mean(loss, mask, micro, 8)
    assert abs(then.item() - ours.item()) > 1e-3
    even = (torch.arange(6) < torch.tensor([[6], [1], [3], [6], [2], [5], [4], [5]])).to(F64)  # 16 and 16 tokens
    assert _verl_4f80e46_token_mean(loss, even, micro, 8).item() == pytest.approx(
        dapo.aggregate(loss, even, "token-mean").item(), rel=1e-7)



# ---- the dual clip (grpo.py, dapo.py, c3po.py, gspo.py, async_rollout.py) --------------------------------------------
@pytest.mark.parametrize("mod,agg", [(grpo, "seq-mean-token-mean"), (dapo, "token-mean"), (c3po, "token-mean")])
def test_dual_clip_3_reproduces_verls_vanilla_loss(mod, agg):
    """grpo.dual_clip / async_rollout.py: `--dual-clip 3` reproduces verl's compute_policy_loss_vanilla (clip_ratio_c
    3.0, always on there), the rollout IS weights multiplying the per-token loss after the bound: value, gradient, and
    verl's pg_clipfrac_lower is our clip_frac_dual."""
    logp, old, adv, mask, w = _batch(scale=1.5)  # ratios far above 1 + eps on negative advantages: the bound binds
    a, lower = _verl_vanilla(old, logp, adv.unsqueeze(-1).expand_as(logp), mask, 0.2, 0.28, 3.0, agg,
                             rollout_is_weights=w)
    b, mb = mod.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, loss_agg=agg, dual_clip_c=3.0,
                            token_weights=w, kl_coef=0.0)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)
    assert torch.allclose(_grad(a, logp), _grad(b, logp), rtol=1e-12, atol=1e-15)
    assert lower.item() == pytest.approx(mb["clip_frac_dual"], rel=1e-7) and mb["clip_frac_dual"] > 0


# verl 1dda039: core_algos.compute_grpo_outcome_advantage (outcome rewards; returns the advantage, token-broadcast)
def _verl_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    from collections import defaultdict

    scores = token_level_rewards.sum(dim=-1)
    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}
    with torch.no_grad():
        bsz = scores.shape[0]
        for i in range(bsz):
            id2score[index[i]].append(scores[i])
        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)
            elif len(id2score[idx]) > 1:
                scores_tensor = torch.stack(id2score[idx])
                id2mean[idx] = torch.mean(scores_tensor)
                id2std[idx] = torch.std(scores_tensor)
        for i in range(bsz):
            if norm_adv_by_std_in_grpo:
                scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
            else:
                scores[i] = scores[i] - id2mean[index[i]]
        scores = scores.unsqueeze(-1) * response_mask
    return scores, scores


@pytest.mark.parametrize("scale", [True, False])
def test_group_advantages_equal_verls(scale):
    """grpo.py: A = (R - mean) / (std + 1e-6), the unbiased (N-1) std, as verl's compute_grpo_outcome_advantage;
    scale_by_std=False is its norm_adv_by_std_in_grpo=False (Dr. GRPO)."""
    g = torch.Generator().manual_seed(4)
    G, B, T = 8, 6, 3
    rewards = torch.randint(0, 2, (B * G,), generator=g).to(F64) + 0.25 * torch.rand(B * G, generator=g, dtype=F64)
    rewards[:G] = 1.0  # an all-equal group: advantage 0 in both
    tlr = torch.zeros(B * G, T, dtype=F64)
    tlr[:, -1] = rewards  # verl puts the outcome reward on the last response token
    verl, _ = _verl_grpo_outcome_advantage(tlr, torch.ones(B * G, T, dtype=F64), np.repeat(np.arange(B), G),
                                           norm_adv_by_std_in_grpo=scale)
    ours = grpo.group_advantages(rewards, G, scale_by_std=scale)
    assert ours.dtype == torch.float32  # statistics in float64, the advantage returned in float32
    assert torch.allclose(verl[:, 0], ours.to(F64), rtol=1e-7, atol=1e-7)
    assert torch.equal(verl[:, 0].float(), ours)  # the float64 value, rounded once
    assert torch.equal(ours[:G], torch.zeros(G, dtype=ours.dtype))


# ---- docs/peers.md: every row names a project-side thing that exists and a peer commit ----------------------------
def _peer_tables():
    import os
    import re

    text = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "peers.md")).read()
    rows = lambda part: [[c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
                         for line in part.splitlines() if line.startswith("|") and not re.match(r"\|[-| ]+\|$", line)][1:]
    head, table = text.split("## The table", 1)
    return rows(head), rows(table)


def test_peers_page_rows_name_what_exists():
    """docs/peers.md: each row's project side exists (`file.py:name` imports and has the name; `--flag` is a field of
    config.Config), its peer is one of the page's peers, and every commit is a 7-40 digit hex string."""
    import dataclasses
    import importlib
    import re

    import config

    peers, table = _peer_tables()
    assert len(peers) >= 5 and len(table) >= 20
    names = {p[0] for p in peers}
    for p in peers:
        assert re.fullmatch(r"[0-9a-f]{7,40}", p[2]), p
    fields = {f.name for f in dataclasses.fields(config.Config)}
    for row in table:
        assert len(row) == 5, row
        choice, project, peer, where, _ = row
        assert peer in names, row
        m = re.fullmatch(r".+ @ (\w+)", where)
        assert m and re.fullmatch(r"[0-9a-f]{7,40}", m.group(1)), row
        assert m.group(1) in {p[2] for p in peers if p[0] == peer}, row  # the commit the page pins for that peer
        name = project.strip("`")
        if name.startswith("--"):
            assert name[2:].replace("-", "_") in fields, row
        else:
            path, attr = name.split(":")
            obj = importlib.import_module(path[:-3].replace("/", "."))
            for part in attr.split("."):
                obj = getattr(obj, part)
