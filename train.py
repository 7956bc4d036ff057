"""GRPO-family RL for math reasoning: one loop, driven by Accelerate, every knob on the command line.

    python train.py                                   # tiny model, built-in task, CPU: learns in minutes
    bash examples/qwen2.5-0.5b-instruct-gsm8k.sh      # a real model on one GPU (examples/: the runs and their settings)
    accelerate launch --num_processes 8 train.py ...  # the same file on N processes (DDP), unchanged
    python train.py --output-dir runs/default --resume auto   # continue a run (its settings come from its checkpoint)
    python train.py --recipe dapo --output-dir runs/dapo   # a paper's recipe (grpo dapo c3po skywork mimo compass)
    python train.py --reward code-soft --train-data builtin-code --output-dir runs/code   # code RL, built-in code task
    python train.py --recipe c3po --output-dir runs/c3po   # Ring-lite: math, then code, in one run (--stages)
    python train.py --help                            # every option, with its meaning

The loop (DeepSeekMath Alg. 1, as the seed papers run it), one iteration per `step`:
  1. sample B prompts                  (B = batch_size / group_size, sharded over processes, groups whole;
                                        MiMo's easy pool: resample.py; staged difficulty: curriculum.py)
  2. generate G completions for each   (rollout.py: HF generate or vLLM)
  3. score them                        (reward.py: math-verify; coding/: sandboxed tests; DAPO's
                                        overlong shaping: dapo.py) -- with dynamic sampling (dapo.py), 1-3
                                        repeat until B groups of mixed correctness are kept
  4. group-relative advantages         (grpo.py; Skywork's rejection sampling: curriculum.py)
  5. mu optimizer updates              (epochs x mini-batches of the rollout batch; old log-probs computed when
                                        mu > 1; C3PO's token budget: c3po.py; entropy bonus: entropy.py)
  6. sync the engine, log / evaluate / checkpoint

Run directory (--output-dir, one run each; runs.py: checkpoints, resume, Ctrl-C): config.json, metrics.jsonl (a row per
step), evals.jsonl (a row per evaluation), samples.jsonl (completions at each evaluation), curves.png, summary.json,
checkpoint-N/ (model, tokenizer, optimizer, RNG, step, data position; written atomically; the newest 2 kept).
The surrogate loss is not a progress signal (it is ~0 on every on-policy step); watch reward and accuracy.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field

import torch

import dapo
import data
import grpo
import lora
import runs
from logprobs import LogprobHead, response_logprobs  # noqa: F401 (train.response_logprobs: the update's log-probs)
from runs import is_sharded, latest_checkpoint, rng_states, save_checkpoint, set_rng_states  # noqa: F401
from rollout import SamplingParams, load_model


def opt(default, help):
    return field(default=default, metadata={"help": help})


# Each paper's choices (the papers' sections named per line), lengths and batch sizes scaled to the built-in task
# (responses of 10-50 tokens, 32 prompts x 8 = 256 responses per step; the papers generate 4K-32K tokens for 512 x 16).
# Anything not listed keeps the Config default (GRPO): reward 1/0, eps 0.2/0.2, one update per rollout (mu = 1),
# --filter-metric auto (correctness; the partial scores under code-strict / code-soft), greedy + avg@4 evaluation.
# mu (updates per rollout) = batch_size / mini_batch_size: DAPO, MiMo and Compass make 16 (mini-batch = 1/16 of the
# rollout: 512 of 8192 responses in DAPO's verl script, 32 of 512 prompts in MiMo, 32 of 128 in Compass), scaled
# here to mini-batches of 16 of the 256 responses. Measured on the built-in task at the default lr 1e-4: mu = 16
# still learns and clip-higher acts (clip fractions > 0 on every step; README "Recipes").
MU16 = dict(mini_batch_size=16)
RECIPES = {
    # Prompt templates (--template): only DAPO names one (its README: the 'Answer:' line, read by --reward math-dapo;
    # --template dapo --reward math-dapo). The other papers do not print theirs [unspecified]: their recipes keep
    # 'auto' (the tokenizer's chat template, else plain) and the \boxed{} reward, so that the recipes compare.
    "grpo": {},  # DeepSeekMath GRPO without KL (add --kl-coef 0.04 for the original)
    "dapo": dict(  # DAPO Sec. 3, Alg. 1 and verl's recipe/dapo scripts
        wrong_reward=-1.0, clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, overlong_buffer=16,
        **MU16,  # 16 updates per rollout (train batch 512 prompts x 16, ppo_mini_batch_size 32 prompts)
        gen_batch_factor=3,  # verl recipe/dapo: gen_batch_size 1536 = 3 x train_batch_size 512, up to 10 rounds
        eval_temperature=1.0, eval_top_p=0.7),  # Sec. 4.1: avg@32 at T = 1.0, top-p 0.7
    "c3po": dict(  # Ring-lite Sec. 3.2, 4.1: token budget, KL 1e-3, entropy bonus 5e-4, 1/0 reward; on-policy (mu = 1:
        # the paper's "minibatch 2" is unexplained and Phi tokens per update is the budget's own unit)
        token_budget=4096, kl_coef=1e-3, entropy_coef=5e-4, eval_temperature=1.0, eval_top_p=0.95,  # Table 1: T 1.0, top-p 0.95
        # Sec. 3.4 two-stage RL: math first, then code (+ science, not built in) with the length limit raised (24K -> 32K
        # there, 64 -> 96 tokens here); code scores 1 only when every test passes. The steps split evenly (--max-steps)
        stages="data=builtin-math reward=math max_new_tokens=64; "
               "data=builtin-code reward=code max_new_tokens=96 eval_problems=100"),
    "skywork": dict(  # Skywork-OR1 MAGIC Sec. 3: token-mean, no KL, adaptive entropy, rejection sampling, stages;
        # its verifier's format rule (Sec. 7.1): the last \boxed{} or nothing
        reward="math-strict", loss_agg="token-mean", adaptive_entropy=True, rejection_sampling=True, curriculum="skywork",
        mini_batch_size=128,  # N_SGD = 2: Math-7B's Table 10 (batch 256, mini-batch 128), whose stages the curriculum follows
        # (OR1-7B / 32B ran N_SGD = 1); eps 0.2/0.2; adaptive entropy with its released code's timing (--entropy-timing)
        online_filter=True,  # Sec. 3.1: at each stage start, drop prompts solved perfectly in the previous stage
        eval_temperature=1.0, eval_top_p=1.0),  # Table 13: avg@32 (AIME) at T = 1, top-p 1
    "mimo": dict(  # MiMo Sec. 3.3: DAPO-style loss, dynamic sampling, easy-data resampling alpha = 0.1; eps unstated
        # [unspecified]: DAPO's 0.2/0.28; filter on the partial scores with its code rewards (--filter-metric auto)
        clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, easy_pool_alpha=0.1,
        **MU16,  # batch 512, actor mini-batch 32: 16 gradient updates per iteration (Sec. 3.3.3)
        eval_temperature=0.6, eval_top_p=0.95),  # Tables 4-6: T 0.6, top-p 0.95
    "compass": dict(  # Compass-Thinker Sec. 3-4: +-1 reward, DAPO-style loss, dynamic sampling, easy -> hard stages;
        # eps unstated [unspecified]: DAPO's 0.2/0.28. No online filter: dropping prompts solved in the previous stage is
        # Skywork-OR1's, not Compass-Thinker's. Evaluation: Sec. 4.3 gives no decoding settings [unspecified]: the
        # training T = 1.0, top-p 1.0 (the defaults)
        wrong_reward=-1.0, clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, curriculum="compass",
        **MU16),  # Sec. 4.1: batch 128, actor mini-batch 32, 16 gradient updates per iteration
}


@dataclass
class Config:
    # --- run ---
    model: str = opt("", "model path or hub name; empty = the built-in tiny Qwen2 (built offline and cached on first use)")
    train_data: str = opt("builtin", "'builtin' (the built-in task of the reward's kind: math, or with a code reward code), "
                                     "'builtin-math', 'builtin-code', or a .jsonl/.json/.parquet file or hub dataset name")
    eval_data: str = opt("builtin", "'builtin' (held-out split of the built-in task of the reward's kind), 'builtin-math', "
                                    "'builtin-code', or a file / hub dataset name")
    eval_split: str = opt("test", "split to use when --eval-data is a hub dataset")
    train_problems: int = opt(0, "use only the first N training problems (0 = all; the built-in tasks draw 20,000): a small pool "
                                 "is seen for several epochs, as the papers' data is")
    output_dir: str = opt("runs/default", "run directory (metrics, curves, samples, checkpoints, summary)")
    max_steps: int = opt(40, "number of RL steps (one step = one rollout batch)")
    seed: int = opt(0, "seed for data order, sampling and initialisation: same seed, same run")
    save_every: int = opt(20, "checkpoint every N steps and at the end (0 = only at the end); Ctrl-C loses the steps since the last")
    keep_checkpoints: int = opt(2, "keep the newest N checkpoints (0 = all)")
    overwrite: bool = opt(False, "replace the run already in --output-dir (without it, a new run there stops with an error)")
    resume: str = opt("", "checkpoint directory to resume from, or 'auto' for the newest in --output-dir (none: start fresh). "
                          "The checkpoint's settings are the run's: flags that would change the run are refused (runs.py)")
    resume_override: bool = opt(False, "with --resume: apply flags that change the run anyway, one warning line each (the "
                                       "model, data, recipe, seed and evaluation still cannot change)")
    eval_every: int = opt(20, "evaluate on held-out data every N steps (0 = only before and after)")
    eval_problems: int = opt(400, "number of held-out problems for greedy accuracy")
    eval_samples: int = opt(4, "k: sampled completions per held-out problem for avg@k and pass@k, at the first and the final "
                               "evaluation only (intermediate ones are greedy); 0 = greedy only. The papers use k = 32 on AIME")
    eval_temperature: float = opt(1.0, "sampling temperature of avg@k / pass@k (DAPO, Skywork, Ring-lite 1.0; MiMo 0.6)")
    eval_top_p: float = opt(1.0, "top-p of avg@k / pass@k (DAPO 0.7, Ring-lite and MiMo 0.95, Skywork 1.0)")
    # --- rollout ---
    rollout: str = opt("fast", "generation engine: 'fast' (rollout.FastEngine: transformers' forward in a plain decode loop, the "
                               "samples of 'hf' token for token, ~4x faster on the tiny model), 'hf' (transformers generate, the reference) or "
                               "'vllm' (colocated in each training process)")
    vllm_gpu_memory_utilization: float = opt(0.3, "vLLM on GPU: share of GPU memory for its weights and KV cache "
                                                  "(the rest is the trainer's; TRL moved its default 0.9 -> 0.3 after OOM reports)")
    vllm_sleep: bool = opt(False, "vLLM on GPU: sleep the engine (free its KV cache) during the optimizer updates")
    tis_cap: float = opt(0.0, "truncated importance sampling (rollout.tis_weights): each token's surrogate term is weighted by "
                              "min(pi_old / pi_engine, cap), correcting for the engine sampling from a slightly different "
                              "distribution than the trainer's (other kernels, bf16); 0 = off; needs an engine that returns "
                              "log-probs (--rollout vllm). TRL's vllm_importance_sampling_cap; 2.0 is a common cap")
    rollout_lag: int = opt(0, "K: generate batch k+1 with theta_k while the update runs on batch k (async_rollout.py: a "
                              "producer thread with its own copy of the policy; batch j is always generated by theta_{j-K}; "
                              "the loss clips on pi_theta/pi_prox, weighted by min(pi_prox/pi_behav, --tis-cap)); 0 = the "
                              "synchronous loop; 1 on one process with the fast or hf engine")
    rollout_worker: str = opt("thread", "--rollout-lag's producer: 'thread' (overlaps the update) or 'inline' (the same "
                                        "code run at the sync point, sequentially: the reference the thread must equal)")
    batch_size: int = opt(256, "responses per step (prompts x group size); must be divisible by --group-size")
    group_size: int = opt(8, "G: completions per prompt (>= 2)")
    temperature: float = opt(1.0, "sampling temperature (all five papers use 1.0 for training)")
    top_p: float = opt(1.0, "nucleus sampling top-p for training rollouts")
    max_new_tokens: int = opt(64, "maximum response length in tokens (responses hitting it are 'truncated')")
    template: str = opt("auto", "prompt template (data.TEMPLATES): auto (the tokenizer's chat template if it has one, else plain; "
                                "with --reward math-dapo, dapo), chat, plain, qwen-math (Qwen2.5-Math's system prompt), "
                                "r1-zero (DeepSeek-R1-Zero's), dapo (DAPO's 'Answer:' line)")
    system_prompt: str = opt("", "system prompt for the chat templates (a first paragraph for the plain ones)")
    stop: str = opt("", "stop strings, '||'-separated, backslash escapes read (e.g. '</answer>||\\nUser:'): a response ends "
                        "right after the token that completes one, the string kept. Stop tokens need no flag: the "
                        "tokenizer's EOS, the model's generation_config EOS list and the chat template's end of turn")
    # --- reward ---
    correct_reward: float = opt(1.0, "reward of a correct answer")
    wrong_reward: float = opt(0.0, "reward of a wrong answer (-1 for DAPO / Compass-Thinker, 0 for Ring-lite / Skywork / MiMo)")
    reward_timeout: float = opt(5.0, "seconds of wall time for one answer's whole check; the worker that overruns is killed and the answer scores --wrong-reward")
    reward_workers: int = opt(2, "processes verifying answers in parallel (0 = in the training process)")
    # --- loss ---
    loss_agg: str = opt("seq-mean-token-mean", "loss aggregation: seq-mean-token-mean (GRPO), token-mean (DAPO), seq-mean-token-sum")
    clip_low: float = opt(0.2, "eps_low: ratio clipped below at 1 - eps_low")
    clip_high: float = opt(0.2, "eps_high: ratio clipped above at 1 + eps_high (DAPO clip-higher: 0.28)")
    kl_coef: float = opt(0.0, "beta: weight of the k3 KL to the initial (reference) model; 0 = no reference model")
    scale_adv_by_std: bool = opt(True, "divide advantages by the group std (GRPO); off = Dr. GRPO's mean-only baseline")
    # --- optimisation ---
    lr: float = opt(1e-4, "AdamW learning rate; 1e-4 suits the 1M-parameter tiny model (the papers use 1e-6 to 3e-6 for 7B-32B)")
    warmup_steps: int = opt(5, "linear LR warm-up, in optimizer updates, then constant (DAPO)")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    grad_clip: float = opt(1.0, "max global grad norm")
    mini_batch_size: int = opt(256, "responses per optimizer update; mu = epochs x batch_size / mini_batch_size")
    epochs: int = opt(1, "passes over each rollout batch (N_reuse)")
    micro_batch_size: int = opt(256, "responses per forward/backward (gradient accumulation inside a mini-batch)")
    micro_batch_tokens: int = opt(4096, "padded tokens per forward/backward: a mini-batch is sorted by length and cut into "
                                        "micro-batches of at most this many (and at most --micro-batch-size responses), so a "
                                        "few long responses do not pad every row to their length; 0 = off (rollout order)")
    dtype: str = opt("auto", "precision policy: auto (bf16-mixed on GPU, float32 on CPU); float32; bf16-mixed (fp32 weights, "
                             "gradients and AdamW states, bf16 autocast forward, fp32 log-softmax); bfloat16 (all bf16, "
                             "8 B/param: AdamW steps smaller than ~1/256 of a weight round away, e.g. at lr 1e-6)")
    logprob_chunk: int = opt(256, "LM-head rows per chunk for the log-probs (logprobs.chunked_token_logprobs): the update never holds "
                                  "more than chunk x vocab logits; 0 = full logits (micro-batch x (P+R) x vocab, the reference)")
    gradient_checkpointing: bool = opt(False, "recompute each decoder layer in the backward (HF gradient checkpointing, "
                                              "non-reentrant): keeps one hidden state per layer and token, ~1/3 more compute")
    fsdp: bool = opt(False, "shard weights, gradients and AdamW states over the processes: FSDP2 through Accelerate, one unit "
                            "per decoder layer (= accelerate launch --config_file configs/fsdp.yaml); see docs/multi_gpu.md")
    report_to: str = opt("none", "experiment tracker through Accelerate: tensorboard (OUTPUT_DIR/tensorboard), wandb, none; "
                                 "the config is logged once, every metrics.jsonl row each step")
    threads: int = opt(1, "CPU threads for torch (0 = torch's default). 1 by default: the tiny model gains little from more, "
                          "and an OpenMP pool sharing its cores with other work ran 30x slower here (measured)")
    lora_rank: int = opt(0, "LoRA rank r (lora.py, peft): train low-rank adapters on a frozen base; 0 = full fine-tuning. With "
                            "LoRA the --lr default is 10x full fine-tuning's (TRL's 'LoRA without regret'), the reference "
                            "model is the base (adapter disabled, no second copy) and checkpoints hold the adapter")
    lora_alpha: int = opt(32, "LoRA alpha: adapters scaled by alpha / r (32: verl's GRPO-LoRA baselines and 'LoRA without regret')")
    lora_dropout: float = opt(0.0, "dropout on the adapters' input (0: verl's and TRL's GRPO-LoRA examples)")
    lora_targets: str = opt("all-linear", "modules that get adapters: 'all-linear' (every linear layer of the decoder, not "
                                          "the LM head) or comma-separated names, e.g. q_proj,k_proj,v_proj,o_proj")
    load_in_4bit: bool = opt(False, "QLoRA: the frozen base's linear layers in 4-bit NF4 (bitsandbytes: pip install -e '.[qlora]'; "
                                     "runs on CPU too, slowly); needs --lora-rank; with --rollout vllm, --lora-vllm-sync adapter")
    lora_vllm_sync: str = opt("merged", "LoRA with --rollout vllm: 'merged' (the adapters merged out of place in fp32 into the "
                                        "base's weights, loaded into vLLM each step) or 'adapter' (vLLM keeps its base weights "
                                        "and serves the adapter through its LoRA support: a smaller sync, a slower decode)")
    # --- recipe: each paper's techniques (train.py --recipe NAME sets them; any flag given still wins) ---
    recipe: str = opt("grpo", "preset of a paper's settings: " + ", ".join(RECIPES) + " (see RECIPES in train.py and the README)")
    dynamic_sampling: bool = opt(False, "DAPO: keep only groups with mixed correctness (or scores: --filter-metric), regenerating until the batch is full")
    max_gen_rounds: int = opt(10, "DAPO: cap on generation rounds per step under dynamic sampling (<= 0: no cap)")
    filter_metric: str = opt("auto", "what dynamic sampling / the seamless scheduler call a mixed group (verl filter_groups.metric): "
                                     "'acc' (correctness differs), 'score' (the verifier's unshaped reward differs: partial credit), "
                                     "'auto' = score for --reward code-strict / code-soft (MiMo's partial-credit rewards), else acc")
    gen_batch_factor: int = opt(1, "DAPO: prompts drawn per dynamic-sampling round, as a multiple of the step's prompts "
                                   "(verl's DAPO recipe: gen_batch_size = 3 x train_batch_size; the dapo recipe sets 3)")
    seamless: bool = opt(False, "MiMo: seamless rollout for --dynamic-sampling (seamless.py): launches sized by the pass-rate estimate (continuous batching with --rollout vllm, waves with hf), scoring overlapped with generation, FIFO early termination; with N processes each collects its share of the batch")
    seamless_max_wave: int = opt(0, "MiMo seamless rollout: cap on prompts per wave (0 = half the step's prompts)")
    overlong_buffer: int = opt(0, "DAPO: L_cache of the soft overlong punishment (Eq. 13; L_max = --max-new-tokens); 0 = off")
    overlong_filter: bool = opt(False, "DAPO: mask the loss of truncated responses (overlong filtering)")
    token_budget: int = opt(0, "C3PO: Phi, training tokens per optimizer update (constant 1/Phi normaliser); 0 = off")
    entropy_coef: float = opt(0.0, "static entropy bonus alpha (Ring-lite: 5e-4)")
    adaptive_entropy: bool = opt(False, "Skywork-OR1: adaptive entropy control towards --entropy-target")
    entropy_target: float = opt(0.2, "Skywork-OR1: target entropy (the sampled-token NLL of a rollout; which rollout: --entropy-timing)")
    entropy_delta: float = opt(1e-4, "Skywork-OR1: coefficient step Delta per training step")
    entropy_max: float = opt(5e-3, "Skywork-OR1: upper clamp of the entropy coefficient")
    entropy_timing: str = opt("code", "Skywork-OR1: 'code' (released trainer: c updated with the previous rollout's estimate, then "
                                      "alpha_k = c_k * 1{e_{k-1} < tgt}) or 'paper' (Eq. 3.2: alpha_k = c_k * 1{e_k <= tgt} with this "
                                      "rollout's estimate, one extra forward pass, then c_{k+1} from e_k)")
    rejection_sampling: bool = opt(False, "Skywork-OR1: drop zero-advantage groups, no refill (the batch shrinks)")
    easy_pool_alpha: float = opt(0.0, "MiMo: all-correct prompts move to an easy pool, drawn with this probability per slot; 0 = off")
    drop_solved: bool = opt(False, "all-correct prompts leave the prompt pool for good (no easy pool, no return): the outright "
                                   "removal MiMo's easy pool replaces (resample.EasyPool with alpha 0, no refresh)")
    curriculum: str = opt("", "staged training: 'skywork' (growing response length) or 'compass' (easy -> hard levels); '' = off")
    online_filter: bool = opt(False, "Skywork-OR1: with --curriculum, drop at each stage start the prompts whose last group in "
                                     "the previous stage was all correct (the skywork recipe turns it on; Compass-Thinker has none)")
    stages: str = opt("", "stages of one run (Ring-lite's math -> code RL), ';'-separated, each 'key=value ...' with keys "
                          "data (train data), reward, max_new_tokens, steps, eval (eval data), eval_problems; what a stage "
                          "leaves out comes from the flags. Stages without steps share the rest of --max-steps equally. "
                          "Optimizer, reference model, entropy controller and step count carry over; each data set keeps "
                          "its own prompt order; evaluation covers every stage's held-out set. '' = one stage from "
                          "--train-data, --reward, --max-new-tokens (the c3po recipe sets math then code)")
    reward: str = opt("math", "reward: 'math' (the final answer wherever a careful grader looks, math-verify equivalence), "
                               "'math-strict' (last \\boxed{} only: Skywork-OR1's format rule), 'math-dapo' (DAPO's 'Answer:' line "
                               "and prompt), or code modes 'code' (all tests pass), 'code-strict', 'code-soft' (MiMo); see reward.py")

    @property
    def stops(self) -> tuple[str, ...]:
        """--stop as strings: split on '||', backslash escapes ('\\n') read."""
        import codecs

        return tuple(codecs.decode(x, "unicode_escape") for x in self.stop.split("||") if x) if self.stop else ()

    def validate(self):
        def bad(flag, msg):
            raise SystemExit(f"error: --{flag}: {msg}")

        if self.template not in data.TEMPLATES:
            bad("template", f"{self.template!r} is not one of {', '.join(data.TEMPLATES)}")

        if self.group_size < 2:
            bad("group-size", f"must be >= 2 (a group-relative baseline needs at least two samples), got {self.group_size}")
        if self.batch_size % self.group_size:
            bad("batch-size", f"{self.batch_size} is not divisible by --group-size {self.group_size}")
        if self.batch_size % self.mini_batch_size:
            bad("mini-batch-size", f"{self.mini_batch_size} does not divide --batch-size {self.batch_size}")
        if self.mini_batch_size % self.micro_batch_size and self.micro_batch_size < self.mini_batch_size:
            bad("micro-batch-size", f"{self.micro_batch_size} does not divide --mini-batch-size {self.mini_batch_size}")
        if self.loss_agg not in grpo.LOSS_AGG:
            bad("loss-agg", f"{self.loss_agg!r} is not one of {grpo.LOSS_AGG}")
        if self.train_problems < 0:
            bad("train-problems", f"must be >= 0 (0 = all), got {self.train_problems}")
        if self.max_steps < 1:
            bad("max-steps", "must be >= 1")
        if self.rollout_worker not in ("thread", "inline"):
            bad("rollout-worker", f"{self.rollout_worker!r} is not 'thread' or 'inline'")
        if self.rollout_lag not in (0, 1):
            bad("rollout-lag", f"must be 0 or 1, got {self.rollout_lag} (one producer: a lag of 2 would overlap nothing more)")
        if self.rollout_lag:
            clash = [f for f, on in (("--rollout vllm", self.rollout == "vllm"), ("--fsdp", self.fsdp), ("--seamless", self.seamless),
                                     ("--load-in-4bit", self.load_in_4bit)) if on]
            if clash:
                bad("rollout-lag", f"cannot be combined with {', '.join(clash)} yet (async_rollout.py: one process, "
                                   "a producer with its own full-precision copy of the model and the fast or hf engine)")
            if self.tis_cap <= 0:
                bad("tis-cap", "must be > 0 with --rollout-lag (the decoupled loss weights each token by min(pi_prox/pi_behav, cap))")
        if self.save_every < 0 or self.keep_checkpoints < 0:
            bad("save-every" if self.save_every < 0 else "keep-checkpoints", "must be >= 0")
        if self.rollout not in ("fast", "hf", "vllm"):
            bad("rollout", f"{self.rollout!r} is not 'fast', 'hf' or 'vllm'")
        if self.micro_batch_tokens < 0:
            bad("micro-batch-tokens", f"must be >= 0, got {self.micro_batch_tokens}")
        if self.curriculum not in ("", "skywork", "compass"):
            bad("curriculum", f"{self.curriculum!r} is not 'skywork', 'compass' or ''")
        if self.curriculum and (self.easy_pool_alpha or self.drop_solved):
            bad("curriculum", "cannot be combined with --easy-pool-alpha / --drop-solved (both choose the prompts)")
        if self.drop_solved and self.easy_pool_alpha:
            bad("drop-solved", "replaces the easy pool: give --drop-solved or --easy-pool-alpha, not both")
        if self.online_filter and not self.curriculum:
            bad("online-filter", "acts at curriculum stage starts: add --curriculum (or a recipe that has one)")
        if self.tis_cap < 0 or (self.tis_cap and self.tis_cap < 1):
            bad("tis-cap", f"must be 0 (off) or >= 1, got {self.tis_cap}")
        if self.tis_cap and self.rollout != "vllm" and not self.rollout_lag:
            bad("tis-cap", "needs the sampling log-probs of --rollout vllm, or --rollout-lag 1 (the HF and fast engines "
                           "sample from the trainer's own model: nothing to correct)")
        if self.filter_metric not in ("auto", "acc", "score"):
            bad("filter-metric", f"{self.filter_metric!r} is not 'auto', 'acc' or 'score'")
        if self.filter_metric == "auto" and not self.stages:  # resolved here, so config.json records what the run used
            self.filter_metric = filter_metric_for(self, self.reward)  # (with --stages: per stage, filter_metric_for)
        if self.gen_batch_factor < 1:
            bad("gen-batch-factor", f"must be >= 1, got {self.gen_batch_factor}")
        if self.seamless and not self.dynamic_sampling:
            bad("seamless", "is a scheduler for dynamic sampling: add --dynamic-sampling (or a recipe that has it)")
        if self.reward not in REWARDS:
            bad("reward", f"{self.reward!r} is not one of math, math-strict, math-dapo, code, code-strict, code-soft")
        if self.entropy_timing not in ("code", "paper"):
            bad("entropy-timing", f"{self.entropy_timing!r} is not 'code' or 'paper'")
        if self.eval_samples < 0:
            bad("eval-samples", f"must be >= 0, got {self.eval_samples}")
        if self.eval_samples and not (self.eval_temperature > 0 and 0 < self.eval_top_p <= 1):
            bad("eval-temperature", f"sampled evaluation needs temperature > 0 and 0 < top-p <= 1, got "
                                    f"{self.eval_temperature} and {self.eval_top_p}")
        if self.reward_timeout <= 0:
            bad("reward-timeout", f"must be > 0 seconds, got {self.reward_timeout}")
        if self.dtype not in ("auto", "float32", "bf16-mixed", "bfloat16"):
            bad("dtype", f"{self.dtype!r} is not one of auto, float32, bf16-mixed, bfloat16")
        if self.logprob_chunk < 0:
            bad("logprob-chunk", f"must be >= 0 (0 = full logits), got {self.logprob_chunk}")
        if self.report_to not in ("none", "tensorboard", "wandb"):
            bad("report-to", f"{self.report_to!r} is not tensorboard, wandb or none")
        if self.report_to != "none":
            import importlib.util

            if importlib.util.find_spec(self.report_to) is None:
                bad("report-to", f"the {self.report_to} package is not installed (pip install {self.report_to})")
        if self.stages:
            if self.train_data != "builtin":
                bad("train-data", "the run has --stages (the c3po recipe sets math then code): give each stage's data "
                                  "there, or --stages '' for one stage")
            if self.curriculum or self.easy_pool_alpha or self.drop_solved or self.seamless:
                bad("stages", "cannot be combined with --curriculum, --easy-pool-alpha, --drop-solved or --seamless (each "
                              "chooses the prompts)")
        parse_stages(self)  # errors name the stage and the key
        if self.fsdp and (self.dynamic_sampling or self.seamless):
            bad("fsdp", "cannot be combined with --dynamic-sampling / --seamless: their generation rounds differ between "
                        "processes, and under FSDP every forward pass is a collective")
        if self.lora_rank:
            lora.validate(self, bad)
        elif self.load_in_4bit:
            bad("load-in-4bit", "QLoRA trains adapters on the 4-bit base: it needs --lora-rank R > 0")


REWARDS = ("math", "math-strict", "math-dapo", "code", "code-strict", "code-soft")
STAGE_KEYS = {"data": str, "reward": str, "max_new_tokens": int, "steps": int, "eval": str, "eval_problems": int}


@dataclass
class Stage:
    """One stage of a run: steps [start, end) train on `data` with `reward` and responses of up to `max_new_tokens`."""
    data: str
    reward: str
    max_new_tokens: int
    eval: str
    eval_problems: int
    start: int
    end: int
    task: int = 0  # index of its Task (load_inputs: stages with the same data, reward and evaluation share one)

    @property
    def kind(self) -> str:  # the prompt template: "math", "math-dapo" (DAPO's Answer: line) or "code"
        return "code" if self.reward.startswith("code") else "math-dapo" if self.reward == "math-dapo" else "math"


def filter_metric_for(cfg, reward: str) -> str:
    """--filter-metric, with 'auto' resolved for `reward`: the partial scores of code-strict / code-soft, else correctness."""
    if cfg.filter_metric != "auto":
        return cfg.filter_metric
    return "score" if reward in ("code-strict", "code-soft") else "acc"


def wrong_builtin(reward: str, specs: dict) -> str | None:
    """The first of `specs` (name -> data spec) naming the built-in task of the other kind than `reward`'s, or None."""
    other = "builtin-math" if reward.startswith("code") else "builtin-code"
    return next((name for name, spec in specs.items() if spec == other), None)


