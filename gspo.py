"""GSPO: group sequence policy optimisation (Qwen, arXiv 2507.18071v2, Sec. 4-5, Eq. 5-17), the Qwen3 RL recipe's loss.

Same functions, same order as grpo.py, so `diff grpo.py gspo.py` is GSPO's change list; each change is marked
`# GSPO change k` where it lands. The paper's settings are `PAPER`, the flags `--recipe gspo` runs (config.RECIPES).
Advantages, log-probs, KL, dual clip and aggregation are grpo.py's, unchanged.
  1) one importance ratio per response, length-normalised: the geometric mean of its token ratios   (Sec. 4.1, Eq. 7)
  2) clipped at the sequence level, with a tiny eps: 3e-4 below, 4e-4 above                            (Eq. 5, Sec. 5.1)
  3) GSPO-token: the same ratio's value with a per-token gradient path (token_form=True)                (Sec. 4.3, Eq. 13-14)
  4) the clipped share counted over responses too (seq_clip_frac_*), beside the tokens (clip_frac_*)   (Sec. 5.2)

    J(theta) = E_q [ 1/G sum_i min( s_i * A_i , clip(s_i, 1-eps_low, 1+eps_high) * A_i ) ]                     (Eq. 5)
    s_i      = (pi_theta(o_i|q) / pi_old(o_i|q))^(1/|o_i|) = exp( 1/|o_i| sum_t log r_it )                       (Eq. 7)
    grad J   = E_q [ 1/G sum_i s_i A_i 1/|o_i| sum_t grad log pi_theta(o_it | q, o_i,<t) ]   (unclipped terms, Eq. 10)
    s_it     = sg[s_i] * pi_theta(o_it | q, o_i,<t) / sg[pi_theta(o_it | q, o_i,<t)]          (GSPO-token, Eq. 14)

    paper             code                        shape
    s_i               exp(log_s)                  (N, 1)    the masked mean of logp - old_logp over o_i, exponentiated
    s_it              exp(log_s) (token_form)     (N, T)    the value of s_i on every token, each token's own gradient
    |o_i|             mask.sum(-1)                (N,)      tokens of o_i that count (clamped to >= 1)
    eps_low/eps_high  clip_low / clip_high        float     3e-4 / 4e-4 (Sec. 5.1: orders of magnitude below GRPO's 0.2)
    sg[.]             .detach()
    (rest as grpo.py: R_i rewards (N,), A_i advantages (N,), logp/old_logp/ref_logp/mask (N, T); the paper omits
    the KL, beta = 0)

Where the paper leaves a choice, and what this file chooses (the peers as read in their code: verl = verl-project/verl
1dda039, 2026-08-22; TRL = huggingface/trl f2cd577, 2026-07-24; AReaL = areal-project/AReaL cbff54d, 2026-08-22;
their losses run beside this file's in tests/test_peers.py and tests/test_gspo.py):
  * Aggregation: Eq. 5 has one term per response and 1/G over them: grpo.py's seq-mean-token-mean, the sequence's
    loss broadcast over its tokens (whose mean returns it), then the mean over responses; the only length
    normalisation is inside s_i. verl forces this mode for GSPO; of TRL's clipped losses only loss_type="grpo" gives
    it (its default "dapo" weights each response by its length, as loss_agg="token-mean" does here: allowed, and
    named so).
    A response with no token in the loss (the overlong filter) leaves the mean; verl's trainer (its global batch
    size, every row of the mini-batch) and TRL (every row of the micro-batch) count it as 0 (`aggregate`).
  * The ratio: a masked mean over the tokens that count, no clamp on the log-ratio (TRL; verl clamps it at 10), the
    gradient through the mean (Eq. 10; TRL's importance_sampling_level="sequence"). token_form=True is GSPO-token,
    verl's only form: with one advantage per response its value, its clipping and its gradient are GSPO's (Eq. 17
    = Eq. 10; tests/test_gspo.py); it differs under per-token weights (below) and admits per-token advantages.
  * Inert on-policy: at mu = 1 the ratio is exactly 1, clipping cannot bind and the gradient is GRPO's (Eq. 10 vs
    11-12). The paper splits each rollout into 4 mini-batches (the gspo recipe: mu = 4). --rollout-lag 1 alone does not
    move it: the ratio is then pi_theta / pi_prox, 1 on the first update, and the staleness enters as the weight below.
  * Clip shares: clip_frac_* count TOKENS (of clipped responses), as the paper's Sec. 5.2 does (GSPO clips about two
    orders of magnitude more tokens than GRPO); seq_clip_frac_* count responses, as TRL's clip_ratio/* do here
    (TRL over every row, an emptied one included).
  * Composition: the dual clip (dual_clip_c) bounds a response's loss by c |A| (NeMo-RL, slime and AReaL apply it to
    the sequence ratio; the paper has none). token_weights (the engine's TIS weights; --rollout-lag's
    pi_prox/pi_behav) multiply the broadcast per-token loss, as verl does: the response's value is weighted by the
    mean of its tokens' weights, its gradient by that mean (token_form: by each token's own weight); TRL and verl's
    sequence-level rollout IS use the product of the token weights instead, AReaL their geometric mean. The overlong
    filter empties a response. C3PO's token budget is refused (--token-budget needs --algorithm c3po): a 1/Phi over
    tokens would weight responses by length, and a response cut by the budget would get the ratio of its first tokens.
"""
from __future__ import annotations

