"""Per-token log-probs of the response without the (tokens x vocabulary) logits: the memory plumbing of the update.

The loss needs log pi(token) for each response token (grpo.token_logprobs: a log-softmax over the vocabulary). Done
the plain way, a micro-batch of B x (P + R) tokens holds B x (P + R) x V logits, their fp32 copy and softmax for the
backward: at Qwen2.5's V = 151,936, 2 x 1,280 tokens cost ~3 GB in fp32 before anything else. Here:

  * response_logprobs swaps the model's LM head for LogprobHead for one forward, so the model returns the
    response rows' [log-prob, entropy] instead of logits (transformers' logits_to_keep selects the positions);
  * LogprobHead computes them with chunked_token_logprobs, chunk_size rows of logits at a time, recomputed in the
    backward (_ChunkedHead, a torch.autograd.Function with the closed-form gradients).

Equal to the full-logits path (chunk_size 0) to float rounding: tests/test_memory.py checks values and gradients
against float64. This file is not part of any paper's method; grpo.py keeps the objective, this keeps memory.
"""
from __future__ import annotations

import torch

from grpo import token_logprobs


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
        acc_dtype = torch.promote_types(hidden.dtype, torch.float32)  # fp32 for bf16/fp16, fp64 stays fp64
        logp = torch.empty(hidden.shape[0], dtype=acc_dtype, device=hidden.device)
        ent = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
        w, b = _autocast_once(weight), _autocast_once(bias)
        for s in range(0, hidden.shape[0], chunk):
            z = _chunk_logits(hidden[s : s + chunk], w, b, temperature, acc_dtype)  # (c, V)
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
        acc_dtype = torch.promote_types(hidden.dtype, torch.float32)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        g_h = torch.empty_like(hidden) if need_h else None
        g_w = torch.zeros(weight.shape, dtype=acc_dtype, device=weight.device) if need_w else None  # summed over chunks
        g_b = torch.zeros(weight.shape[0], dtype=acc_dtype, device=weight.device) if need_b and bias is not None else None
        if g_ent is not None and g_ent.numel() == 0:
            g_ent = None
        if g_logp is None:
            g_logp = torch.zeros(hidden.shape[0], dtype=acc_dtype, device=hidden.device)
        w, b = _autocast_once(weight), _autocast_once(bias)
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            z, z_dtype = _chunk_logits(h, w, b, T, acc_dtype, with_dtype=True)  # (c, V), recomputed
            p = torch.softmax(z, dim=-1)
            gl = g_logp[s : s + chunk, None].to(acc_dtype)  # (c, 1)
            if g_ent is not None:  # grad = -g_H p (z - E_p z) - g_logp p, built in place in z
                ge = g_ent[s : s + chunk, None].to(acc_dtype)
                grad = z.sub_((p * z).sum(-1, keepdim=True)).mul_(p).mul_(-ge).sub_(p.mul_(gl))
            else:
                grad = p.mul_(-gl)
            grad.scatter_add_(-1, tokens[s : s + chunk, None], gl)  # + g_logp at the sampled token
            grad = grad.div_(T).to(z_dtype)  # d/d(unscaled logits), in the matmul's dtype (as autograd would)
            if need_h:
                g_h[s : s + chunk] = grad @ w
            if need_w:
                g_w += (grad.T @ h).to(acc_dtype)
            if g_b is not None:
                g_b += grad.sum(0).to(acc_dtype)
        g_w = g_w.to(weight.dtype) if g_w is not None else None
        g_b = g_b.to(bias.dtype) if g_b is not None else None
        return g_h, g_w, g_b, None, None, None, None


def _autocast_once(t):
    """Under autocast, the cast each chunk's matmul would make of the LM-head weight (bias), made once for all chunks:
    inside an autograd.Function autocast keeps no cast cache, and at a 49k x 576 head the casts cost as much as the
    matmuls. The same rounding, so the same numbers; outside autocast `t` itself."""
    if t is None or not t.is_floating_point() or not torch.is_autocast_enabled(t.device.type):
        return t
    return t.to(torch.get_autocast_dtype(t.device.type))


def _chunk_logits(h, weight, bias, temperature, acc_dtype, with_dtype=False):
    z = h @ weight.T if bias is None else torch.addmm(bias, h, weight.T)  # (c, V): model's dtype, or autocast's
    out = z.to(acc_dtype).div_(temperature)
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
    (verl's fused kernels, LinearCrossEntropy from hidden states and the LM-head weight, and Liger's fused linear
    cross-entropy do the same; TRL's own selective_log_softmax (docs/peers.md) loops over rows
    to avoid a full log-softmax copy, but takes the model's full logits: TRL avoids them only through Liger.)
    """
    shape = tokens.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    logp, ent = _ChunkedHead.apply(h, weight, bias, tokens.reshape(-1), float(temperature), with_entropy, int(chunk_size))
    return logp.view(shape), (ent.view(shape) if with_entropy else None)


def response_logprobs(model, batch, temperature: float, with_entropy: bool = False, chunk_size: int = 256):
    """Per-token log-probs (and entropy) of the response tokens (B, R): the hidden state at t-1 predicts token t.

    chunk_size > 0: the model runs with its LM head swapped for `LogprobHead` (the response rows that count, in
    chunks of chunk_size recomputed in the backward: chunked_token_logprobs), so the (B, P+R, V) logits never
    exist; padded positions get 0. chunk_size 0: the full logits and grpo.token_logprobs (the reference).
    The swap is seen inside the wrapper's forward (DDP, FSDP2), where the LM-head weight is the gathered one.
    """
    ids, attn, pos, resp, P = batch.input_ids, batch.attention_mask, batch.position_ids, batch.tokens, batch.prompt_len
    if not chunk_size:
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits  # (N, P+R, V)
        return token_logprobs(logits[:, P - 1 : -1], resp, temperature, with_entropy)  # (N, R)
    base = getattr(model, "module", model)  # DDP keeps the model in .module; FSDP2 shards it in place
    base = base.get_base_model() if hasattr(base, "get_base_model") else base  # LoRA: the transformers model in peft's
    name = next(n for n, m in base.named_children() if m is base.get_output_embeddings())
    head = getattr(base, name)
    setattr(base, name, LogprobHead(head, resp, batch.mask, temperature, with_entropy, chunk_size))
    try:
        keep = torch.arange(P - 1, P - 1 + resp.shape[1], device=ids.device)  # the positions that predict the response
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep, use_cache=False).logits
    finally:
        setattr(base, name, head)
    return out[..., 0], (out[..., 1] if with_entropy else None)


class LogprobHead(torch.nn.Module):
    """Stands in for the LM head for one forward: (B, R, H) response hidden states -> (B, R, 2) [log-prob, entropy]."""

    def __init__(self, head, tokens, mask, temperature, with_entropy, chunk_size):
        super().__init__()
        self.head, self.tokens, self.mask = head, tokens, mask.bool()
        self.temperature, self.with_entropy, self.chunk_size = temperature, with_entropy, chunk_size

    def forward(self, hidden):
        m = self.mask
        lp, ent = chunked_token_logprobs(hidden[m], self.head.weight, self.tokens[m], self.head.bias,
                                              self.temperature, self.with_entropy, self.chunk_size)
        lp = lp.new_zeros(m.shape).masked_scatter(m, lp)  # (B, R), 0 on padding
        ent = lp.new_zeros(m.shape).masked_scatter(m, ent) if self.with_entropy else torch.zeros_like(lp)
        return torch.stack([lp, ent], dim=-1)