def parse_stages(cfg) -> list[Stage]:
    """--stages as Stage objects (one stage from the flags when empty); bad input -> one `error:` line."""
    if not cfg.stages:
        flag = wrong_builtin(cfg.reward, {"train-data": cfg.train_data, "eval-data": cfg.eval_data})
        if flag:
            raise SystemExit(f"error: --{flag}: {getattr(cfg, flag.replace('-', '_'))} does not go with --reward {cfg.reward}")
        return [Stage(cfg.train_data, cfg.reward, cfg.max_new_tokens, cfg.eval_data, cfg.eval_problems, 0, cfg.max_steps)]
    specs = []
    for k, text in enumerate([t.strip() for t in cfg.stages.split(";") if t.strip()], 1):
        def bad(msg):
            raise SystemExit(f"error: --stages: stage {k} ({text!r}): {msg}")

        f = {}
        for item in text.replace(",", " ").split():
            key, sep, val = item.partition("=")
            if not sep or key not in STAGE_KEYS:
                bad(f"{item!r} is not key=value with a key of {', '.join(STAGE_KEYS)}")
            try:
                f[key] = STAGE_KEYS[key](val)
            except ValueError:
                bad(f"{key}={val!r} is not an integer")
        if "data" not in f:
            bad("no data=")
        f.setdefault("reward", cfg.reward)
        if f["reward"] not in REWARDS:
            bad(f"reward {f['reward']!r} is not one of {', '.join(REWARDS)}")
        key = wrong_builtin(f["reward"], {k: f.get(k) for k in ("data", "eval")})
        if key:
            bad(f"{key}={f[key]} does not go with reward={f['reward']}")
        if f.get("steps", 1) < 1 or f.get("max_new_tokens", 1) < 1 or f.get("eval_problems", 1) < 1:
            bad("steps, max_new_tokens and eval_problems must be >= 1")
        specs.append(f)
    if not specs:
        raise SystemExit("error: --stages: no stage given")
    given = sum(f.get("steps", 0) for f in specs)
    free = [f for f in specs if "steps" not in f]
    if given > cfg.max_steps or (not free and given != cfg.max_steps) or (free and cfg.max_steps - given < len(free)):
        raise SystemExit(f"error: --stages: the stages' steps ({given}, {len(free)} stage(s) without) do not fit --max-steps "
                         f"{cfg.max_steps}")
    out, start = [], 0
    for f in specs:
        n = f.get("steps") or (cfg.max_steps - given) // len(free) + (f is free[-1]) * ((cfg.max_steps - given) % len(free))
        out.append(Stage(f["data"], f["reward"], f.get("max_new_tokens", cfg.max_new_tokens), f.get("eval", cfg.eval_data),
                         f.get("eval_problems", cfg.eval_problems), start, start + n))
        start += n
    return out