import torch

# The paper's settings, as train.py flags: its recipe in config.RECIPES runs these (a length or batch size scaled to
# the built-in task there, beside the paper's), so an edit here changes what `--recipe` runs.
PAPER = dict(
    clip_low=3e-4, clip_high=4e-4,  # GSPO change 2 (Eq. 5, Sec. 5.1): the sequence ratio clipped to [1 - 3e-4, 1 + 4e-4]
    loss_agg="seq-mean-token-mean",  # 1/G sum_i: one term per response, its ratio a token mean (Eq. 5, 7)
    kl_coef=0.0,  # GSPO change 2: no KL ("try to turn off the KL loss", the author's advice)
)

LOSS_AGG = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum")


def group_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (R_i - mean_group) / (std_group + eps); rewards (N,) hold consecutive groups of `group_size`."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group-relative baseline, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.to(torch.float64).view(-1, group_size)  # (B, G) statistics in float64, whatever the input dtype
    mean = r.mean(dim=1, keepdim=True)  # (B, 1)
    same = (r == r[:, :1]).all(dim=1, keepdim=True)  # (B, 1) all-equal groups
    adv = torch.where(same, torch.zeros_like(r), r - mean)  # exactly 0, not mean's rounding error (0.7 - mean(0.7s))
    if scale_by_std:
        adv = adv / (r.std(dim=1, unbiased=True, keepdim=True) + eps)  # all-equal group: 0 / eps = 0
    return adv.to(torch.float32).view(-1)  # (N,)


# GSPO change 0: none to the log-probs. grpo.token_logprobs computes every recipe's (the trainer runs it,
# trainer/logprobs.py), so this file carries no copy of it.


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, mask, clip_low: float = PAPER["clip_low"],
                      clip_high: float = PAPER["clip_high"], token_form: bool = False):
    """Per-response PPO-clip loss -min(s A, clip(s, 1-eps_low, 1+eps_high) A), broadcast over its tokens, and where each
    clip bound is active. GSPO change 1: the ratio is the response's s_i over the tokens of mask (N, T); advantages (N,)
    broadcast over T; token_form (GSPO change 3): GSPO-token.
    Returns loss (N, T), clipped_low (N, T) bool, clipped_high (N, T) bool, each constant along a row.
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    # GSPO change 1 (Sec. 4.1, Eq. 7): log s_i = masked mean of the token log-ratios, the gradient through the mean (Eq. 10)
    m = mask.to(logp.dtype)
    log_s = ((logp - old_logp) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)  # (N, 1)
    if token_form:  # GSPO change 3 (Sec. 4.3, Eq. 14): s_it = sg[s_i] pi_theta / sg[pi_theta]: s_i's value, a per-token path
        log_s = log_s.detach() + logp - logp.detach()  # (N, T)
    ratio = torch.exp(log_s).expand_as(logp)  # (N, T); exactly 1 on the first on-policy update
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    loss = -torch.min(unclipped, clipped)  # (N, T)
    clipped_low = (ratio < 1 - clip_low) & (adv < 0)  # the clip term is the active one in min()
    clipped_high = (ratio > 1 + clip_high) & (adv > 0)
    return loss, clipped_low, clipped_high


def dual_clip(loss_tok: torch.Tensor, advantages: torch.Tensor, c: float):
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729) on a per-token clipped loss (N, T): for A < 0 the loss is
    at most c * |A|, so a ratio far above 1 + eps on a negative advantage cannot push the loss up without bound.
    verl's compute_policy_loss_vanilla (clip_ratio_c, 3.0 by default, always on; 1dda039, 2026-08-22) and AReaL's
    ppo_actor_loss_fn (c_clip, off by default; cbff54d, 2026-08-22). Returns the loss and where the bound is active,
    (N, T) bool."""
    if not c > 1:
        raise ValueError(f"the dual-clip constant must be > 1, got {c}")
    adv = advantages.unsqueeze(-1).to(loss_tok.dtype).expand_as(loss_tok)  # (N, T)
    bound = -adv * c  # c * |A| where A < 0
    active = (adv < 0) & (loss_tok > bound)
    return torch.where(adv < 0, torch.minimum(loss_tok, bound), loss_tok), active


