"""GRPO: group-relative policy optimisation (DeepSeekMath, arXiv 2402.03300, Sec. 4.1), the core of all five recipes.

The objective maximised for a prompt q with G sampled responses o_1..o_G (DeepSeekMath Eq. 3; DAPO Eq. 9-10,
Skywork-OR1 Eq. 2.5, MiMo Eq. 2 and Ring-lite Sec. 3.1 all start from it):

    J(theta) = E_q [ 1/G sum_i 1/|o_i| sum_t ( min( r_it * A_i , clip(r_it, 1-eps, 1+eps) * A_i ) - beta * D_KL,it ) ]

    r_it    = pi_theta(o_it | q, o_i,<t) / pi_theta_old(o_it | q, o_i,<t)          (importance ratio)
    A_i     = (R_i - mean(R_1..R_G)) / (std(R_1..R_G) + delta)                       (group-relative advantage)
    D_KL,it = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1                             (k3 estimator, always >= 0)

Symbol table (B prompts, G samples per prompt, N = B*G responses, T response tokens, V vocabulary):

    paper             code                        shape
    R_i               rewards                     (N,)      grouped as consecutive runs of G
    A_i               advantages                  (N,)      broadcast over the tokens of o_i
    log pi_theta      logp                        (N, T)
    log pi_theta_old  old_logp                    (N, T)
    log pi_ref        ref_logp                    (N, T)
    1[t < |o_i|]      mask                        (N, T)    1 on response tokens that count, 0 on pad
    eps               clip_low (= clip_high)      float     0.2
    beta              kl_coef                     float     0 in DAPO / Skywork / MiMo / Compass, 1e-3 in Ring-lite
    delta             eps                         float     1e-6 (verl), added to the std
    tau               temperature                 float     the sampling temperature; logits are divided by it

Where the code departs from (or chooses within) the paper:
  * std is the unbiased (N-1) sample std plus eps=1e-6, as verl and Skywork-OR1's code do; no paper says
    which. A group whose rewards are all equal gets exactly A = 0 on every token, never NaN and never the
    rounding error of R - mean(R) (in float32 a group of 0.7s gave +0.06 after dividing by std + 1e-6).
    Mean and std are computed in float64 and the advantages returned in float32 (the loss's dtype). `scale_by_std=False`
    gives Dr. GRPO's (arXiv 2503.20783) mean-only advantage.
  * The ratio is exactly 1 on the first update of an on-policy step: old_logp is the current policy's
    log-prob, detached. The loss value is then -mean(A) (about 0) but its gradient is A * grad log pi, the
    REINFORCE gradient; clipping can only bite on the 2nd..mu-th update of a rollout (tests/test_grpo.py).
  * Loss aggregation is named for what it computes (`LOSS_AGG`): GRPO is `seq-mean-token-mean`
    (1/G sum_i 1/|o_i| sum_t). Its denominators can be passed in (`num_seqs`, `num_tokens`) so that a
    mini-batch split into micro-batches, or across processes, is normalised once, globally. The sequence mean is
    over responses with at least one token in the loss: a response whose tokens are all masked (DAPO's overlong
    filter, C3PO's budget) is left out of the numerator and the denominator, as verl's agg_loss does; TRL divides
    by all rows (the masked ones count as zero loss, scaling the others' gradient down).
  * KL uses the k3 estimator in the loss (not in the reward), as DeepSeekMath Eq. 4.
  * Log-probs and entropy are computed from logits / temperature (Skywork-OR1's dp_actor does this), so
    they are the log-probs of the distribution the engine actually sampled from.
"""
from __future__ import annotations