HELP_GROUPS = {  # train.py --help, in this order
    "model and data": ["model", "train_data", "eval_data", "eval_split", "train_problems", "template", "system_prompt", "stop"],
    "run directory, checkpoints, resume": ["output_dir", "max_steps", "seed", "save_every", "keep_checkpoints", "overwrite",
                                           "resume", "resume_override"],
    "rollout": ["rollout", "rollout_lag", "rollout_worker", "batch_size", "group_size", "temperature", "top_p", "max_new_tokens", "vllm_gpu_memory_utilization",
                "vllm_sleep", "tis_cap"],
    "reward": ["reward", "correct_reward", "wrong_reward", "reward_timeout", "reward_workers"],
    "loss": ["loss_agg", "clip_low", "clip_high", "kl_coef", "scale_adv_by_std"],
    "optimisation": ["lr", "warmup_steps", "weight_decay", "grad_clip", "mini_batch_size", "epochs"],
    "recipe techniques (--recipe NAME sets a paper's; a flag given still wins)": [
        "recipe", "dynamic_sampling", "max_gen_rounds", "filter_metric", "gen_batch_factor", "seamless", "seamless_max_wave",
        "overlong_buffer", "overlong_filter", "token_budget", "entropy_coef", "adaptive_entropy", "entropy_target",
        "entropy_delta", "entropy_max", "entropy_timing", "rejection_sampling", "easy_pool_alpha", "drop_solved",
        "curriculum", "online_filter", "stages"],
    "memory and scale": ["micro_batch_size", "micro_batch_tokens", "dtype", "logprob_chunk", "gradient_checkpointing", "fsdp",
                         "threads", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "load_in_4bit", "lora_vllm_sync"],
    "evaluation and logging": ["eval_every", "eval_problems", "eval_samples", "eval_temperature", "eval_top_p", "report_to"],
}
CHOICES = {  # shown in --help (Config.validate checks them, with its own error lines)
    "recipe": tuple(RECIPES), "rollout": ("fast", "hf", "vllm"), "reward": REWARDS, "template": tuple(data.TEMPLATES),
    "loss_agg": grpo.LOSS_AGG, "dtype": ("auto", "float32", "bf16-mixed", "bfloat16"), "report_to": ("none", "tensorboard", "wandb"),
    "lora_vllm_sync": ("merged", "adapter"), "rollout_worker": ("thread", "inline"), "filter_metric": ("auto", "acc", "score"), "entropy_timing": ("code", "paper"),
    "curriculum": ("", "skywork", "compass"),
}