def aggregate(loss_tok: torch.Tensor, mask: torch.Tensor, mode: str, num_seqs: float | None = None, num_tokens: float | None = None):
    """Reduce a per-token loss (N, T) to a scalar.

    seq-mean-token-mean  1/num_seqs  * sum_i (sum_t m_it l_it / sum_t m_it)   GRPO, DeepSeekMath Eq. 3
    token-mean           1/num_tokens * sum_i sum_t m_it l_it                 DAPO Eq. 12 (mini-batch token mean)
    seq-mean-token-sum   1/num_seqs  * sum_i sum_t m_it l_it                  Dr. GRPO-style (no length normaliser)
    num_seqs / num_tokens default to this tensor's own counts; pass the mini-batch totals when it is a micro-batch.
    num_seqs counts the NON-EMPTY rows: a fully masked row (DAPO's overlong filter, C3PO's budget) leaves the loss and
    the mean. verl (1dda039, 2026-08-22) counts them only when given no global batch size; its trainer divides by
    every row of the mini-batch (num_seqs = all rows gives its number), and TRL (f2cd577, 2026-07-24) by all rows of
    the micro-batch: both shrink the others' gradient (grpo.py's module docstring).
    """
    mask = mask.to(loss_tok.dtype)
    if mode == "token-mean":
        denom = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
        return (loss_tok * mask).sum() / denom
    per_seq = (loss_tok * mask).sum(-1)  # (N,)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {LOSS_AGG}")
    denom = num_seqs if num_seqs is not None else (mask.sum(-1) > 0).sum().clamp(min=1)  # non-empty rows
    return per_seq.sum() / denom


def policy_loss(
    logp, old_logp, advantages, mask, ref_logp=None, *, clip_low=PAPER["clip_low"], clip_high=PAPER["clip_high"],
    kl_coef=PAPER["kl_coef"], loss_agg=PAPER["loss_agg"], num_seqs=None, num_tokens=None, token_weights=None,
    dual_clip_c=0.0,  # GSPO change 2: clip_low / clip_high are PAPER's
    token_form=False,  # GSPO change 3 (Sec. 4.3): GSPO-token
):
    """The loss to minimise (minus the objective above) and its metrics, for one (micro-)batch.

    Shapes: logp, old_logp, ref_logp, mask (N, T); advantages (N,). Returns (loss, metrics dict of floats).
    token_weights (N, T), detached, multiply the clipped surrogate per token (not the KL term): truncated
    importance sampling between the rollout engine and the trainer (async_rollout.tis_weights); None = all ones.
    dual_clip_c > 1 bounds the clipped loss of a negative advantage by c * |A| before the weights (`dual_clip`,
    verl's clip_ratio_c); 0 = off, and then the metrics have no `clip_frac_dual`.
    GSPO change 4: seq_clip_frac_low / _high, the clipped share of the responses with a token in the loss.
    TRL 1.16's default KL (use_bias_correction_kl=True) is k3 times s_i, not detached: beta * k3 * (s_i - 1) more than
    here, and a different gradient even at s_i = 1. Its loss_type="dr_grpo" is loss_agg="seq-mean-token-sum" with
    num_seqs = N x max_completion_length, N every row, emptied ones included (tests/test_gspo.py).
    """
    # GSPO change 1: the sequence ratio needs the mask
    loss_tok, clipped_low, clipped_high = clipped_surrogate(logp, old_logp, advantages, mask, clip_low, clip_high, token_form)
    dual = None
    if dual_clip_c:
        loss_tok, dual = dual_clip(loss_tok, advantages, dual_clip_c)
    if token_weights is not None:
        loss_tok = loss_tok * token_weights
    kl = None
    if kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp")
        kl = kl_k3(logp, ref_logp)  # (N, T)
        loss_tok = loss_tok + kl_coef * kl
    loss = aggregate(loss_tok, mask, loss_agg, num_seqs, num_tokens)
    m = mask.bool()
    n = m.sum().clamp(min=1)
    metrics = {
        "clip_frac_low": (clipped_low & m).sum().item() / n.item(),
        "clip_frac_high": (clipped_high & m).sum().item() / n.item(),
        "kl": (kl[m].mean().item() if kl is not None and m.any() else 0.0),
    }
    if dual is not None:
        metrics["clip_frac_dual"] = (dual & m).sum().item() / n.item()
    rows = m.any(-1)  # GSPO change 4 (Sec. 5.2): the clipped share of the responses (each row's flags are constant)
    n_rows = max(rows.sum().item(), 1)
    metrics["seq_clip_frac_low"] = (clipped_low[:, 0] & rows).sum().item() / n_rows
    metrics["seq_clip_frac_high"] = (clipped_high[:, 0] & rows).sum().item() / n_rows
    return loss, metrics
