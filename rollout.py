"""Generation (step 2): G completions per prompt, with the fields the trainer needs, from one of three engines.

Conventions every engine keeps
  * One interface (`Engine.generate`, `Engine.sync_weights`; engines/base.py) for every engine; the trainer never
    knows which one runs. `make_engine` builds one: 'hf' (`HFEngine`: the training model itself through
    `transformers`' `generate`, the readable reference the other engines are tested against), 'fast' (`FastEngine`:
    HFEngine's samples token for token, same seed, same samples, from a plain decode loop; engines/hf.py), 'vllm'
    (`VLLMEngine`: vLLM colocated in the training process, plus per-token sampling log-probs and a weight sync after
    each optimizer step; streaming for MiMo's seamless rollout; engines/vllm_engine.py).
  * Batched and left-padded; sampling with temperature and top-p only. Model-side defaults that would change
    the sampling distribution (a `generation_config.json` with top_k=20 or a repetition penalty, as Qwen ships)
    are switched off explicitly: the trainer's log-probs must be those of the distribution that was sampled.
  * temperature 0 means greedy decoding (evaluation).
  * Where a response ends: one rule for every engine (engines/stops.py): the first stop token (EOS, the model's
    generation_config EOS ids, the chat template's end of turn) or a stop string; the stop token stays in
    `token_ids`, `truncated` when neither came within `max_new_tokens`.
  * A model vocabulary larger than the tokenizer's (Qwen2.5: 151,936 embedding rows for 151,665 tokens) is sampled
    whole, as vLLM and `generate` sample it and as the trainer's log-softmax normalises it: the policy is the
    model's distribution over every row. An id beyond the tokenizer decodes to nothing (the reward never sees it)
    and stays in `token_ids` (the trainer scores it, `length` counts it). Masking those rows in the engines only
    would make the sampling distribution differ from the trainer's by log(1 - p_extra) per token: 0.009 on the
    tiny model (27 of its 128 rows are beyond its tokenizer), measured against vLLM's processed log-probs.
  * The model the engines generate with is loaded by engines/loading.py (`load_model`).
  * The engine's log-probs differ a little from the trainer's (its own kernels): the weight that corrects for it is
    async_rollout.tis_weights, a term of the loss.
"""
from __future__ import annotations

from engines.base import Completion, Engine, SamplingParams  # noqa: F401  (the interface: rollout.SamplingParams)
from engines.hf import FastEngine, HFEngine
from engines.vllm_engine import VLLMEngine


def auto_engine(device_type: str) -> str:
    """--rollout auto: 'fast' on the CPU, 'hf' on a GPU, the faster of the two where each was measured
    (bench/generation.py on the CPU, bench/gpu_check.py on a GPU; the figures: docs/speed.md). On a GPU both are
    launch-bound (a decode step's kernels take less time than the host needs to launch them), generate launches
    fewer, and train.py's steps were faster with it."""
    return "hf" if device_type == "cuda" else "fast"


def make_engine(name: str, model, tokenizer, **kw) -> Engine:
    """'hf' or 'fast' (keywords used: max_batch, dtype; 'fast' also draw) or 'vllm' (model_path required: the
    checkpoint the training model was loaded from, e.g. the resumed checkpoint; gpu_memory_utilization, enable_sleep,
    seed, max_model_len, dtype, ...). dtype None: the policy's. 'auto' is `auto_engine`'s choice for the model's
    device. Keywords meant for the other engine are ignored."""
    if name == "auto":
        name = auto_engine(next(model.parameters()).device.type)
    if name in ("hf", "fast"):
        used = ("max_batch", "dtype") + (("draw",) if name == "fast" else ())
        return (HFEngine if name == "hf" else FastEngine)(model, tokenizer, **{k: v for k, v in kw.items() if k in used})
    if name == "vllm":
        kw = {k: v for k, v in kw.items() if k not in ("max_batch", "draw")}
        if not kw.get("model_path"):
            raise ValueError("rollout engine 'vllm' needs model_path (a local checkpoint directory or hub id)")
        return VLLMEngine(model, tokenizer, kw.pop("model_path"), **kw)
    raise ValueError(f"unknown rollout engine {name!r}; expected 'hf', 'fast' or 'vllm'")