import torch

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


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False):
    """log pi(token_t) under softmax(logits / temperature), and optionally the full-vocabulary entropy.

    logits (N, T, V) are the scores that predict tokens (N, T) (already shifted by one position).
    Returns logp (N, T) and entropy (N, T) or None. Equals minus HF's per-token cross-entropy at tau = 1.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # (N, T, V), >= fp32
    logz = torch.logsumexp(logits, dim=-1)  # (N, T)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - logz  # (N, T)
    ent = None
    if with_entropy:
        p = torch.softmax(logits, dim=-1)  # (N, T, V)
        ent = logz - (p * logits).sum(-1)  # H = logZ - E_p[logit]  (N, T)
    return logp, ent


class _ChunkedHead(torch.autograd.Function):
    """logp and entropy of `tokens` under softmax((hidden @ weight.T + bias) / T), a chunk of rows at a time.

    Forward keeps only (M,) results; backward recomputes each chunk's logits. Gradients, per row, with z the
    tempered logits, p = softmax(z), y the token:  d logp / dz = onehot(y) - p,  d H / dz = -p * (z - E_p[z]).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, with_entropy, chunk):
        ctx.save_for_backward(hidden, weight, bias, tokens)
        ctx.temperature, ctx.chunk = temperature, chunk
        dev = hidden.device.type  # under autocast (bf16 mixed precision) the backward recomputes as the forward did
        ctx.autocast = (dev, torch.get_autocast_dtype(dev), torch.is_autocast_enabled(dev))
        ctx.set_materialize_grads(False)  # an output the loss does not use (the logged entropy) gets None: no work
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 for bf16/fp16, fp64 stays fp64
        logp = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        ent = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
        for s in range(0, hidden.shape[0], chunk):
            z = _chunk_logits(hidden[s : s + chunk], weight, bias, temperature, acc)  # (c, V)
            logz = torch.logsumexp(z, dim=-1)  # (c,)
            logp[s : s + chunk] = z.gather(-1, tokens[s : s + chunk, None]).squeeze(-1) - logz
            if with_entropy:  # H = logZ - E_p[z]: one more pass over the chunk
                ent[s : s + chunk] = logz - (torch.softmax(z, dim=-1) * z).sum(-1)
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        dev, dtype, enabled = ctx.autocast
        with torch.autocast(dev, dtype=dtype, enabled=enabled):
            return _ChunkedHead._backward(ctx, g_logp, g_ent)

    @staticmethod
    def _backward(ctx, g_logp, g_ent):
        hidden, weight, bias, tokens = ctx.saved_tensors
        T, chunk = ctx.temperature, ctx.chunk
        acc = torch.promote_types(hidden.dtype, torch.float32)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        g_h = torch.empty_like(hidden) if need_h else None
        g_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None  # summed over chunks
        g_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b and bias is not None else None
        if g_ent is not None and g_ent.numel() == 0:
            g_ent = None
        if g_logp is None:
            g_logp = torch.zeros(hidden.shape[0], dtype=acc, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            z, z_dtype = _chunk_logits(h, weight, bias, T, acc, with_dtype=True)  # (c, V), recomputed
            p = torch.softmax(z, dim=-1)
            gl = g_logp[s : s + chunk, None].to(acc)  # (c, 1)
            if g_ent is not None:  # grad = -g_H p (z - E_p z) - g_logp p, built in place in z
                ge = g_ent[s : s + chunk, None].to(acc)
                grad = z.sub_((p * z).sum(-1, keepdim=True)).mul_(p).mul_(-ge).sub_(p.mul_(gl))
            else:
                grad = p.mul_(-gl)
            grad.scatter_add_(-1, tokens[s : s + chunk, None], gl)  # + g_logp at the sampled token
            grad = grad.div_(T).to(z_dtype)  # d/d(unscaled logits), in the matmul's dtype (as autograd would)
            if need_h:
                g_h[s : s + chunk] = grad @ weight
            if need_w:
                g_w += (grad.T @ h).to(acc)
            if g_b is not None:
                g_b += grad.sum(0).to(acc)
        g_w = g_w.to(weight.dtype) if g_w is not None else None
        g_b = g_b.to(bias.dtype) if g_b is not None else None
        return g_h, g_w, g_b, None, None, None, None


def _chunk_logits(h, weight, bias, temperature, acc, with_dtype=False):
    z = h @ weight.T if bias is None else torch.addmm(bias, h, weight.T)  # (c, V): model's dtype, or autocast's
    out = z.to(acc).div_(temperature)
    return (out, z.dtype) if with_dtype else out


def chunked_token_logprobs(hidden, weight, tokens, bias=None, temperature: float = 1.0, with_entropy: bool = False,
                           chunk_size: int = 256):
    """`token_logprobs` of the LM head's logits, without ever holding more than `chunk_size` rows of them.

    hidden (..., H) are the final hidden states that predict tokens (...); weight (V, H) and bias (V,) are the LM
    head's. Returns logp (...) and entropy (...) or None, equal to token_logprobs(hidden @ weight.T + bias, ...).
    Memory: the (..., V) logits, their fp32 copy and softmax (what autograd keeps for the backward of the
    full-logits path) never exist; the forward keeps hidden and the (...,) results, the backward recomputes one
    (chunk_size, V) block at a time (a second LM-head matmul per chunk: ~1/3 more LM-head FLOPs). Choices:
      * logits are computed in the model's dtype (bf16 on GPU) and upcast to fp32 for the softmax, as the full path
        does; the LM-head weight gradient is summed over chunks in fp32 and cast once at the end.
      * the entropy costs one more softmax pass per chunk in the forward, and a few more elementwise ops in the
        backward only when its gradient is used (an entropy bonus); logging it alone adds no backward work.
      * rows are whatever the caller passes: callers drop prompt and padding positions before calling.
    (TRL's chunked log-softmax, verl's fused kernels and Liger's fused linear cross-entropy do the same.)
    """
    shape = tokens.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    logp, ent = _ChunkedHead.apply(h, weight, bias, tokens.reshape(-1), float(temperature), with_entropy, int(chunk_size))
    return logp.view(shape), (ent.view(shape) if with_entropy else None)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman, 2020)."""
    d = ref_logp - logp  # (N, T)
    return torch.exp(d) - d - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low: float = 0.2, clip_high: float = 0.2):
    """Per-token PPO-clip loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and where each clip bound is active.

    advantages (N,) broadcast over T. GRPO uses a symmetric eps: clip_low == clip_high.
    Returns loss (N, T), clipped_low (N, T) bool, clipped_high (N, T) bool.
    """
    adv = advantages.unsqueeze(-1)  # (N, 1)
    ratio = torch.exp(logp - old_logp)  # (N, T); exactly 1 on the first on-policy update
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    loss = -torch.min(unclipped, clipped)  # (N, T)
    clipped_low = (ratio < 1 - clip_low) & (adv < 0)  # the clip term is the active one in min()
    clipped_high = (ratio > 1 + clip_high) & (adv > 0)
    return loss, clipped_low, clipped_high


def aggregate(loss_tok: torch.Tensor, mask: torch.Tensor, mode: str, num_seqs: float | None = None, num_tokens: float | None = None):
    """Reduce a per-token loss (N, T) to a scalar.

    seq-mean-token-mean  1/num_seqs  * sum_i (sum_t m_it l_it / sum_t m_it)   GRPO, DeepSeekMath Eq. 3
    token-mean           1/num_tokens * sum_i sum_t m_it l_it                 DAPO Eq. 12 (mini-batch token mean)
    seq-mean-token-sum   1/num_seqs  * sum_i sum_t m_it l_it                  Dr. GRPO-style (no length normaliser)
    num_seqs / num_tokens default to this tensor's own counts; pass the mini-batch totals when it is a micro-batch.
    num_seqs counts the NON-EMPTY rows: a fully masked row (DAPO's overlong filter, C3PO's budget) leaves the loss and
    the mean, as verl's agg_loss does (seq_mask); TRL divides by all rows, which shrinks the others' gradient.
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
    denom = num_seqs if num_seqs is not None else (mask.sum(-1) > 0).sum().clamp(min=1)  # non-empty rows (verl)
    return per_seq.sum() / denom


def policy_loss(
    logp, old_logp, advantages, mask, ref_logp=None, *, clip_low=0.2, clip_high=0.2, kl_coef=0.0,
    loss_agg="seq-mean-token-mean", num_seqs=None, num_tokens=None, token_weights=None,
):
    """GRPO loss to minimise (minus the objective above) and its metrics, for one (micro-)batch.

    Shapes: logp, old_logp, ref_logp, mask (N, T); advantages (N,). Returns (loss, metrics dict of floats).
    token_weights (N, T), detached, multiply the clipped surrogate per token (not the KL term): truncated
    importance sampling between the rollout engine and the trainer (rollout.tis_weights); None = all ones.
    """
    loss_tok, clipped_low, clipped_high = clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high)
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
    return loss, metrics
