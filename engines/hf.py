"""The engines that generate with the training model itself, through transformers: `HFEngine` (`generate`: the
readable reference the other engines are tested against) and `FastEngine` (HFEngine's samples token for token, same
seed, same samples, from a plain decode loop that drops finished rows and runs each prompt's prefill once for its n
samples).
"""
from __future__ import annotations

import copy

import torch

from engines.base import Completion, Engine, SamplingParams
from engines.stops import finish, generation_config_of, stop_token_ids


class HFEngine(Engine):
    """dtype None: generates with the training model itself (nothing to copy). dtype torch.bfloat16 (--rollout-dtype
    bfloat16): with a plain copy of it in bf16, its weights copied in by every sync_weights (a LoRA policy's merged:
    trainer.lora.MergedWeights) -- the weights bf16 autocast's matmuls see, without casting them at every decode step."""

    def __init__(self, model, tokenizer, max_batch: int = 512, dtype=None):
        self.tok, self.max_batch, self.dtype = tokenizer, max_batch, dtype
        self.stops = stop_token_ids(tokenizer, generation_config_of(model))
        self.model = None if dtype else model
        if dtype:
            self.sync_weights(model)

    def sync_weights(self, model) -> None:
        if not self.dtype:
            self.model = model  # generates with the training model itself: nothing to copy
            return
        if self.model is None:  # the copy: the policy's architecture, built once
            from transformers import AutoModelForCausalLM

            src = next(model.parameters())
            config = copy.deepcopy(model.config)  # (from_config sets the attention on the config it is given)
            with torch.device(src.device):  # attention: transformers' choice (a policy's eager is slower decoding)
                self.model = AutoModelForCausalLM.from_config(config, dtype=self.dtype, attn_implementation=None)
            self.model.generation_config = model.generation_config
            self.model.eval().requires_grad_(False)
        mine = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, p in model.named_parameters():
                mine.pop(name).copy_(p)
        if mine:  # a weight the source does not have would stay at its random initialisation
            raise RuntimeError(f"rollout copy: no source for {sorted(mine)[:3]}")

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        tok, pad = self.tok, self.tok.pad_token_id
        flat = [p for p in prompts for _ in range(n)]  # prompt-major: completions of a prompt are consecutive
        was_training = self.model.training
        self.model.eval()
        out: list[Completion] = []
        device = next(self.model.parameters()).device
        greedy = params.temperature == 0
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.stop:
            kw.update(stop_strings=list(params.stop), tokenizer=tok)
        for s in range(0, len(flat), self.max_batch):
            chunk = flat[s : s + self.max_batch]
            enc = tok(chunk, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False).to(device)
            gen = self.model.generate(
                **enc, max_new_tokens=params.max_new_tokens, eos_token_id=self.stops, pad_token_id=pad,
                repetition_penalty=1.0, **kw,
            )
            resp = gen[:, enc["input_ids"].shape[1] :].tolist()  # (b, <= max_new_tokens)
            out += [finish(tok, ids, self.stops, params.stop) for ids in resp]
            if self.progress is not None:
                self.progress([(s + i, ids) for i, ids in enumerate(resp)])
        if was_training:
            self.model.train()
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]


