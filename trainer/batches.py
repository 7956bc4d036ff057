"""Token rows for the trainer's forward passes: a Batch of [left-pad | prompt | response | right-pad] rows, the
micro-batches of a mini-batch (and a MicroBatch, what one's loss needs), and log pi_old of whole responses."""
from __future__ import annotations

from typing import NamedTuple

import torch

from trainer.logprobs import response_logprobs


class Batch(NamedTuple):
    """Rows of prompt + response tokens with the responses aligned at column `prompt_len` (P); B rows, R response columns."""
    input_ids: torch.Tensor  # (B, P+R) long, pad outside each row's prompt and response
    attention_mask: torch.Tensor  # (B, P+R) 1 on the row's real tokens
    position_ids: torch.Tensor  # (B, P+R) counting real tokens only, as `generate` does with left padding
    tokens: torch.Tensor  # (B, R) the response tokens (the log-probs' targets)
    mask: torch.Tensor  # (B, R) long, 1 on response tokens, 0 on padding
    prompt_len: int  # P


class MicroBatch(NamedTuple):
    """What one micro-batch's loss needs (train.update_policy, train.loss_inputs): its token rows and, per row, the
    rest (n rows)."""
    rows: Batch  # the token rows the policy's forward reads
    advantages: torch.Tensor  # (n,) A_i
    mask: torch.Tensor  # (n, R) the tokens that count (DAPO's overlong filter, C3PO's budget applied)
    old_logp: torch.Tensor | None  # (n, R) log pi_old of the sampled tokens; None on-policy (mu = 1: the ratio is 1)
    behav_logp: torch.Tensor | None  # (n, R) the sampling log-probs for truncated IS (--tis-cap), or None


def make_batch(tok, prompt_ids: list[list[int]], resp_ids: list[list[int]], device) -> Batch:
    """[left-pad | prompt | response | right-pad] rows with the response region aligned at column P.

    Position ids count real tokens only, as `generate` does with left padding, so the trainer's log-probs are
    those of the sampled sequence.
    """
    P, R = max(map(len, prompt_ids)), max(1, max(map(len, resp_ids)))
    pad = tok.pad_token_id
    ids = torch.full((len(prompt_ids), P + R), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompt_ids, resp_ids)):
        ids[i, P - len(p) : P] = torch.tensor(p)
        ids[i, P : P + len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, P - len(p) : P + len(r)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    resp_mask = attn[:, P:].clone()
    return Batch(ids.to(device), attn.to(device), pos.to(device), ids[:, P:].to(device), resp_mask.to(device), P)


def split_micro(mb: list[int], p_ids, r_ids, max_rows: int, max_tokens: int) -> list[list[int]]:
    """Micro-batches of mini-batch `mb` (response indices): chunks of `max_rows` in rollout order, or, with
    `max_tokens`, sorted by length and cut where one more row would make the padded batch (rows x (longest prompt +
    longest response), as make_batch pads) exceed `max_tokens`. The loss normalisers are the mini-batch's, so the
    split changes no gradient beyond float rounding; sorting stops one 64-token response from padding 255 short ones."""
    if not max_tokens:
        return [mb[c : c + max_rows] for c in range(0, len(mb), max_rows)] or [[]]
    out, cur, P, R = [], [], 0, 0
    for i in sorted(mb, key=lambda i: (len(r_ids[i]), len(p_ids[i]))):
        p, r = max(P, len(p_ids[i])), max(R, len(r_ids[i]))
        if cur and (len(cur) == max_rows or (len(cur) + 1) * (p + r) > max_tokens):
            out.append(cur)
            cur, p, r = [], len(p_ids[i]), len(r_ids[i])
        cur, P, R = cur + [i], p, r
    return out + [cur] if cur else out or [[]]


def pad_rows(rows: list, n_cols: int, device) -> torch.Tensor:
    """Per-response vectors of different lengths -> (n, n_cols) float32, zero-padded on the right."""
    out = torch.zeros(len(rows), n_cols, device=device)
    for j, r in enumerate(rows):
        out[j, : len(r)] = r if torch.is_tensor(r) else torch.tensor(r, device=device)
    return out


def old_logprobs(cfg, model, tok, p_ids, r_ids, device) -> list[torch.Tensor]:
    """log pi_old of each response's tokens, (len_i,) each: computed once before the first of mu > 1 updates."""
    out = []
    with torch.no_grad():
        for i in range(0, len(r_ids), cfg.micro_batch_size):
            j = min(len(r_ids), i + cfg.micro_batch_size)
            lp = response_logprobs(model, make_batch(tok, p_ids[i:j], r_ids[i:j], device), cfg.temperature,
                                   chunk_size=cfg.logprob_chunk)[0]
            out += [lp[k, : len(r_ids[i + k])] for k in range(lp.shape[0])]
    return out