def build_parser() -> argparse.ArgumentParser:
    """train.py's flags: one per Config field, in HELP_GROUPS, each with its help, choices and default."""
    ap = data.ArgParser(prog="train.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                        usage="python train.py [--flag value ...]   (the flags below, by group; a recipe sets defaults)")
    fields = {f.name: f for f in dataclasses.fields(Config)}
    grouped = [n for names in HELP_GROUPS.values() for n in names]
    assert sorted(grouped) == sorted(fields), f"HELP_GROUPS misses {set(fields) - set(grouped)} or repeats a field"
    for title, names in HELP_GROUPS.items():
        group = ap.add_argument_group(title)
        for name in names:
            f = fields[name]
            flag = "--" + name.replace("_", "-")
            if f.type in ("bool", bool):
                group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
                continue
            typ = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            shown = repr(f.default) if f.default == "" else f.default
            choices = CHOICES.get(name)
            group.add_argument(flag, type=typ, default=f.default, help=f.metadata["help"] + f" (default: {shown})",
                               metavar="{" + ",".join(c or "''" for c in choices) + "}" if choices else None)
    return ap


def parse_config(argv=None) -> Config:
    ap = build_parser()
    recipe = vars(ap.parse_known_args(argv)[0])["recipe"]
    if recipe not in RECIPES:
        raise SystemExit(f"error: --recipe: {recipe!r} is not one of {', '.join(RECIPES)}")
    ap.set_defaults(**RECIPES[recipe])  # a recipe changes defaults; flags given on the command line still win
    if vars(ap.parse_known_args(argv)[0])["lora_rank"]:  # LoRA: its own lr default (lora.LR_SCALE x full fine-tuning's)
        ap.set_defaults(lr=ap.get_default("lr") * lora.LR_SCALE)
    if vars(ap.parse_known_args(argv)[0])["rollout_lag"]:  # off-policy by one step: the decoupled loss's cap (2.0)
        ap.set_defaults(tis_cap=ap.get_default("tis_cap") or 2.0)
    ns = vars(ap.parse_args(argv))
    cfg = Config(**ns)
    import tiny

    ckpt = runs.resolve_resume(cfg.resume, cfg.output_dir) if cfg.resume else None
    # --resume auto before the first checkpoint: the run's own settings (its config.json), not the defaults
    saved = runs.saved_config(ckpt) if ckpt else (
        runs.restart_config(cfg.output_dir, tiny.builtin_paths()) if cfg.resume == "auto" else None)
    if saved is not None:  # the run's settings are the saved ones; the flags given are checked against them
        unset = object()
        ap.set_defaults(**{k: unset for k in ns})
        given = {k: v for k, v in vars(ap.parse_args(argv)).items() if v is not unset}
        given.setdefault("output_dir", cfg.output_dir if cfg.resume == "auto" else os.path.dirname(ckpt.rstrip("/")))
        merged = runs.resume_settings(saved, given, cfg.resume_override, ckpt or f"auto ({cfg.output_dir}/config.json)")
        cfg = Config(**{**dataclasses.asdict(Config()), **{k: v for k, v in merged.items() if k in ns},
                        "resume": ckpt or "", "overwrite": not ckpt})  # no checkpoint: replaces what the run left
        if ckpt:
            runs.check_finished(ckpt, cfg.max_steps, cfg.output_dir)
            runs.say(f"resuming from step {ckpt.rstrip('/').rsplit('-', 1)[-1]} of {cfg.output_dir}")
    elif cfg.resume:  # --resume auto on a directory without a run: a fresh run
        cfg.resume, cfg.overwrite = "", True
    cfg.validate()
    return cfg


# ------------------------------------------------------------------------------------------------
# Plumbing: data order, batches, log-probs, checkpoints, plots
# ------------------------------------------------------------------------------------------------
class PromptSampler:
    """Walks the dataset in a fresh seeded permutation each epoch; (epoch, pos) is the resumable data position."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._make_perm()

    def _make_perm(self):
        return random.Random(f"{self.seed}-{self.epoch}").sample(range(self.n), self.n)

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._make_perm()
            out.append(self._perm[self.pos])
            self.pos += 1
        return out

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s):
        self.epoch, self.pos = s["epoch"], s["pos"]
        self._perm = self._make_perm()


def make_batch(tok, prompt_ids: list[list[int]], resp_ids: list[list[int]], device):
    """[left-pad | prompt | response | right-pad] rows with the response region aligned at column P.

    Returns input_ids, attention_mask, position_ids (B, P+R), response tokens (B, R) and their mask (B, R).
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
    return ids.to(device), attn.to(device), pos.to(device), ids[:, P:].to(device), resp_mask.to(device), P


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


def precision(cfg) -> str:
    """The precision policy in use: float32, bf16-mixed or bfloat16 (--dtype auto: bf16-mixed on GPU, float32 on CPU)."""
    return ("bf16-mixed" if torch.cuda.is_available() else "float32") if cfg.dtype == "auto" else cfg.dtype


def make_accelerator(cfg):
    """Accelerate with the run's precision, sharding and tracker.

    bf16-mixed: weights, gradients and AdamW states in fp32, the forward under bf16 autocast (Accelerate's
    mixed_precision="bf16"); log-softmax, entropy and the loss in fp32 (logprobs.chunked_token_logprobs upcasts).
    --fsdp: FSDP2 (`fully_shard` per decoder layer, i.e. the model's `_no_split_modules`, then the root), full state
    dicts for checkpoints. Accelerate 1.15 turns FSDP on only for accelerator devices; torch's FSDP2 also runs on CPU
    processes over gloo, so a CPU run (the tests) gets the same Accelerate code path by setting the type itself.
    """
    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    plugin = None
    if cfg.fsdp:
        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                reshard_after_forward=True, state_dict_type="FULL_STATE_DICT",
                                                cpu_ram_efficient_loading=False)
    acc = Accelerator(cpu=not torch.cuda.is_available(), fsdp_plugin=plugin,
                      mixed_precision="bf16" if precision(cfg) == "bf16-mixed" else "no",
                      log_with=None if cfg.report_to == "none" else cfg.report_to, project_dir=cfg.output_dir)
    if plugin is not None and acc.distributed_type == DistributedType.MULTI_CPU:  # both shared states (borgs)
        PartialState().distributed_type = acc.state.distributed_type = DistributedType.FSDP
        acc.state.fsdp_plugin = plugin
    if acc.distributed_type == DistributedType.FSDP and not acc.is_fsdp2:
        raise SystemExit("error: FSDP1 is not supported: set fsdp_version: 2 in the accelerate config (configs/fsdp.yaml)")
    return acc


def check_context(model, max_new_tokens: int) -> None:
    """One `error:` line when responses alone could outgrow the model's context (max_position_embeddings)."""
    ctx = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if ctx is not None and max_new_tokens >= ctx:
        raise SystemExit(f"error: --max-new-tokens {max_new_tokens}: the model's context is {ctx} tokens "
                         "(max_position_embeddings), prompt included")


def shard_reference(model):
    """FSDP2: the frozen reference sharded like the policy (`fully_shard` per decoder layer, then the root, as
    Accelerate's transformer_based_wrap does), instead of a full copy in every process. Accelerate's prepare() wants an
    optimizer with every FSDP2 model, and the reference has none: torch's fully_shard directly."""
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if type(m).__name__ in (model._no_split_modules or ()):
            fully_shard(m)
    return fully_shard(model)


class GatheredWeights:
    """FSDP2: the model's parameters as full tensors (DTensor.full_tensor, a collective: every process iterates), with
    the HF checkpoint names, for the engine's weight sync (rollout.VLLMEngine.sync_weights)."""

    def __init__(self, model):
        self.model = model

    def named_parameters(self):
        for name, p in self.model.named_parameters():
            yield name, (p.full_tensor() if hasattr(p, "full_tensor") else p)