class FastEngine(HFEngine):
    """HFEngine's samples, token for token, from a plain decode loop instead of `generate`.

    The same forward calls as `generate` makes (left-padded prompt, position ids counting real tokens, a
    `DynamicCache`, logits of the last position only), the same warpers (transformers' own temperature and top-p
    classes, top-k off) and the same random draws, with less work around them:
      * Finished rows leave the batch. `generate` keeps decoding a row after its EOS (feeding it padding) until
        every row is done; here the row and its KV cache are dropped, so the batch shrinks as answers end.
      * The draw is `torch.multinomial`'s own, made explicit: for one sample per row it is
        argmax(probs / q) with q ~ Exp(1) drawn for every row of the batch (torch 2.13, ATen `multinomial`).
        q is drawn for the full batch, finished rows included, so the random stream advances exactly as in
        `generate` and every surviving row gets the same draw it would have got there.
      * The prompt is run once for its n samples: the prefill computes the distinct prompts, and the KV cache
        is then copied out to one row per sample (a row's keys and values do not depend on the other rows).
      * Each Completion carries `logprobs`: the log-prob of every sampled token under the distribution it was drawn
        from (after temperature and top-p, as vLLM's processed_logprobs), read off the logits the loop already has.
        --rollout-lag's producer takes them as pi_behav instead of a second forward pass over the batch.
      * No per-token logits processors, stopping criteria or output bookkeeping beyond the above.
      * `check_every` (k, default 1): the decode steps between two reads of the batch back to the host. At k = 1
        every step checks which rows ended and drops them (no step is spent on an ended row). At k > 1 the rows that
        end (a stop token) are marked on the device, their later samples are not written, and the host checks (stop strings, the progress callback, dropping rows, stopping when all ended)
        every k steps only; the decode steps in between also pass their attention mask ready-made (4D, as
        transformers builds it for one query token), since transformers' own mask builder reads the padding mask
        back to the host at every call to decide whether a mask is needed. On a GPU a read-back waits for every queued
        kernel, so a check per token keeps the GPU idle while the host prepares the next step. Up to k - 1 steps run
        after the last row ended; their draws are undone (the generator's state, kept per step on the host, is put
        back to the one after the last row's draw), so the random stream ends where `generate` leaves it. The samples
        do not depend on k (tests/test_gpu_path.py: k = 5 and 16 give HFEngine's samples token for token on the CPU;
        their log-probs equal k = 1's to float rounding). On an H100 k = 16 did not pay and HF generate was faster
        than either (bench/gpu_check.py; docs/speed.md), so `--rollout auto` picks it on a GPU (rollout.auto_engine).
    Same seed, same samples as HFEngine (draw "multinomial", the default; "inverse-cdf" samples the same
    distribution with other draws: inverse_cdf): `tests/test_rollout.py` checks it token for token (sampled and greedy,
    top-p included). The equality rests on two facts the test would catch if a torch or transformers release
    changed them: multinomial's draw as above, and a row's logits not depending on which other rows share its
    batch (true for the CPU kernels here; on a GPU, matmul kernels may pick other tilings for other batch sizes,
    so samples can differ in the last bits of the logits: the distribution sampled is the same).
    """

    check_every: int = 1  # decode steps per host check (above)

    def __init__(self, model, tokenizer, max_batch: int = 512, dtype=None, draw: str = "multinomial"):
        super().__init__(model, tokenizer, max_batch, dtype)
        self.draw = draw  # "multinomial" (generate's draw, above) or "inverse-cdf" (inverse_cdf: other samples)

    @torch.inference_mode()
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        from transformers import DynamicCache
        from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

        tok, pad = self.tok, self.tok.pad_token_id
        model = self.model
        flat = [p for p in prompts for _ in range(n)]
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        greedy = params.temperature == 0
        warpers = []  # as generate builds them: temperature, then top-p; top-k off
        if not greedy and params.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(params.temperature))
        if not greedy and params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(params.top_p))
        out: list[Completion] = []
        for s in range(0, len(flat), self.max_batch):
            chunk = flat[s : s + self.max_batch]
            uniq = list(dict.fromkeys(chunk))  # the n samples of a prompt share its prefill
            inv = torch.tensor([uniq.index(p) for p in chunk], device=device) if len(uniq) < len(chunk) else None
            enc = tok(uniq, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False).to(device)
            attn = enc["attention_mask"]
            pos = (attn.long().cumsum(-1) - 1).masked_fill(attn == 0, 0)  # generate's position ids for left padding
            cache = DynamicCache(config=model.config.get_text_config(decoder=True))
            b = len(chunk)
            resp = torch.full((b, params.max_new_tokens), pad, dtype=torch.long, device=device)
            resp_lp = torch.zeros((b, params.max_new_tokens), device=device)  # log-prob of each sampled token
            rows = torch.arange(b, device=device)  # batch rows still generating
            x = enc["input_ids"]
            stops = torch.tensor(self.stops, device=device)
            window = max((len(s) for s in params.stop), default=0) + 1  # tokens that can hold a stop string's end
            k = self.check_every  # decode steps per host check
            alive = torch.ones(b, dtype=torch.bool, device=device)  # rows of the batch not yet ended
            gen = torch.cuda.default_generators[device.index or 0] if device.type == "cuda" else torch.default_generator
            drawn = {}  # k > 1: the random state after each step's draw since the last check
            for t in range(params.max_new_tokens):
                mask = attn if t == 0 or k == 1 else attn[:, None, None, :].bool()  # k > 1: the 4D mask, prepared
                logits = model(input_ids=x, past_key_values=cache, position_ids=pos, attention_mask=mask,
                               logits_to_keep=1, use_cache=True, return_dict=True).logits[:, -1, :].float()
                if t == 0 and inv is not None:  # one row per sample from here on
                    logits, attn, pos = logits[inv], attn[inv], pos[inv]
                    cache.batch_select_indices(inv)
                if greedy:
                    nxt = logits.argmax(-1)
                else:
                    for w in warpers:
                        logits = w(None, logits)
                    probs = torch.softmax(logits, dim=-1)
                    if self.draw == "multinomial":
                        q = torch.empty((b, probs.shape[-1]), device=device).exponential_(1)  # multinomial's, all b rows
                        nxt = (probs / q[rows]).argmax(-1)
                    else:
                        nxt = inverse_cdf(probs, torch.rand(b, device=device, dtype=torch.float64)[rows])
                    if k > 1:
                        drawn[t] = gen.get_state()  # host-side (a CUDA generator's seed and offset): no read-back
                lp = torch.log_softmax(logits, dim=-1).gather(-1, nxt[:, None]).squeeze(-1)
                if k == 1:  # every row here is alive (the finished ones left at the last step)
                    resp[rows, t], resp_lp[rows, t] = nxt, lp
                else:  # a row that ended since the last check keeps its tokens: the later samples are not written
                    resp[rows, t] = torch.where(alive, nxt, pad)
                    resp_lp[rows, t] = torch.where(alive, lp, 0.0)
                alive &= ~torch.isin(nxt, stops)
                if (t + 1) % k and t + 1 < params.max_new_tokens:
                    x = nxt[:, None]  # no host check this step: nothing is read back
                    attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
                    pos = pos[:, -1:] + 1
                    continue
                if params.stop:  # a row whose tokens since the last check complete a stop string is done too
                    tails = resp[rows, max(0, t + 1 - window - (k - 1)) : t + 1].tolist()
                    done = [any(s in tok.decode(tail, skip_special_tokens=False) for s in params.stop) for tail in tails]
                    alive &= ~torch.tensor(done, device=device)
                if self.progress is not None and not bool(alive.all()):
                    ended = rows[~alive].tolist()
                    self.progress([(s + r, resp[r, : t + 1].tolist()) for r in ended])
                if not bool(alive.all()):  # drop finished rows (and their KV cache)
                    keep = alive.nonzero().squeeze(1)
                    if keep.numel() == 0:
                        if drawn:  # the steps after the last row ended drew numbers generate never draws: undone
                            last = max(finish(tok, ids, self.stops, params.stop).length for ids in resp[rows].tolist())
                            gen.set_state(drawn[last - 1])
                        break
                    rows, nxt, attn, pos, alive = rows[keep], nxt[keep], attn[keep], pos[keep], alive[keep]
                    cache.batch_select_indices(keep)
                drawn.clear()
                x = nxt[:, None]
                attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
                pos = pos[:, -1:] + 1
            else:  # the rows that ran out of tokens (truncated)
                if self.progress is not None:
                    self.progress([(s + r, resp[r].tolist()) for r in rows.tolist()])
            out += [finish(tok, ids, self.stops, params.stop, lps) for ids, lps in zip(resp.tolist(), resp_lp.tolist())]
        if was_training:
            model.train()
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of probs (n, V), drawn with one uniform u (n,) in [0, 1) each: the first token whose
    cumulative probability (float64) exceeds u * total. The distribution multinomial samples, from n random numbers
    instead of multinomial's n x V exponentials (--draw inverse-cdf; what it saves: docs/speed.md). The cumulative sum
    rises only at tokens of positive probability, so no zero-probability token (top-p's cut) can come out."""
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    v = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))  # below the total
    return torch.searchsorted(cdf, v, right=True).squeeze(-1)