def plot_curves(rows: list[dict], evals: list[dict], path: str, title: str = ""):
    """curves.png: training signals per step, held-out accuracy (greedy, and avg@k where sampled), per level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    same = all(r.get("reward/mean") == r.get("rollout/accuracy") for r in rows)  # a 1/0 reward: one panel says both
    keys = [("reward/mean", "train reward = accuracy" if same else "train reward"),
            ("rollout/response_length", "response length"), ("policy/entropy", "entropy"),
            ("rollout/frac_zero_std", "zero-std groups"), ("perf/grad_norm", "grad norm"),
            ("policy/clip_frac_high", "clip fraction (high)") if same else ("rollout/accuracy", "train accuracy")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    steps = [r["step"] for r in rows]
    for ax, (k, name) in zip(axes.flat, keys):
        ax.plot(steps, [r.get(k, float("nan")) for r in rows])
        ax.set_title(name), ax.set_xlabel("step")
    ax = axes.flat[6]
    tasks = sorted({k.split("/")[1] for e in evals for k in e if k.count("/") == 2 and k.endswith("/accuracy")})
    for t in tasks or [None]:  # --stages: one curve per task
        p = f"eval/{t}/" if t else "eval/"
        ax.plot([e["step"] for e in evals], [e.get(p + "accuracy", float("nan")) for e in evals], "o-", label=f"{t or ''} greedy".strip())
        for k in sorted({k for e in evals for k in e if k.startswith(p + "avg@")}):  # sampled: first and last evaluation
            pts = [(e["step"], e[k]) for e in evals if k in e]
            ax.plot(*zip(*pts), "s--", label=f"{t or ''} {k.split('/')[-1]}".strip())
    ax.legend(fontsize=8), ax.set_title("held-out accuracy"), ax.set_xlabel("step"), ax.set_ylim(0, 1)
    ax = axes.flat[7]
    levels = sorted({k for e in evals for k in e if k.startswith("eval/accuracy_level")}, key=lambda k: int(k[19:]))
    for k in levels:
        ax.plot([e["step"] for e in evals if k in e], [e[k] for e in evals if k in e], "o-", label=k.split("_")[-1])
    if levels:
        ax.legend(fontsize=8), ax.set_title("held-out greedy accuracy by level"), ax.set_xlabel("step"), ax.set_ylim(0, 1)
    else:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# Set-up: inputs checked first, then the policy, engine, reward, prompt sampler and the run directory
# ------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """Everything a training run holds; built by `setup`, read by the loop."""
    cfg: Config
    accelerator: object
    model: object  # the prepared (DDP-wrapped on N processes) policy
    tok: object
    ref_model: object
    optimizer: object
    engine: object
    ent_ctrl: object  # entropy.AdaptiveEntropy or None
    tasks: list  # Task per distinct (data, reward) of the stages: one unless --stages
    stages: list  # Stage per stage, each with its task index in .task
    start_step: int = 0
    history: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    wall_before: float = 0.0  # wall time of the run before a resume
    last_nll: float | None = None  # the previous rollout's sampled-token NLL (Skywork's entropy estimate)
    step: int | None = None  # the step in progress (0-based; None outside the loop): what Ctrl-C reports
    producer: object = None  # --rollout-lag 1: async_rollout.Producer
    stage: Stage | None = None  # the stage of the current step (enter)
    # the current stage's task, as the loop reads it: its data, prompt order, reward and prompt template
    train_set: list = field(default_factory=list)
    sampler: object = None  # PromptSampler, resample.EasyPool or curriculum.Curriculum
    reward_fn: object = None
    kind: str = "math"

    def enter(self, step: int) -> Stage:
        """Make the stage of `step` current (its task's data, sampler, reward and template) and return it."""
        self.stage = next(st for st in self.stages if st.start <= step < st.end)
        task = self.tasks[self.stage.task]
        self.train_set, self.sampler, self.reward_fn, self.kind = task.train_set, task.sampler, task.reward_fn, task.kind
        return self.stage

    def prompt(self, question: str) -> str:
        """The prompt text of a training question: --template (and --system-prompt) for the current task's kind."""
        return data.build_prompt(self.tok, question, self.kind, self.cfg.template, self.cfg.system_prompt)


@dataclass
class Task:
    """A stage's data and reward: training set, held-out set, prompt order (resumable), reward and template."""
    name: str  # "math", "code" (+ a number when two tasks share a kind): the prefix of its evaluation metrics
    train_set: list
    eval_set: list
    sampler: object
    reward_fn: object
    kind: str
    max_new_tokens: int  # evaluation length: its longest stage's


def load_inputs(cfg: Config):
    """Each stage's data sets, and the checkpoint to resume from, checked before anything is built or written.

    Returns (stages, [(train_set, eval_set) per distinct task], resume_from); stage.task indexes the list."""
    stages, keys, sets = parse_stages(cfg), [], []
    for st in stages:
        key = (st.data, st.reward, st.eval, st.eval_problems)
        if key not in keys:
            schema = "code" if st.kind == "code" else None
            builtin = st.eval.startswith("builtin")
            keys.append(key)
            sets.append((data.load_dataset(st.data, split="train", n=cfg.train_problems or None, seed=cfg.seed, schema=schema),
                         data.load_dataset(st.eval, split="test" if builtin else cfg.eval_split, n=st.eval_problems,
                                           seed=cfg.seed, schema=schema)))
        st.task = keys.index(key)
    resume_from = cfg.resume or None  # parse_config resolved it
    runs.check_output_dir(cfg.output_dir, resume_from, cfg.overwrite)
    return stages, sets, resume_from


def make_reward(cfg: Config, reward: str):
    if reward.startswith("math"):
        from reward import MathReward

        return MathReward(cfg.correct_reward, cfg.wrong_reward, cfg.reward_timeout, cfg.reward_workers, mode=reward)
    from coding.code_reward import CodeReward

    return CodeReward({"code": "all_or_nothing", "code-strict": "strict", "code-soft": "soft"}[reward],
                      workers=max(1, cfg.reward_workers))


def make_tasks(cfg: Config, stages: list, sets: list) -> list:
    """One Task per distinct (data, reward) of the stages, each with its own prompt sampler and reward."""
    mine = [[st for st in stages if st.task == t] for t in range(len(sets))]
    names = ["code" if m[0].kind == "code" else "math" for m in mine]
    tasks = []
    for t, (train_set, eval_set) in enumerate(sets):
        name = names[t] + (str(t + 1) if names.count(names[t]) > 1 else "")
        tasks.append(Task(name, train_set, eval_set, make_sampler(cfg, train_set), make_reward(cfg, mine[t][0].reward),
                          mine[t][0].kind, max(st.max_new_tokens for st in mine[t])))
    return tasks


def make_sampler(cfg: Config, train_set):
    """Prompt sources: the plain epoch walk, MiMo's easy pool, or a staged curriculum (all resumable)."""
    import curriculum
    import resample

    if cfg.curriculum:
        mk = curriculum.skywork_stages if cfg.curriculum == "skywork" else curriculum.compass_stages
        base = cfg.max_new_tokens // 2 if cfg.curriculum == "skywork" else cfg.max_new_tokens
        stages = mk(cfg.max_steps, base, batch_size=cfg.batch_size // cfg.group_size, group_size=cfg.group_size)
        return curriculum.Curriculum(stages, [ex.level for ex in train_set], seed=cfg.seed, online_filter=cfg.online_filter)
    if cfg.easy_pool_alpha > 0 or cfg.drop_solved:
        return resample.EasyPool(len(train_set), alpha=cfg.easy_pool_alpha, seed=cfg.seed, refresh=not cfg.drop_solved)
    return PromptSampler(len(train_set), cfg.seed)


def setup(cfg: Config) -> Run:
    stages, sets, resume_from = load_inputs(cfg)
    import entropy
    import rollout
    import tiny

    accelerator = make_accelerator(cfg)
    sharded = is_sharded(accelerator)
    if sharded and (cfg.dynamic_sampling or cfg.seamless):  # also when FSDP comes from an accelerate config file
        raise SystemExit("error: FSDP cannot be combined with --dynamic-sampling / --seamless (see --fsdp)")
    if cfg.rollout_lag and accelerator.num_processes > 1:  # the producer thread would run collectives beside DDP's
        raise SystemExit(f"error: --rollout-lag: runs on one process, not {accelerator.num_processes} (async_rollout.py)")
    if cfg.threads and not torch.cuda.is_available():
        torch.set_num_threads(cfg.threads)
    dtype = torch.bfloat16 if precision(cfg) == "bfloat16" else torch.float32  # bf16-mixed: fp32 weights, bf16 autocast
    if cfg.lora_rank and precision(cfg) == "bf16-mixed":  # LoRA: the frozen base in bf16, no fp32 master copy
        dtype = torch.bfloat16
    with accelerator.main_process_first():  # N processes: the tiny model is built once, by the main process
        # a built-in code stage needs the tiny model whose cold start covered code too (models/tiny-qwen2-code)
        recipe = tiny.CODE_RECIPE if any(st.kind == "code" for st in stages) else tiny.TinyRecipe()
        model_path = cfg.model or tiny.get_tiny_model(recipe, verbose=accelerator.is_main_process)
    model, tok = (lora.load(cfg, model_path, dtype, resume_from) if cfg.lora_rank else  # base + adapter (resumed)
                  load_model(resume_from or model_path, dtype, flag="--resume" if resume_from else "--model"))
    for kind in {st.kind for st in stages}:
        data.check_template(tok, cfg.template, kind)
    check_context(model, max(st.max_new_tokens for st in stages))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # Seeded after the model exists: building the tiny model (its SFT) must not shift the sampling streams, so a
    # first run that builds it and a later run that finds it cached are the same run.
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed + accelerator.process_index)  # per-process sampling streams
    ref_model = load_model(model_path, dtype)[0].eval().requires_grad_(False) if cfg.kl_coef > 0 and not cfg.lora_rank else None
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.lora_rank and sharded:  # FSDP2 + LoRA: the root is the transformers model inside peft's wrapper (lora.py)
        optimizer = accelerator.prepare(model.get_base_model(), optimizer)[1]
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
    if cfg.lora_rank and cfg.kl_coef > 0:  # the reference for free: the same model with the adapter disabled
        ref_model = lora.Reference(accelerator.unwrap_model(model))
    if ref_model is not None and not cfg.lora_rank:  # (LoRA's reference is the policy itself: placed and sharded)
        ref_model = shard_reference(ref_model) if sharded else ref_model.to(accelerator.device)
    if ref_model is not None:
        if precision(cfg) == "bf16-mixed":  # the policy's forward runs under Accelerate's autocast: so does the reference
            ref_model.forward = torch.autocast(accelerator.device.type, dtype=torch.bfloat16)(ref_model.forward)
    if sharded:  # HF generate then steps all processes until the last one is done (synced_gpus): every forward gathers
        accelerator.unwrap_model(model)._is_fsdp_managed_module = True
    # FSDP: FastEngine's decode loop lets finished processes stop, but every sharded forward is a collective: HF
    # generate with synced_gpus instead
    policy = accelerator.unwrap_model(model)
    engine = rollout.make_engine("hf" if sharded and cfg.rollout == "fast" else cfg.rollout,
                                 lora.engine_view(policy, cfg) if cfg.lora_rank else policy,
                                 tok, model_path=model_path if cfg.lora_rank else resume_from or model_path,
                                 seed=cfg.seed, max_model_len=512 if not cfg.model else None,
                                 gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, enable_sleep=cfg.vllm_sleep,
                                 lora_rank=cfg.lora_rank if cfg.lora_vllm_sync == "adapter" else 0)
    ent_ctrl = entropy.AdaptiveEntropy(cfg.entropy_target, cfg.entropy_delta, c_max=cfg.entropy_max, timing=cfg.entropy_timing,
                                       strict=cfg.entropy_timing == "code") if cfg.adaptive_entropy else None
    run = Run(cfg, accelerator, model, tok, ref_model, optimizer, engine, ent_ctrl, make_tasks(cfg, stages, sets), stages)
    run.enter(0)
    run.producer = make_producer(run) if cfg.rollout_lag else None
    if resume_from:
        restore(run, resume_from, sharded)
    if accelerator.is_main_process:
        start_run_dir(run, model_path)
    if cfg.report_to != "none":  # TensorBoard: OUTPUT_DIR/tensorboard (config as hparams + hparams.yml); W&B: project
        accelerator.init_trackers("tensorboard" if cfg.report_to == "tensorboard" else "grpo-recipes",
                                  config=dataclasses.asdict(cfg),
                                  init_kwargs={"wandb": {"name": os.path.basename(os.path.abspath(cfg.output_dir)),
                                                         "dir": cfg.output_dir}})
    return run


def checkpoint(run: Run, step: int, wall_time_s: float) -> None:
    """OUTPUT_DIR/checkpoint-STEP (runs.save_checkpoint: atomic), then only the newest --keep-checkpoints kept."""
    cfg = run.cfg
    save_checkpoint(os.path.join(cfg.output_dir, f"checkpoint-{step}"), run.accelerator, run.model, run.tok, run.optimizer,
                    {"step": step, "samplers": [t.sampler.state_dict() for t in run.tasks], "history": run.history,
                     "evals": run.evals, "entropy": run.ent_ctrl.state_dict() if run.ent_ctrl else None,
                     "last_nll": run.last_nll, "wall_time_s": wall_time_s, "config": dataclasses.asdict(cfg),
                     "pending": pending_state(run.producer.pending) if run.producer else None})  # --rollout-lag
    if run.accelerator.is_main_process:
        runs.prune_checkpoints(cfg.output_dir, cfg.keep_checkpoints)


def pending_state(p) -> dict | None:
    """--rollout-lag: the producer's finished batch as plain data (no class of a script's __main__ in a checkpoint)."""
    if p is None:
        return None
    batch, timeouts, n_gen, extra = p.result
    return {"step": p.step, "version": p.version, "gen_time_s": p.gen_time_s, "round": vars(batch), "timeouts": timeouts,
            "n_gen": n_gen, "extra": extra}


def pending_from(d: dict):
    import async_rollout

    return async_rollout.Pending(d["step"], d["version"], (Round(**d["round"]), d["timeouts"], d["n_gen"], d["extra"]),
                                 d["gen_time_s"])


def restore(run: Run, ckpt: str, sharded: bool) -> None:
    """The optimizer, every process's RNG streams, the prompt samplers, the entropy controller and the history of the
    checkpoint `ckpt` (its weights were loaded with the model)."""
    st = torch.load(os.path.join(ckpt, "trainer_state.pt"), weights_only=False)
    if sharded:  # every process loads the full state and keeps its shards
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(run.model, run.optimizer, optim_state_dict=st["optimizer"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        run.optimizer.load_state_dict(st["optimizer"])
    set_rng_states(run.accelerator, st["rng"])
    for task, state in zip(run.tasks, st["samplers"]):
        task.sampler.load_state_dict(state)
    if run.ent_ctrl is not None:
        run.ent_ctrl.load_state_dict(st["entropy"])
    run.start_step, run.history, run.evals, run.wall_before, run.last_nll = (
        st["step"], st["history"], st["evals"], st["wall_time_s"], st["last_nll"])
    if run.producer is not None and st.get("pending") is not None:
        run.producer.put_back(pending_from(st["pending"]))  # generated before the checkpoint, by the previous weights


def start_run_dir(run: Run, model_path: str) -> None:
    """The run directory (main process): --overwrite clears the previous run's files; config.json (the model's
    resolved path in "model"), and metrics / evals rewritten from the checkpoint's history on resume."""
    cfg = run.cfg
    if cfg.overwrite and not cfg.resume:
        runs.clear_run(cfg.output_dir)
    os.makedirs(cfg.output_dir, exist_ok=True)
    runs.write_run_config(os.path.join(cfg.output_dir, "config.json"), {**dataclasses.asdict(cfg), "model": model_path})
    with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in run.history)
    with open(os.path.join(cfg.output_dir, "evals.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in run.evals)


# ------------------------------------------------------------------------------------------------
# Steps 1-3: prompts -> G completions each -> rewards (plain, dynamic sampling, seamless)
# ------------------------------------------------------------------------------------------------
class Round:
    """One generation round on this process: prompts, their G completions each, rewards and correctness."""

    def __init__(self, idx, exs, prompts, comps, rewards, correct, G, filt=None):
        self.idx, self.exs, self.prompts, self.comps, self.rewards, self.correct, self.G = idx, exs, prompts, comps, rewards, correct, G
        self.filt = filt  # what dynamic sampling compares: correct (--filter-metric acc) or the unshaped rewards (score)

    def groups(self):  # one item per prompt, for dapo.DynamicSampler
        G = self.G
        return [(self.idx[i], self.exs[i], self.prompts[i], self.comps[i * G:(i + 1) * G], self.rewards[i * G:(i + 1) * G],
                 self.correct[i * G:(i + 1) * G]) for i in range(len(self.idx))]

    @staticmethod
    def from_groups(groups, G):
        cat = lambda k: [x for g in groups for x in g[k]]  # noqa: E731
        return Round([g[0] for g in groups], [g[1] for g in groups], [g[2] for g in groups], cat(3), cat(4), cat(5), G)


class Collector:
    """Steps 1-3 of a training step on this process: draw prompts, generate G completions each, score them.

    Plain: one round of B prompts. Dynamic sampling (DAPO Alg. 1, dapo.py): rounds of --gen-batch-factor x B prompts
    until B mixed groups are kept (the first in generation order; the surplus is discarded); mixed = correctness
    differs (--filter-metric acc) or the verifier's partial scores differ (score, the code-strict/soft default).
    Seamless (MiMo Sec. 3.4.1, seamless.py): the same groups, launched as the pass-rate estimate says, scored while others generate.
    With N processes every process draws the same global prompt list (the samplers stay in lockstep) and keeps
    its share of whole groups. `observed` collects every generated group's pass rate, before any filter: MiMo's
    easy pool and the curriculum's online filter need the all-correct groups that dynamic sampling drops.
    """

    def __init__(self, run: Run, engine=None):
        self.run, self.cfg, self.acc = run, run.cfg, run.accelerator
        self.engine = engine or run.engine  # --rollout-lag: the producer's engine, on its own copy of the policy
        self.world, self.rank = run.accelerator.num_processes, run.accelerator.process_index
        self.observed: list = []  # (prompt index, pass rate) of every group generated this step
        self.seamless = None
        if self.cfg.seamless:
            import seamless

            self.seamless = seamless.SeamlessRollout(  # streaming with --rollout vllm (continuous batching), else waves
                run.engine, run.reward_fn, self.cfg.group_size,
                max_wave=max(4, self.cfg.seamless_max_wave or self.cfg.batch_size // self.cfg.group_size // 2),
                filter_metric=self.cfg.filter_metric)

    def take_prompts(self, step, n_global, strided=False):
        """This process's slice of the global draw: a contiguous block of whole groups, or (strided) every world-th
        prompt from its rank on, so that draws of any size give each process its own prompts."""
        s, cfg = self.run.sampler, self.cfg
        idx = s.next_batch(step, n_global)[0] if cfg.curriculum else s.take(n_global) if isinstance(s, PromptSampler) else s.sample(n_global)
        if strided:
            return idx[self.rank::self.world]
        n_local = n_global // self.world
        return idx[self.rank * n_local : (self.rank + 1) * n_local]

    def shape(self, comps, rewards, sp):
        """DAPO Eq. 13: the soft overlong punishment is added to the correctness reward, before the group statistics."""
        if not self.cfg.overlong_buffer:
            return rewards
        import dapo

        pen = dapo.overlong_penalty([c.length for c in comps], sp.max_new_tokens, self.cfg.overlong_buffer)
        return (torch.tensor(rewards) + pen).tolist()

    def round(self, step, n_global, G, sp):
        """One plain round: (Round, reward timeouts)."""
        run = self.run
        idx = self.take_prompts(step, n_global)
        exs = [run.train_set[i] for i in idx]
        prompts = [run.prompt(ex.prompt) for ex in exs]
        comps = [c for g in self.engine.generate(prompts, G, sp) for c in g]  # (N,) prompt-major
        rewards, correct, rm = run.reward_fn([c.text for c in comps], [ex.answer for ex in exs for _ in range(G)])
        self.observed.extend(zip(idx, torch.tensor(correct, dtype=torch.float).view(-1, G).mean(1).tolist()))
        filt = correct if filter_metric_for(self.cfg, run.stage.reward) == "acc" else rewards
        return Round(idx, exs, prompts, comps, self.shape(comps, rewards, sp), correct, G, filt), rm["reward/timeouts"]

    def collect(self, step, n_prompts, G, sp):
        """The step's batch on this process: (Round, reward timeouts, responses generated, technique metrics)."""
        self.observed, extra = [], {}
        if self.cfg.dynamic_sampling and self.seamless is not None:
            batch = self._seamless(step, n_prompts, G, sp, extra)
            timeouts, n_gen = extra.pop("reward/timeouts"), extra.pop("rollout/generated")
        elif self.cfg.dynamic_sampling:
            batch, timeouts, n_gen = self._dynamic(step, n_prompts, G, sp, extra)
        else:
            batch, timeouts = self.round(step, n_prompts, G, sp)
            n_gen = len(batch.comps)
        return batch, timeouts, n_gen, extra

    def _dynamic(self, step, n_prompts, G, sp, extra):
        import dapo

        ds = dapo.DynamicSampler(n_prompts // self.world, G, self.cfg.max_gen_rounds)
        n_gen, timeouts = 0, 0
        while True:
            n_draw = n_prompts * self.cfg.gen_batch_factor  # verl gen_batch_size (DAPO recipe: 3 x the train batch)
            if ds.full:  # another process is still short: draw (and skip) its round to keep samplers in lockstep
                self.take_prompts(step, n_draw)
            else:
                rnd, to = self.round(step, n_draw, G, sp)
                ds.add(rnd.groups(), torch.tensor(rnd.filt, dtype=torch.float64))  # raises after --max-gen-rounds
                n_gen, timeouts = n_gen + len(rnd.comps), timeouts + to
            if not self.acc.reduce(torch.tensor([0.0 if ds.full else 1.0], device=self.acc.device), "sum").item():
                break
        extra.update(ds.metrics())
        return Round.from_groups(ds.take(), G), timeouts, n_gen

    def _seamless(self, step, n_prompts, G, sp, extra):
        run, sr, world = self.run, self.seamless, self.world
        n_local = n_prompts // world  # each process collects its share of the groups
        sr.G, sr.max_groups = G, n_local * self.cfg.max_gen_rounds if self.cfg.max_gen_rounds > 0 else 10**9
        sr.shape = (lambda comps, r: self.shape(comps, r, sp)) if self.cfg.overlong_buffer else None
        drawn = [0]

        def nxt(k):  # k prompts for this process: positions rank, rank + world, ... of the global draw
            drawn[0] += k
            return [(i, run.train_set[i], run.prompt(run.train_set[i].prompt), run.train_set[i].answer)
                    for i in self.take_prompts(step, k * world, strided=True)]

        batch = Round.from_groups(sr.collect(nxt, n_local, sp), G)
        if world > 1:  # processes drew different amounts: all draw (and skip) up to the largest, in lockstep
            most = int(self.acc.reduce(torch.tensor([float(drawn[0])], device=self.acc.device), "max").item())
            if most > drawn[0]:
                self.take_prompts(step, (most - drawn[0]) * world)
        self.observed.extend(sr.last_observed)  # every scored group, for the easy pool / online filter
        extra.update(sr.last_metrics)
        return batch

    def feed_sampler(self, step, extra):
        """Every generated group's pass rate goes to MiMo's easy pool / the curriculum's online filter; all processes
        see all of them, so the samplers stay identical (checked: a digest of each process's sampler, every step)."""
        from accelerate.utils import gather_object

        s, cfg = self.run.sampler, self.cfg
        observed = extra.pop("_observed", self.observed)  # --rollout-lag: what the producer's collector observed
        seen = gather_object(observed) if self.world > 1 else observed
        if cfg.easy_pool_alpha > 0 or cfg.drop_solved:
            s.update([i for i, _ in seen], [p for _, p in seen])
            extra.update(s.metrics())
        elif cfg.curriculum:
            s.observe([i for i, _ in seen], [p for _, p in seen])
            extra.update(s.metrics())
        if self.world > 1:  # invariant: every process holds the same prompt sampler (else they train on other data)
            st = {k: v for k, v in s.state_dict().items() if k != "last_share"}  # last_share: a metric
            if len(set(gather_object([hashlib.sha256(repr(st).encode()).hexdigest()]))) > 1:
                raise RuntimeError(f"step {step + 1}: the prompt samplers of the {self.world} processes diverged")

    def close(self):
        if self.seamless is not None:
            self.seamless.close()


# ------------------------------------------------------------------------------------------------
# Step 4: advantages; step 5: the policy update
# ------------------------------------------------------------------------------------------------
def advantages(cfg: Config, batch: Round, G: int, extra: dict):
    """Group-relative advantages (a group lives on one process, so this is exact) and the responses kept."""
    import curriculum

    adv = grpo.group_advantages(torch.tensor(batch.rewards, dtype=torch.float64), G, scale_by_std=cfg.scale_adv_by_std)  # (N,)
    keep = torch.ones(len(batch.comps), dtype=torch.bool)
    if cfg.rejection_sampling:  # Skywork-OR1 Sec. 3.1: zero-advantage groups leave, nothing replaces them (on the
        # rewards, so partial-credit groups with different scores stay whatever --filter-metric says)
        keep = curriculum.reject_zero_advantage(adv, G).repeat_interleave(G)
        extra["rollout/groups_kept_frac"] = keep.float().mean().item()
    return adv, keep


def entropy_coef(run: Run, p_ids, r_ids, extra: dict) -> float:
    """This step's entropy coefficient: Ring-lite's constant, or Skywork-OR1's adaptive alpha_k (entropy.py).

    --entropy-timing code (Skywork's released trainer updates its controller after the actor update): the controller
    is fed the previous rollout's sampled-token NLL e_{k-1}, updates c, then step k uses c_k * 1{e_{k-1} < tgt}; at
    step 0 there is no estimate and alpha_0 = 0 (c_0 = 0). --entropy-timing paper (Eq. 3.2): e_k is this rollout's
    NLL under pi_old, measured here by one extra forward pass over the kept responses (all processes' tokens), and
    alpha_k = c_k * 1{e_k <= tgt} is used before c_{k+1} is computed. No kept response (rejection sampling): alpha 0,
    the controller does not move.
    """
    ctrl = run.ent_ctrl
    if ctrl is None:
        return run.cfg.entropy_coef
    e = rollout_nll(run, p_ids, r_ids) if run.cfg.entropy_timing == "paper" else run.last_nll
    if e is None:
        extra["policy/entropy_coef"] = 0.0
        return 0.0
    alpha = ctrl.step(e)
    extra.update(ctrl.metrics())
    return alpha


def rollout_nll(run: Run, p_ids, r_ids) -> float | None:
    """-mean log pi_old over the response tokens of every process's kept responses (Skywork's entropy estimate)."""
    lps = old_logprobs(run.cfg, run.model, run.tok, p_ids, r_ids, run.accelerator.device) if r_ids else []
    t = torch.tensor([-sum(lp.sum().item() for lp in lps), float(sum(len(lp) for lp in lps))], dtype=torch.float64)
    s = run.accelerator.reduce(t.to(run.accelerator.device), "sum").tolist()
    return s[0] / s[1] if s[1] else None


def tokens_that_count(cfg: Config, mb: list[int], r_ids, truncated, world: int):
    """Per response of a mini-batch, how many of its tokens enter the loss, and C3PO's selection (or None).

    C3PO (c3po.py): a greedy selection of exactly Phi tokens (Phi / world per process) in rollout order.
    DAPO's overlong filter: truncated responses contribute none (they stay in the group statistics).
    """
    import c3po

    lens = [len(r_ids[i]) for i in mb]
    kept, budget_metrics = None, {}
    if cfg.token_budget:
        kept = c3po.budget_select(lens, cfg.token_budget // world) if mb else torch.zeros(0, dtype=torch.long)
        budget_metrics = c3po.budget_metrics(lens, kept, cfg.token_budget // world) if mb else {}
    n_tok = lens if kept is None else kept.tolist()
    if cfg.overlong_filter:
        n_tok = [0 if truncated[i] else t for t, i in zip(n_tok, mb)]
    return n_tok, kept, budget_metrics


def microbatch_loss(cfg: Config, model, ref_model, batch, adv, old_logp, mask, alpha, num_seqs, num_tokens, world=1,
                    engine_logp=None):
    """The loss of one micro-batch (grpo.py / dapo.py / c3po.py policy_loss, + entropy.py's bonus).

    batch: make_batch rows; adv (n,); old_logp (n, R) log pi_old of the sampled tokens, or None on-policy (ratio 1,
    the gradient is REINFORCE's); mask (n, R) the tokens that count; num_seqs / num_tokens the mini-batch's global
    normalisers; world the number of processes (C3PO's budget is Phi / world per process); engine_logp (n, R) the engine's sampling log-probs for truncated IS (--tis-cap), or None.
    Returns the loss to backward and its statistics.
    """
    import c3po
    import entropy
    from rollout import tis_weights

    logp, ent = response_logprobs(model, batch, cfg.temperature, with_entropy=True, chunk_size=cfg.logprob_chunk)  # (n, R)
    old = logp.detach() if old_logp is None else old_logp
    ref = None
    if ref_model is not None:
        with torch.no_grad():
            ref = response_logprobs(ref_model, batch, cfg.temperature, chunk_size=cfg.logprob_chunk)[0]
    tis = tis_weights(old, engine_logp, mask, cfg.tis_cap) if engine_logp is not None else None
    common = dict(loss_agg="budget", budget=cfg.token_budget / world) if cfg.token_budget else dict(loss_agg=cfg.loss_agg)
    loss_fn = c3po.policy_loss if cfg.token_budget else grpo.policy_loss  # dapo's = grpo's with DAPO's arguments
    loss, m = loss_fn(logp, old, adv, mask, ref, clip_low=cfg.clip_low, clip_high=cfg.clip_high, kl_coef=cfg.kl_coef,
                      num_seqs=num_seqs, num_tokens=num_tokens, token_weights=tis, **common)
    if alpha:
        eterm, _ = entropy.entropy_loss(ent, mask, alpha, num_seqs=num_seqs, num_tokens=num_tokens, **common)
        loss = loss + eterm
    stats = {"loss": loss.item(), **m, "entropy_sum": (ent * mask).sum().item(), "tokens": mask.sum().item(),
             "nll_sum": -(old * batch[4]).sum().item(), "resp_tokens": batch[4].sum().item()}
    if tis is not None:  # truncated IS: engine (behaviour) vs trainer's pi_old, per token
        stats["tis"] = [(tis * mask).sum().item(), ((tis >= cfg.tis_cap) & mask.bool()).sum().item(),
                        ((old - engine_logp).abs() * mask).sum().item(), mask.sum().item(), (tis * tis * mask).sum().item()]
    return loss, stats


def update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, r_ids, adv, truncated, alpha, step,
                  engine_lp=None) -> dict:
    """Step 5: `epochs` passes over the rollout batch, each split into batch_size / mini_batch_size mini-batches,
    one optimizer update per mini-batch: the tokens that count -> the loss of each micro-batch, accumulated ->
    clip, step -> metrics.

    Normalisers are global: a mini-batch's sequence and token counts are summed over its micro-batches and over
    processes, and each micro-batch loss is divided by them (times the world size, because DDP averages gradients
    over processes). Gradient accumulation therefore reproduces the one-big-batch gradient exactly. Every process
    makes the same number of updates (DDP needs it), even when filtering left it fewer responses than the others.

    engine_lp (with --tis-cap): per response, the engine's sampling log-probs; each token's surrogate term is then
    weighted by min(exp(log pi_old - log pi_engine), cap) (rollout.tis_weights).
    """
    device, world = accelerator.device, accelerator.num_processes
    N = len(r_ids)
    n_chunks = max(1, cfg.batch_size // cfg.mini_batch_size)  # mini-batches per epoch, the same on every process
    mu = cfg.epochs * n_chunks
    if accelerator.reduce(torch.tensor([float(N)], device=device), "sum").item() == 0:
        return {"policy/updates": 0}  # Skywork: nothing survived rejection sampling anywhere: skip the update
    if engine_lp is not None and any(lp is None or len(lp) != len(r) for lp, r in zip(engine_lp, r_ids)):
        raise RuntimeError("--tis-cap: the rollout engine returned no log-probs for a response")
    sharded = is_sharded(accelerator)
    old_logp = None  # with mu == 1: logp.detach()
    if mu > 1:
        n_fwd = -(-N // cfg.micro_batch_size)
        with torch.no_grad():
            for _ in range(lockstep(accelerator, n_fwd) - n_fwd):
                dummy_forward(cfg, model, tok, device)
        old_logp = old_logprobs(cfg, model, tok, p_ids, r_ids, device)
    g = torch.Generator().manual_seed(cfg.seed * 100003 + step)
    log = UpdateLog()
    for epoch in range(cfg.epochs):
        order = torch.randperm(N, generator=g).tolist() if mu > 1 else list(range(N))
        for mb in [c.tolist() for c in torch.tensor(order, dtype=torch.long).tensor_split(n_chunks)]:
            # (a) the tokens that count, and the mini-batch's global normalisers
            n_tok, kept, budget_metrics = tokens_that_count(cfg, mb, r_ids, truncated, world)
            log.extra = budget_metrics if mb else log.extra
            n_seq = float(sum(n > 0 for n in n_tok))  # responses with a token in the loss (verl; grpo.aggregate)
            counts = accelerator.reduce(torch.tensor([n_seq, float(sum(n_tok))], device=device), "sum").cpu() / world
            seqs, toks = max(counts[0].item(), 1e-9), max(counts[1].item(), 1e-9)
            # (b) the loss of each micro-batch, gradients accumulated (DDP all-reduces once, on the last)
            micro = split_micro(mb, p_ids, r_ids, cfg.micro_batch_size, cfg.micro_batch_tokens)
            micro += [[]] * (lockstep(accelerator, len(micro)) - len(micro))  # FSDP: as many forwards everywhere
            stats = []
            for k, mc in enumerate(micro):
                with accelerator.no_sync(model) if k < len(micro) - 1 else contextlib.nullcontext():
                    if not mc:  # no responses here this update: a zero loss still joins the gradient all-reduce
                        accelerator.backward(dummy_forward(cfg, model, tok, device) if sharded
                                             else sum(p.sum() for p in model.parameters()) * 0.0)
                        continue
                    batch = make_batch(tok, [p_ids[i] for i in mc], [r_ids[i] for i in mc], device)
                    R = batch[3].shape[1]
                    mask = batch[4]  # (n, R)
                    if cfg.overlong_filter:  # DAPO Sec. 3.4: truncated responses leave the loss (not the group stats)
                        mask = mask * torch.tensor([not truncated[i] for i in mc], device=device).unsqueeze(1)
                    if kept is not None:
                        import c3po

                        mask = c3po.budget_mask(mask, kept[[mb.index(i) for i in mc]])
                    old = pad_rows([old_logp[i] for i in mc], R, device) if old_logp is not None else None
                    eng = pad_rows([engine_lp[i] for i in mc], R, device) if engine_lp is not None else None
                    loss, s = microbatch_loss(cfg, model, ref_model, batch, adv[mc].to(device), old, mask, alpha, seqs, toks,
                                              world, eng)
                    accelerator.backward(loss)
                stats.append(s)
            # (c) clip, step
            gn = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            for pg in optimizer.param_groups:
                pg["lr"] = cfg.lr * min(1.0, (step * mu + log.updates + 1) / max(1, cfg.warmup_steps))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            # (d) metrics
            log.add(stats, float(gn), first_epoch=epoch == 0)
    return log.result(accelerator, optimizer, alpha)


def lockstep(accelerator, n: int) -> int:
    """FSDP: every forward is a collective, so all processes run the largest count of them (n elsewhere)."""
    if not is_sharded(accelerator):
        return n
    return int(accelerator.reduce(torch.tensor([float(n)], device=accelerator.device), "max").item())


def dummy_forward(cfg, model, tok, device):
    """FSDP: a zero loss from a one-token forward, so a process with nothing left joins the others' passes."""
    pad = tok.pad_token_id
    return response_logprobs(model, make_batch(tok, [[pad]], [[pad]], device), cfg.temperature,
                             chunk_size=cfg.logprob_chunk)[0].sum() * 0.0


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


class UpdateLog:
    """Step 5's metrics: per update, token-weighted means over its micro-batches; over updates, plain means."""

    def __init__(self):
        self.agg = {"loss": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
        self.updates, self.nll_sum, self.nll_tok, self.extra = 0, 0.0, 0, {}
        self.tis = [0.0] * 5  # sum of weights, capped tokens, sum |log pi_old - log pi_engine|, tokens, sum of weights^2

    def add(self, stats: list[dict], grad_norm: float, first_epoch: bool):
        T = sum(s["tokens"] for s in stats) or 1
        self.agg["loss"] += sum(s["loss"] for s in stats)
        for key in ("clip_frac_low", "clip_frac_high", "kl"):
            self.agg[key] += sum(s[key] * s["tokens"] for s in stats) / T
        self.agg["entropy"] += sum(s["entropy_sum"] for s in stats) / T
        self.agg["grad_norm"] += grad_norm
        self.updates += 1
        for s in stats:
            if first_epoch:  # the sampled tokens' NLL under pi_old: Skywork's entropy estimate for the next step
                self.nll_sum, self.nll_tok = self.nll_sum + s["nll_sum"], self.nll_tok + s["resp_tokens"]
            if "tis" in s:
                self.tis = [a + b for a, b in zip(self.tis, s["tis"])]

    def result(self, accelerator, optimizer, alpha) -> dict:
        out = {f"policy/{k}" if k != "grad_norm" else "perf/grad_norm": v / self.updates for k, v in self.agg.items()}
        out.update({"policy/updates": self.updates, "perf/lr": optimizer.param_groups[0]["lr"], **self.extra})
        if any(self.tis):  # over every process's tokens (each process has its own engine to check)
            t = accelerator.reduce(torch.tensor(self.tis, dtype=torch.float64, device=accelerator.device), "sum").tolist()
            if t[3]:
                out.update({"policy/tis_weight_mean": t[0] / t[3], "policy/tis_capped_frac": t[1] / t[3],
                            "policy/engine_logp_gap": t[2] / t[3],  # with --rollout-lag: |log pi_prox - log pi_behav|
                            "policy/tis_ess": t[0] ** 2 / (t[3] * t[4]) if t[4] else 1.0})  # effective sample size / tokens
        if self.nll_tok:
            out["policy/sampled_nll"] = self.nll_sum / self.nll_tok
        if alpha:
            out["policy/entropy_coef"] = alpha
        return out


# ------------------------------------------------------------------------------------------------
# Step 6: metrics, evaluation
# ------------------------------------------------------------------------------------------------
def step_stats(accelerator, batch, G, timeouts, n_gen) -> dict:
    """The step's rollout metrics, summed over processes (`_tokens`: response tokens, for the throughput)."""
    world, comps = accelerator.num_processes, batch.comps
    stats = accelerator.gather(torch.tensor(
        [sum(batch.rewards), sum(r * r for r in batch.rewards), sum(batch.correct), len(comps), sum(c.length for c in comps),
         max(c.length for c in comps), sum(c.truncated for c in comps), timeouts,
         float((torch.tensor(batch.rewards).view(-1, G).std(1) == 0).sum()), len(batch.idx), n_gen],
        dtype=torch.float64).to(accelerator.device)
    ).view(world, -1).cpu()
    s = stats.sum(0)
    s[5] = stats[:, 5].max()
    n = s[3].item()
    out = {"reward/mean": s[0].item() / n, "reward/std": math.sqrt(max(0.0, s[1].item() / n - (s[0].item() / n) ** 2)),
           "rollout/accuracy": s[2].item() / n, "rollout/frac_zero_std": s[8].item() / s[9].item(),
           "rollout/response_length": s[4].item() / n, "rollout/response_length_max": s[5].item(),
           "rollout/truncated_frac": s[6].item() / n, "reward/timeouts": int(s[7].item()), "rollout/generated": int(s[10].item()),
           "_tokens": s[4].item()}
    # per difficulty level (when the data has levels): groups, and groups with a signal (rewards not all equal)
    signal = (torch.tensor(batch.rewards, dtype=torch.float64).view(-1, G).std(1) > 0).tolist()
    per_level = torch.zeros(2, 5, dtype=torch.float64)
    for ex, sig in zip(batch.exs, signal):
        if ex.level in (1, 2, 3, 4, 5):
            per_level[:, ex.level - 1] += torch.tensor([1.0, float(sig)], dtype=torch.float64)
    per_level = accelerator.reduce(per_level.to(accelerator.device), "sum").cpu()
    for lv in range(5):
        if per_level[0, lv] > 0:
            out[f"rollout/groups_level{lv + 1}"] = int(per_level[0, lv].item())
            out[f"rollout/signal_frac_level{lv + 1}"] = per_level[1, lv].item() / per_level[0, lv].item()
    return out


def run_eval(run: Run, step: int, sampled: bool = False) -> dict | None:
    """Held-out greedy accuracy, and with `sampled` avg@k / pass@k (k = --eval-samples, at --eval-temperature and
    --eval-top-p: each recipe sets its paper's), on the main process; completions to samples.jsonl; the row joins
    run.evals. The loop samples at the first and the final evaluation only (k x the problems' generations each).
    With several tasks (--stages) each is evaluated at its longest stage's length; its metrics are `eval/<task>/...`,
    and eval/accuracy is their mean."""
    from evaluate import evaluate

    if not run.accelerator.is_main_process and not is_sharded(run.accelerator):
        return None
    cfg = run.cfg
    k = cfg.eval_samples if sampled else 0
    row, shown = {"step": step}, []
    for task in run.tasks:
        with torch.random.fork_rng():  # evaluation never shifts the training sampling stream
            torch.manual_seed(cfg.seed + 7919)  # the same sampled evaluation before and after, whatever came between
            res = evaluate(run.engine, run.tok, task.eval_set, task.reward_fn, samples=k, ks=(1, k) if k else (1,),
                           temperature=cfg.eval_temperature, top_p=cfg.eval_top_p, max_new_tokens=task.max_new_tokens,
                           n_show=8, kind=task.kind, template=cfg.template, system=cfg.system_prompt, stop=cfg.stops)
        prefix = "eval/" if len(run.tasks) == 1 else f"eval/{task.name}/"
        shown += [{"step": step, **({"task": task.name} if len(run.tasks) > 1 else {}), **s} for s in res.pop("samples")]
        row.update({prefix + key: v for key, v in res.items()})
    if len(run.tasks) > 1:
        row["eval/accuracy"] = sum(row[f"eval/{t.name}/accuracy"] for t in run.tasks) / len(run.tasks)
    if not run.accelerator.is_main_process:  # FSDP: every process ran the same evaluation, in lockstep
        return None
    run.accelerator.log({key: v for key, v in row.items() if key != "step" and isinstance(v, (int, float))}, step=step)
    with open(os.path.join(cfg.output_dir, "samples.jsonl"), "a") as f:
        f.writelines(json.dumps(s, default=str) + "\n" for s in shown)
    with open(os.path.join(cfg.output_dir, "evals.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    run.evals.append(row)
    return row


def finish(run: Run, wall_time_s: float):
    """summary.json and curves.png (main process), and the last line a reader sees."""
    if not run.accelerator.is_main_process:
        return
    before, after = run.evals[0], run.evals[-1]
    summary = {"accuracy_before": before["eval/accuracy"], "accuracy_after": after["eval/accuracy"],
               "wall_time_s": wall_time_s, "steps": run.cfg.max_steps, "recipe": run.cfg.recipe,
               "eval_problems": sum(len(t.eval_set) for t in run.tasks), "before": before, "after": after}
    k, lines = run.cfg.eval_samples, []
    for task in run.tasks:
        p, name = ("eval/", "") if len(run.tasks) == 1 else (f"eval/{task.name}/", f"{task.name} ")
        avg = f"{p}avg@{k}"
        if len(run.tasks) > 1:
            summary[f"{name}accuracy_before"], summary[f"{name}accuracy_after"] = before[p + "accuracy"], after[p + "accuracy"]
        if avg in before and avg in after:
            summary.update({f"{name}avg@{k}_before": before[avg], f"{name}avg@{k}_after": after[avg],
                            f"{name}pass@{k}_before": before[f"{p}pass@{k}"], f"{name}pass@{k}_after": after[f"{p}pass@{k}"]})
        sampled = (f"; avg@{k} {before[avg]:.3f} -> {after[avg]:.3f}, pass@{k} {before[f'{p}pass@{k}']:.3f} -> "
                   f"{after[f'{p}pass@{k}']:.3f} (T {run.cfg.eval_temperature}, top-p {run.cfg.eval_top_p})") if avg in after else ""
        lines.append((f"{name}held-out greedy accuracy: {before[p + 'accuracy']:.3f} -> {after[p + 'accuracy']:.3f}{sampled}",
                      len(task.eval_set)))
    with open(os.path.join(run.cfg.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    c = run.cfg
    plot_curves(run.history, run.evals, os.path.join(c.output_dir, "curves.png"),
                f"{c.output_dir}: --recipe {c.recipe}, {os.path.basename(c.model.rstrip('/')) or 'tiny model'}, "
                f"{c.max_steps} steps, seed {c.seed}")
    tail = f", {wall_time_s:.0f}s); run directory: {run.cfg.output_dir}"  # after the last task's line
    print("\n".join(f"{text} ({n} problems" + (tail if i == len(lines) - 1 else ")") for i, (text, n) in enumerate(lines)))


# ------------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------------
def main(argv=None):
    """Parse, set up, train; Ctrl-C ends it with one line and exit status 130 (runs.interrupted)."""
    quiet_libraries()
    cfg = parse_config(argv)
    run = None
    try:
        run = setup(cfg)  # everything that can fail on bad input is checked before the run directory is touched
        return train(run)
    except KeyboardInterrupt:  # the producer thread and the reward workers are stopped before the line
        runs.interrupted(cfg.output_dir, run.step if run else None, cfg.max_steps, "LOCAL_RANK" in os.environ,
                         stop=[run.producer, *(t.reward_fn for t in run.tasks)] if run else ())


def quiet_libraries():
    """transformers' and the hub's load / save progress bars and info lines off: the training bar is the one bar."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def plan(run: Run, step: int):
    """(G, prompts, SamplingParams) of `step`: its stage's data and length (--stages), its curriculum stage's sizes."""
    cfg = run.cfg
    length = run.enter(step).max_new_tokens  # --stages: this step's data, reward and length
    stage = run.sampler.stage_at(step) if cfg.curriculum else None  # curriculum: this stage's G, batch and length
    G = stage.group_size if stage else cfg.group_size
    n_prompts = stage.batch_size if stage else cfg.batch_size // cfg.group_size
    if n_prompts % run.accelerator.num_processes:
        raise SystemExit(f"error: {n_prompts} prompts per step do not split over {run.accelerator.num_processes} processes")
    return G, n_prompts, SamplingParams(cfg.temperature, cfg.top_p, stage.max_new_tokens if stage else length, cfg.stops)


def make_producer(run: Run):
    """--rollout-lag 1: a producer (async_rollout.py) with its own copy of the policy and engine, whose batch carries
    log pi_behav: a forward pass of that copy over what it generated (the engines here return no log-probs)."""
    import copy

    import async_rollout
    import rollout

    cfg = run.cfg
    twin = copy.deepcopy(run.accelerator.unwrap_model(run.model)).eval().requires_grad_(False)
    collector = Collector(run, rollout.make_engine(cfg.rollout, twin, run.tok))

    def produce(step):
        t0 = time.time()
        G, n_prompts, sp = plan(run, step)
        batch, timeouts, n_gen, extra = collector.collect(step, n_prompts, G, sp)
        t1 = time.time()
        extra["_observed"] = collector.observed
        if all(c.logprobs is not None for c in batch.comps):  # the fast engine: the sampler's own log-probs
            extra["_behav"] = [torch.tensor(c.logprobs) for c in batch.comps]
        else:  # the hf engine reports none: a forward pass of the producer's weights (as slow as half an update)
            p_ids = [run.tok(batch.prompts[i // G], add_special_tokens=False)["input_ids"] for i in range(len(batch.comps))]
            extra["_behav"] = old_logprobs(cfg, twin, run.tok, p_ids, [c.token_ids for c in batch.comps], run.accelerator.device)
        extra.update({"async/collect_s": t1 - t0, "async/behav_logp_s": time.time() - t1})  # generate + score; pi_behav
        return batch, timeouts, n_gen, extra

    return async_rollout.Producer(twin, produce, threaded=cfg.rollout_worker == "thread")


def take_lagged(run: Run, step: int):
    """The batch of `step` from the producer (generated by theta_{step-1}; at the first step, by theta_step itself)."""
    if run.producer.pending is None and not run.producer.busy:  # the first step: nothing was made ahead
        run.producer.start(step, run.accelerator.unwrap_model(run.model), version=step)
    pending, waited = run.producer.take()
    batch, timeouts, n_gen, extra = pending.result
    extra.update({"async/lag": step - pending.version, "async/version": pending.version,
                  "async/trainer_wait_s": waited, "async/gen_time_s": pending.gen_time_s})
    return batch, timeouts, n_gen, extra


def train(run: Run):
    """The loop: steps 1-6 from the checkpoint's step (or 0) to --max-steps, then the final evaluation."""
    from tqdm import tqdm

    cfg, acc, model, tok, engine = run.cfg, run.accelerator, run.model, run.tok, run.engine
    collector, t_start = Collector(run), time.time()
    if not run.evals:
        if acc.is_main_process:
            print(f"evaluating the initial policy on {' + '.join(str(len(t.eval_set)) for t in run.tasks)} held-out problems ...",
                  flush=True)
        run_eval(run, 0, sampled=True)
    bar = tqdm(range(run.start_step, cfg.max_steps), initial=run.start_step, total=cfg.max_steps,
               disable=not acc.is_main_process, dynamic_ncols=True)
    for step in bar:
        t0, run.step = time.time(), step
        G, n_prompts, sp = plan(run, step)
        stage_no = run.stages.index(run.stage) + 1  # read now: with --rollout-lag the producer enters the next stage

        # 1-3. sample prompts, generate G completions each, score them (dynamic sampling: until the batch is full);
        # --rollout-lag 1: the producer made this batch with the previous weights while the last update ran
        try:
            batch, timeouts, n_gen, extra = (take_lagged(run, step) if run.producer else
                                             collector.collect(step, n_prompts, G, sp))
        except dapo.DynamicSamplingExhausted as e:  # the data is too easy or too hard for the model: one line
            raise SystemExit(f"error: step {step + 1}: {e}") from None
        t_gen = time.time() - t0
        collector.feed_sampler(step, extra)  # every group's pass rate -> MiMo's easy pool / the online filter
        if run.producer and step + 1 < cfg.max_steps:  # sync point: theta_step to the producer, for batch step + 1
            extra["async/producer_idle_s"] = run.producer.start(step + 1, acc.unwrap_model(model), version=step)

        # 4. group-relative advantages (Skywork's rejection sampling drops zero-advantage groups)
        adv, keep = advantages(cfg, batch, G, extra)
        sel = keep.nonzero().flatten().tolist()
        p_ids = [tok(batch.prompts[i // G], add_special_tokens=False)["input_ids"] for i in sel]
        r_ids = [batch.comps[i].token_ids for i in sel]
        alpha = entropy_coef(run, p_ids, r_ids, extra)  # Ring-lite's constant or Skywork-OR1's alpha_k

        # 5. mu optimizer updates over mini-batches of the rollout batch
        behav = extra.pop("_behav", None)  # --rollout-lag: log pi_behav, the producer's forward pass
        engine_lp = [(behav or [c.logprobs for c in batch.comps])[i] for i in sel] if cfg.tis_cap else None
        if cfg.vllm_sleep and hasattr(engine, "sleep"):  # colocated on one GPU: give training the KV-cache memory
            engine.sleep()  # sync_weights / generate wake it up again
        umetrics = update_policy(cfg, acc, model, run.ref_model, run.optimizer, tok, p_ids, r_ids, adv[sel],
                                 [batch.comps[i].truncated for i in sel], alpha, step, engine_lp)
        run.last_nll = umetrics.pop("policy/sampled_nll", run.last_nll)
        weights = GatheredWeights(model) if is_sharded(acc) and cfg.rollout == "vllm" else acc.unwrap_model(model)
        engine.sync_weights(lora.engine_view(weights, cfg) if cfg.lora_rank else weights)

        # 6. log, evaluate, checkpoint
        row = {"step": step + 1, **step_stats(acc, batch, G, timeouts, n_gen), **extra, **umetrics}
        if len(run.stages) > 1:
            row["stage"] = stage_no
        dt = time.time() - t0
        row.update({"perf/tokens_per_s": row.pop("_tokens") / dt, "perf/step_time_s": dt, "perf/gen_time_s": t_gen})
        run.history.append(row)
        bar.set_postfix(reward=f"{row['reward/mean']:.3f}", acc=f"{row['rollout/accuracy']:.3f}", len=f"{row['rollout/response_length']:.1f}")
        done = step + 1 == cfg.max_steps
        due_eval = bool(cfg.eval_every and (step + 1) % cfg.eval_every == 0 and not done)
        if run.producer and (due_eval or done or (cfg.save_every and (step + 1) % cfg.save_every == 0)):
            run.producer.wait()  # evaluation and checkpoints happen with the producer idle (its batch is saved)
        if due_eval:
            e = run_eval(run, step + 1)
            if e:
                bar.write(f"step {step + 1}: held-out greedy accuracy {e['eval/accuracy']:.3f}")
        if acc.is_main_process:
            with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
        acc.log({k: v for k, v in row.items() if k != "step"}, step=step + 1)  # trackers (main process; --report-to)
        if done or (cfg.save_every and (step + 1) % cfg.save_every == 0):
            checkpoint(run, step + 1, run.wall_before + time.time() - t_start)
    bar.close()
    run.step = None
    run_eval(run, cfg.max_steps, sampled=True)
    collector.close()
    for task in run.tasks:
        if hasattr(task.reward_fn, "close"):
            task.reward_fn.close()
    finish(run, run.wall_before + time.time() - t_start)
    for tracker in acc.trackers:  # flush and close (Accelerator.end_training would also tear down the process group)
        tracker.finish()
    acc.wait_for_everyone()
    return run.history


if __name__ == "__main__":
    sys.exit(data.cli(main))
