"""The flags and the recipes: every flag of train.py, each paper's settings, and the command line that reads them.

    python train.py --help                      # the flags a first run uses, then every flag by group
    python train.py --recipe dapo --lr 3e-6     # a recipe sets a paper's defaults; a flag given still wins

Each field of `Config` is declared once, with everything about it (`flag(GROUP, default, help, choices=..., check=...,
resume=..., core=...)`): its --help group, default, text and choices, the check of its value, what --resume does when
the command line changes it (runs.RESUME_RULES), and whether --help lists it among the first flags. `build_parser`
makes the command line from the fields, `Config.validate` runs their checks and the rules between flags
(trainer/checks.py), runs.resumed applies the resume rules: adding a flag is one edit here (and reading it where it
acts). `RECIPES` holds each paper's choices (its idea file's `PAPER`, lengths scaled to the built-in task);
`parse_config` reads the command line over a recipe's defaults (then Countdown's, reasoning-gym's, LoRA's learning
rate, --rollout-lag's cap, in that order), or over a resumed run's saved settings (runs.resumed).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

import c3po
import cispo
import dapo
import grpo
import gspo
import runs
from engines.stops import read_stops
from tasks.templates import TEMPLATES, parse_template_kwargs
from tools.cli import THREADS, ArgParser
from tools.tiny import builtin_paths
from trainer import checks, lora
from trainer.checks import (PROBABILITY, TEMPERATURE, above, at_least, number, run_dir, tracker_installed,
                            vllm_installed, within)
from trainer.stages import REWARDS


# Each paper's choices. A recipe's loss and mechanism settings are its idea file's `PAPER` (grpo.py, dapo.py, c3po.py,
# gspo.py, cispo.py: an edit there changes what `--recipe` runs); what stays here is (a) the lengths and batch sizes,
# scaled to the built-in task (responses of 10-50 tokens, 32 prompts x 8 = 256 responses per step; the papers generate
# 4K-32K tokens for 512 x 16), each through `scaled`, beside the paper's value it replaces, and (b) the recipes whose
# papers have no idea file of their own (Skywork-OR1, MiMo, Compass-Thinker), which name the file they take from.
# Anything not listed keeps the Config default (GRPO): reward 1/0, eps 0.2/0.2, one update per rollout (mu = 1),
# --filter-metric auto (correctness; the partial scores under code-strict / code-soft), greedy + avg@4 evaluation.
# mu (updates per rollout) = batch_size / mini_batch_size: DAPO, MiMo and Compass make 16 (mini-batch = 1/16 of the
# rollout: 512 of 8192 responses in DAPO's verl recipe script, docs/peers.md; 32 of 512 prompts in MiMo, 32 of 128 in
# Compass), scaled here to mini-batches of 16 of the 256 responses; at the default lr mu = 16 still learns and
# clip-higher acts (docs/recipes.md).
MU16 = dict(mini_batch_size=16)


def scaled(paper: dict, **toy) -> dict:
    """An idea file's PAPER with `toy`'s values in place of the paper's lengths and sizes (a key the paper does not set
    is an error: every scaled value replaces one the paper states)."""
    unknown = set(toy) - set(paper)
    if unknown:
        raise KeyError(f"scaled: {sorted(unknown)} are not the paper's settings")
    return {**paper, **toy}


def take(paper: dict, *keys: str) -> dict:
    """Some of an idea file's PAPER settings: a paper that says it uses another's (MiMo's "DAPO-style" loss)."""
    return {k: paper[k] for k in keys}


RECIPES = {
    # Prompt templates (--template): only DAPO names one (its README: the 'Answer:' line, read by --reward math-dapo;
    # --template dapo --reward math-dapo). The other papers do not print theirs [unspecified]: their recipes keep
    # 'auto' (the tokenizer's chat template, else plain) and the \boxed{} reward, so that the recipes compare.
    "grpo": dict(**grpo.PAPER),  # DeepSeekMath GRPO without KL (grpo.PAPER; add --kl-coef 0.04 for the original)
    "dapo": dict(  # DAPO Sec. 3, Alg. 1 and verl's DAPO recipe scripts (docs/peers.md)
        algorithm="dapo",
        **scaled(dapo.PAPER, overlong_buffer=16, max_new_tokens=64),  # L_cache 4096 of L_max 20480 -> 16 of 64 tokens
        **MU16),  # 16 updates per rollout (train batch 512 prompts x 16, ppo_mini_batch_size 32 prompts)
    "c3po": dict(  # Ring-lite Sec. 3.2, 4.1: token budget, KL 1e-3, entropy bonus 5e-4, 1/0 reward; on-policy (mu = 1:
        # the paper's "minibatch 2" is unexplained and Phi tokens per update is the budget's own unit)
        algorithm="c3po",
        **scaled(c3po.PAPER, token_budget=4096),  # Phi 409,600 tokens per step -> 4096 (of ~256 x 16-64 tokens)
        # Sec. 3.4 two-stage RL: math first, then code (+ science, not built in) with the length limit raised (24K -> 32K
        # there, 64 -> 96 tokens here); code scores 1 only when every test passes. The steps split evenly (--max-steps)
        stages="data=builtin-math reward=math max_new_tokens=64; "
               "data=builtin-code reward=code max_new_tokens=96 eval_problems=100"),
    "skywork": dict(  # Skywork-OR1 MAGIC Sec. 3: token-mean, no KL, adaptive entropy, rejection sampling, stages;
        # its verifier's format rule (Sec. 7.1): the last \boxed{} or nothing. Its loss (Eq. 3.1) is DAPO's token-level
        # loss with GRPO's symmetric eps 0.2/0.2 (the defaults)
        algorithm="dapo", reward="math-strict", **take(dapo.PAPER, "loss_agg"), adaptive_entropy=True,
        rejection_sampling=True, curriculum="skywork",
        mini_batch_size=128,  # N_SGD = 2: Math-7B's Table 10 (batch 256, mini-batch 128), whose stages the curriculum follows
        # (OR1-7B / 32B ran N_SGD = 1); adaptive entropy with its released code's timing (--entropy-timing)
        online_filter=True,  # Sec. 3.1: at each stage start, drop prompts solved perfectly in the previous stage
        eval_temperature=1.0, eval_top_p=1.0),  # Table 13: avg@32 (AIME) at T = 1, top-p 1
    "mimo": dict(  # MiMo Sec. 3.3: DAPO-style loss, dynamic sampling, easy-data resampling alpha = 0.1; eps unstated
        # [unspecified]: DAPO's 0.2/0.28; filter on the partial scores with its code rewards (--filter-metric auto)
        algorithm="dapo", **take(dapo.PAPER, "clip_high", "loss_agg", "dynamic_sampling"), easy_pool_alpha=0.1,
        **MU16,  # batch 512, actor mini-batch 32: 16 gradient updates per iteration (Sec. 3.3.3)
        eval_temperature=0.6, eval_top_p=0.95),  # Tables 4-6: T 0.6, top-p 0.95
    "compass": dict(  # Compass-Thinker Sec. 3-4: +-1 reward, DAPO-style loss, dynamic sampling, easy -> hard stages;
        # eps unstated [unspecified]: DAPO's 0.2/0.28. No online filter: dropping prompts solved in the previous stage is
        # Skywork-OR1's, not Compass-Thinker's. Evaluation: Sec. 4.3 gives no decoding settings [unspecified]: the
        # training T = 1.0, top-p 1.0 (the defaults)
        algorithm="dapo", **take(dapo.PAPER, "wrong_reward", "clip_high", "loss_agg", "dynamic_sampling"),
        curriculum="compass",
        **MU16),  # Sec. 4.1: batch 128, actor mini-batch 32, 16 gradient updates per iteration
    # After the seeds: the two losses the peers ship. Both are inert on-policy (mu = 1: the ratio is exactly 1), as
    # clip-higher is, so each recipe makes several updates per rollout, as its paper does.
    "gspo": dict(  # GSPO (arXiv 2507.18071v2) Eq. 5-7, Sec. 5.1: the sequence ratio clipped, one term per response
        algorithm="gspo", **gspo.PAPER,
        mini_batch_size=64),  # Sec. 5.1: each rollout batch split into 4 mini-batches (mu = 4)
    "cispo": dict(  # MiniMax-M1 Sec. 3.1, Eq. 4-5: the detached weight capped at 1 + 4 = 5 (cispo.py says why 4), token-
        # level loss, no KL. M1 also uses DAPO's dynamic sampling and length penalty; the recipe leaves them out so that
        # it differs from grpo in the loss alone (add --dynamic-sampling --overlong-buffer 16 for them)
        algorithm="cispo", **cispo.PAPER,
        **MU16,  # Sec. 3.1: 16 rounds of off-policy updates per generation batch
        # lr scaled to the tiny model as every recipe's is, but a quarter of the others' 1e-4: CISPO has no trust region
        # (no token's gradient is ever dropped), so 16 updates at 1e-4 move the policy 16 full steps and collapsed it;
        # at 2.5e-5 it learns (docs/recipes.md: the measurements). M1 itself lowered its clip and grad clip against
        # collapse (Sec. 5); the learning rate is this project's lever
        lr=2.5e-5),
}

# The Countdown task's defaults (tasks/countdown.py, the model tools/tiny.py CountdownRecipe): set when the run trains
# on builtin-countdown or gives --reward countdown (a flag given still wins). The shipped cold start searches level 1
# by whole attempts of ~24 tokens (8 at most in its SFT searches: up to ~220 tokens); the length limit of 128 tokens
# lets a search make four or five, so that finding the target sooner is what the reward pays for (the limits and
# learning rates tried, and what each run gained: docs/countdown.md). 16 prompts x 8 a step, 200 steps. The recipes'
# length-scaled values grow with the limit (COUNTDOWN_SCALE) and their learning rates by COUNTDOWN_LR_SCALE.
COUNTDOWN = dict(reward="countdown", max_new_tokens=128, eval_problems=200, batch_size=128, max_steps=200, eval_every=50)
COUNTDOWN_SCALE = ("overlong_buffer", "token_budget")  # x 128 / 64 under the Countdown defaults
COUNTDOWN_LR_SCALE = 3  # GRPO on the shipped cold start: 3e-4 learned, 5e-4 and 1e-3 fell (docs/countdown.md)


def countdown_defaults(recipe: dict) -> dict:
    """COUNTDOWN, with `recipe`'s lengths (scaled to the math task's 64 tokens) scaled to Countdown's 128, its learning
    rate (or the default's) x COUNTDOWN_LR_SCALE, its mini-batch scaled with the batch, and the recipe's math-then-code
    stages (c3po) dropped: Countdown is one task."""
    default = {f: Config.__dataclass_fields__[f].default for f in ("lr", "batch_size")}
    out = dict(COUNTDOWN, lr=round(recipe.get("lr", default["lr"]) * COUNTDOWN_LR_SCALE, 12))
    if recipe.get("mini_batch_size"):  # the same number of updates per rollout (mu) in the smaller batch
        out["mini_batch_size"] = recipe["mini_batch_size"] * COUNTDOWN["batch_size"] // default["batch_size"]
    for k in COUNTDOWN_SCALE:
        if recipe.get(k):
            out[k] = recipe[k] * COUNTDOWN["max_new_tokens"] // 64
    if recipe.get("stages"):
        out["stages"] = ""
    return out


# --help groups, in this order, after the flags a first run uses (flag(..., core=True))
CORE = "the flags a first run uses (every other flag below, by group)"
DATA = "model and data"
RUN = "run directory, checkpoints, resume"
ROLLOUT = "rollout"
REWARD = "reward"
LOSS = "loss"
OPTIM = "optimisation"
RECIPE = "recipe techniques (--recipe NAME sets a paper's; a flag given still wins)"
SCALE = "memory and scale"
EVAL = "evaluation and logging"
GROUPS = (DATA, RUN, ROLLOUT, REWARD, LOSS, OPTIM, RECIPE, SCALE, EVAL)


def flag(group: str, default, help: str, choices: tuple | None = None, check=None, resume: str = "checked",
         core: bool = False):
    """A Config field: its --help group, default and text, the values it may take (shown in --help, checked),
    `check(value)`, which returns what is wrong with a value (falsy when nothing is; trainer/checks.py), what --resume
    does when the command line changes it (runs.RESUME_RULES: 'free', 'checked' or 'fixed'), and `core`: --help lists
    it first, among the flags a first run uses."""
    if resume not in runs.RESUME_RULES:
        raise ValueError(f"flag: resume={resume!r} is not one of {', '.join(runs.RESUME_RULES)}")
    return field(default=default, metadata={"group": group, "help": help, "choices": choices, "check": check,
                                            "resume": resume, "core": core})


@dataclass
class Config:
    # --- model and data ---
    model: str = flag(DATA, "", "model path or hub name; empty = the shipped tiny Qwen2 (models/tiny-qwen2; with a "
                                "code reward -code, with --reward countdown the Countdown model)",
                      resume="fixed", core=True)
    train_data: str = flag(DATA, "builtin", "'builtin' (the built-in task of the reward's kind: math, code with a code "
                                            "reward, Countdown with --reward countdown), 'builtin-math', "
                                            "'builtin-code', 'builtin-countdown' (its levels: "
                                            "'builtin-countdown:1', ...), a reasoning-gym task "
                                            "('rg:chain_sum?max_digits=2': tasks/rg.py; --reward rg), or a "
                                            ".jsonl/.json/.parquet file or hub dataset name", resume="fixed", core=True)
    eval_data: str = flag(DATA, "builtin", "'builtin' (held-out split of the built-in task of the reward's kind), "
                                           "'builtin-math', 'builtin-code', 'builtin-countdown' (with "
                                           "--train-data builtin-countdown:LEVELS, those levels), or a file / hub "
                                           "dataset name", resume="fixed", core=True)
    eval_split: str = flag(DATA, "test", "split to use when --eval-data is a hub dataset", resume="fixed")
    train_problems: int = flag(DATA, 0, "use only the first N training problems (0 = all; the built-in tasks draw "
                                        "20,000): a small pool is seen for several epochs, as the papers' data is",
                               check=at_least(0, "(0 = all)"))
    template: str = flag(DATA, "auto", "prompt template (tasks.templates.TEMPLATES): auto (the tokenizer's chat "
                                       "template if it has one, else plain; with --reward math-dapo, dapo), chat, "
                                       "plain, qwen-math (Qwen2.5-Math's system prompt), r1-zero "
                                       "(DeepSeek-R1-Zero's), dapo (DAPO's 'Answer:' line)",
                         choices=tuple(TEMPLATES), resume="fixed")
    system_prompt: str = flag(DATA, "", "system prompt for the chat templates (a first paragraph for the plain ones)",
                              resume="fixed")
    chat_template_kwargs: str = flag(DATA, "", "JSON object of chat template switches passed to apply_chat_template, "
                                               "e.g. '{\"enable_thinking\": false}' for Qwen3 (TRL's "
                                               "chat_template_kwargs); '' = none. A prompt that leaves a thought open "
                                               "(R1-Distill's <think>) makes a response without </think> a format "
                                               "error (reward.py, Thoughts)",
                                     check=lambda v: parse_template_kwargs(v) and None,  # not JSON: one error line
                                     resume="fixed")
    stop: str = flag(DATA, "", "stop strings, '||'-separated, the escapes \\n \\t \\r \\\\ read (e.g. "
                               "'</answer>||\\nUser:'; '\\boxed' stays as typed): a response ends right after the "
                               "token that completes one, the string kept. Stop tokens need no flag: the tokenizer's "
                               "EOS, the model's generation_config EOS list and the chat template's end of turn")
    # --- run directory, checkpoints, resume ---
    output_dir: str = flag(RUN, "runs/default", "run directory (metrics, curves, samples, checkpoints, summary)",
                           check=run_dir, resume="free", core=True)
    max_steps: int = flag(RUN, 40, "number of RL steps (one step = one rollout batch)",
                          check=at_least(1), resume="free", core=True)
    seed: int = flag(RUN, 0, "seed for data order, sampling and initialisation: same seed, same run",
                     check=at_least(0), resume="fixed", core=True)
    save_every: int = flag(RUN, 20, "checkpoint every N steps and at the end (0 = only at the end); Ctrl-C loses the "
                                    "steps since the last",
                           check=at_least(0), resume="free", core=True)
    keep_checkpoints: int = flag(RUN, 2, "keep the newest N checkpoints (0 = all)",
                                 check=at_least(0), resume="free")
    overwrite: bool = flag(RUN, False, "replace the run already in --output-dir (without it, a new run there stops "
                                       "with an error)", resume="free", core=True)
    resume: str = flag(RUN, "", "checkpoint directory to resume from, or 'auto' for the newest in --output-dir (none: "
                                "start fresh). The checkpoint's settings are the run's: flags that would change the "
                                "run are refused (runs.py)", resume="free", core=True)
    resume_override: bool = flag(RUN, False, "with --resume: apply flags that change the run anyway, one warning line "
                                             "each (the model, data, recipe, seed and evaluation still cannot change)",
                                 resume="free")
    # --- rollout ---
    rollout: str = flag(ROLLOUT, "auto", "generation engine: 'auto' ('fast' on the CPU, 'hf' on a GPU: the faster one "
                                         "where each was measured, rollout.auto_engine), 'fast' (engines.hf.FastEngine:"
                                         " transformers' forward in a plain decode loop, the samples of 'hf' token for "
                                         "token, faster on the tiny model on a CPU, slower than 'hf' on a large GPU: "
                                         "docs/speed.md), 'hf' (transformers generate, the reference) or 'vllm' "
                                         "(colocated in each training process)",
                        choices=("auto", "fast", "hf", "vllm"),
                        check=vllm_installed, core=True)
    draw: str = flag(ROLLOUT, "multinomial", "how the fast engine draws a sampled token: 'multinomial' (torch's "
                                             "exponential race: 'hf''s samples for the seed; one random number per "
                                             "vocabulary entry and row at each step) or 'inverse-cdf' (one uniform per "
                                             "row against the cumulative probabilities: the same distribution, other "
                                             "samples; faster on a CPU at large vocabularies, docs/speed.md)",
                     choices=("multinomial", "inverse-cdf"))
    rollout_dtype: str = flag(ROLLOUT, "auto", "the generating weights' dtype: 'auto' (the policy's: the fast and hf "
                                               "engines generate with the training model itself) or 'bfloat16' (a bf16"
                                               " copy of the policy, LoRA merged, refreshed after each update: the "
                                               "weights --dtype bf16-mixed's autocast computes with; vllm loads bf16)",
                              choices=("auto", "bfloat16"))
    rollout_lag: int = flag(ROLLOUT, 0, "K: generate batch k+1 with theta_k while the update runs on batch k "
                                        "(async_rollout.py: a producer thread with its own copy of the policy; batch "
                                        "j is always generated by theta_{j-K}; the loss clips on pi_theta/pi_prox, "
                                        "weighted by pi_prox/pi_behav capped at --tis-cap, --tis-mode); 0 = the "
                                        "synchronous loop; 1 on one process with the fast or hf engine",
                            check=lambda v: v not in (0, 1) and f"must be 0 or 1, got {v} (one producer: a lag of 2 "
                                                                "would overlap nothing more)")
    rollout_worker: str = flag(ROLLOUT, "thread", "--rollout-lag's producer: 'thread' (overlaps the update) or "
                                                  "'inline' (the same code run at the sync point, sequentially: the "
                                                  "reference the thread must equal)",
                               choices=("thread", "inline"))
    batch_size: int = flag(ROLLOUT, 256, "responses per step (prompts x group size); must be divisible by --group-size",
                           check=at_least(1), core=True)
    group_size: int = flag(ROLLOUT, 8, "G: completions per prompt (>= 2)",
                           check=lambda v: v < 2 and f"must be >= 2 (a group-relative baseline needs at least two "
                                                     f"samples), got {v}", core=True)
    temperature: float = flag(ROLLOUT, 1.0, "sampling temperature (all five papers use 1.0 for training)",
                              check=TEMPERATURE, core=True)
    top_p: float = flag(ROLLOUT, 1.0, "nucleus sampling top-p for training rollouts",
                        check=PROBABILITY)
    max_new_tokens: int = flag(ROLLOUT, 64, "maximum response length in tokens (responses hitting it are 'truncated')",
                               check=at_least(1), core=True)
    vllm_gpu_memory_utilization: float = flag(ROLLOUT, 0.3, "vLLM on GPU: share of GPU memory for its weights and KV "
                                                            "cache (the rest is the trainer's; TRL's colocate mode "
                                                            "defaults to 0.3)",
                                              check=PROBABILITY, resume="free")
    vllm_sleep: bool = flag(ROLLOUT, False, "vLLM on GPU: sleep the engine (free its KV cache) during the optimizer "
                                            "updates", resume="free")
    # the peers' names for --tis-cap / --tis-mode, and where 2.0 comes from: docs/peers.md
    tis_cap: float = flag(ROLLOUT, 0.0, "truncated importance sampling (async_rollout.tis_weights): each token's "
                                        "surrogate term is weighted by min(pi_old / pi_engine, cap), correcting for "
                                        "the engine sampling from a slightly different distribution than the "
                                        "trainer's (other kernels, bf16); 0 = off; needs an engine that returns "
                                        "log-probs (--rollout vllm). TRL's vllm_importance_sampling_clip_max; 2.0 "
                                        "is a common cap",
                          check=lambda v: (v < 0 or 0 < v < 1) and f"must be 0 (off) or >= 1, got {v}")
    tis_mode: str = flag(ROLLOUT, "truncate", "what a --tis-cap weight above the cap becomes "
                                               "(async_rollout.tis_weights): "
                                              "'truncate' = the cap (verl's token-level rollout IS, TRL's "
                                              "token_truncate) or 'mask' = 0, the token dropped but still counted in "
                                              "the loss's denominators (AReaL's behaviour-weight cap, TRL's "
                                              "token_mask)",
                         choices=("truncate", "mask"))
    # --- reward ---
    reward: str = flag(REWARD, "math", "reward: 'math' (the final answer wherever a careful grader looks, math-verify "
                                       "equivalence), 'math-strict' (last \\boxed{} only: Skywork-OR1's format rule), "
                                       "'math-dapo' (DAPO's 'Answer:' line and prompt), code modes 'code' (all "
                                       "tests pass), 'code-strict', 'code-soft' (MiMo; see reward.py), or "
                                       "'countdown' (the equation in <answer> tags reaches the target exactly: "
                                       "tasks/countdown.py), or 'rg' (reasoning-gym's scorer gives exactly 1 to "
                                       "the answer its format rule reads: tasks/rg.py; set by --train-data rg:...)",
                       choices=REWARDS, core=True)
    correct_reward: float = flag(REWARD, 1.0, "reward of a correct answer")
    wrong_reward: float = flag(REWARD, 0.0, "reward of a wrong answer (-1 for DAPO / Compass-Thinker, 0 for Ring-lite "
                                            "/ Skywork / MiMo)")
    reward_timeout: float = flag(REWARD, 5.0, "seconds of wall time for one answer's whole check; the worker that "
                                              "overruns is killed and the answer scores --wrong-reward",
                                 check=lambda v: v <= 0 and f"must be > 0 seconds, got {v}")
    reward_workers: int = flag(REWARD, 2, "processes verifying answers in parallel (0 = in the training process)",
                               check=at_least(0, "(0 = in the training process)"), resume="free")
    # --- loss ---
    loss_agg: str = flag(LOSS, "seq-mean-token-mean", "loss aggregation: seq-mean-token-mean (GRPO), token-mean "
                                                      "(DAPO), seq-mean-token-sum",
                         choices=grpo.LOSS_AGG)
    clip_low: float = flag(LOSS, 0.2, "eps_low: ratio clipped below at 1 - eps_low",
                           check=within(0, 1, note="(the ratio is clipped below at 1 - eps_low >= 0)"))
    clip_high: float = flag(LOSS, 0.2, "eps_high: ratio clipped above at 1 + eps_high (DAPO clip-higher: 0.28)",
                            check=at_least(0))
    dual_clip: float = flag(LOSS, 0.0, "dual-clip PPO constant C > 1: the clipped loss of a negative advantage is at "
                                       "most C*|A| (verl's clip_ratio_c, 3.0 and always on there; AReaL's c_clip); 0 "
                                       "= off (the five papers)",
                            check=lambda v: (v < 0 or 0 < v <= 1) and f"must be 0 (off) or > 1, got {v}")
    kl_coef: float = flag(LOSS, 0.0, "beta: weight of the k3 KL to the initial (reference) model; 0 = no reference "
                                     "model",
                          check=at_least(0), core=True)
    scale_adv_by_std: bool = flag(LOSS, True, "divide advantages by the group std (GRPO); off = Dr. GRPO's mean-only "
                                              "baseline")
    # --- optimisation ---
    lr: float = flag(OPTIM, 1e-4, "AdamW learning rate; 1e-4 suits the 1M-parameter tiny model (the papers use 1e-6 "
                                  "to 3e-6 for 7B-32B)",
                     check=at_least(0, "(0: no update, e.g. to compare two engines' samples)"), core=True)
    warmup_steps: int = flag(OPTIM, 5, "linear LR warm-up, in optimizer updates, then constant (DAPO)",
                             check=at_least(0))
    weight_decay: float = flag(OPTIM, 0.0, "AdamW weight decay",
                               check=at_least(0))
    grad_clip: float = flag(OPTIM, 1.0, "max global grad norm",
                            check=above(0))
    mini_batch_size: int = flag(OPTIM, 256, "responses per optimizer update; mu = epochs x batch_size / "
                                            "mini_batch_size. Not given and larger than --batch-size: the batch (mu = "
                                            "epochs)",
                                check=at_least(1), core=True)
    epochs: int = flag(OPTIM, 1, "passes over each rollout batch (N_reuse)",
                       check=at_least(1))
    # --- recipe techniques (--recipe NAME sets a paper's; a flag given still wins) ---
    recipe: str = flag(RECIPE, "grpo", "preset of a paper's settings: " + ", ".join(RECIPES)
                       + " (see RECIPES in config.py and the README)",
                       choices=tuple(RECIPES), resume="fixed", core=True)
    algorithm: str = flag(RECIPE, "grpo", "the idea file whose advantages and policy loss the run calls: grpo "
                                          "(grpo.py), dapo (dapo.py: clip-higher, token-level loss, overlong filter), "
                                          "c3po (c3po.py: the token budget, needed by --token-budget), gspo (gspo.py: "
                                          "one length-normalised ratio per response, clipped at the sequence level; "
                                          "the gspo recipe's eps 3e-4/4e-4), cispo (cispo.py: REINFORCE with the "
                                          "detached weight min(r, 1 + --clip-high); the cispo recipe's cap 5, "
                                          "--clip-low 1: no floor; no --dual-clip); each recipe sets its paper's. "
                                          "gspo and cispo are inert on-policy (mu = 1: the ratio is 1, the gradient "
                                          "GRPO's / REINFORCE's), as clip-higher is: their recipes make 4 / 16 "
                                          "updates per rollout",
                          choices=("grpo", "dapo", "c3po", "gspo", "cispo"), core=True)
    dynamic_sampling: bool = flag(RECIPE, False, "DAPO: keep only groups with mixed correctness (or scores: "
                                                 "--filter-metric), regenerating until the batch is full")
    max_gen_rounds: int = flag(RECIPE, 10, "DAPO: cap on generation rounds per step under dynamic sampling (<= 0: no "
                                           "cap)")
    filter_metric: str = flag(RECIPE, "auto", "what dynamic sampling / the seamless scheduler call a mixed group "
                                              "(verl filter_groups.metric): 'acc' (correctness differs), 'score' (the "
                                              "verifier's unshaped reward differs: partial credit), 'auto' = score "
                                              "for --reward code-strict / code-soft (MiMo's partial-credit rewards), "
                                              "else acc",
                              choices=("auto", "acc", "score"))
    gen_batch_factor: int = flag(RECIPE, 1, "DAPO: prompts drawn per dynamic-sampling round, as a multiple of the "
                                            "step's prompts (verl's DAPO recipe: gen_batch_size = 3 x "
                                            "train_batch_size; the dapo recipe sets 3)",
                                 check=at_least(1))
    seamless: bool = flag(RECIPE, False, "MiMo: seamless rollout for --dynamic-sampling (seamless.py): launches sized "
                                         "by the pass-rate estimate (continuous batching with --rollout vllm, waves "
                                         "with hf), scoring overlapped with generation, FIFO early termination; with "
                                         "N processes each collects its share of the batch")
    seamless_max_wave: int = flag(RECIPE, 0, "MiMo seamless rollout: cap on prompts per wave (0 = half the step's "
                                             "prompts)",
                                  check=at_least(0, "(0 = half the step's prompts)"))
    overlong_buffer: int = flag(RECIPE, 0, "DAPO: L_cache of the soft overlong punishment (Eq. 13; L_max = "
                                           "--max-new-tokens); 0 = off",
                                check=at_least(0, "(0 = off)"))
    overlong_filter: bool = flag(RECIPE, False, "DAPO: mask the loss of truncated responses (overlong filtering)")
    token_budget: int = flag(RECIPE, 0, "C3PO: Phi, training tokens per optimizer update (constant 1/Phi normaliser); "
                                        "0 = off",
                             check=at_least(0, "(0 = off)"))
    entropy_coef: float = flag(RECIPE, 0.0, "static entropy bonus alpha (Ring-lite: 5e-4)",
                               check=at_least(0))
    adaptive_entropy: bool = flag(RECIPE, False, "Skywork-OR1: adaptive entropy control towards --entropy-target")
    entropy_target: float = flag(RECIPE, 0.2, "Skywork-OR1: target entropy (the sampled-token NLL of a rollout; which "
                                              "rollout: --entropy-timing)",
                                 check=above(0))
    entropy_delta: float = flag(RECIPE, 1e-4, "Skywork-OR1: coefficient step Delta per training step",
                                check=at_least(0))
    entropy_max: float = flag(RECIPE, 5e-3, "Skywork-OR1: upper clamp of the entropy coefficient",
                              check=at_least(0))
    entropy_timing: str = flag(RECIPE, "code", "Skywork-OR1: 'code' (released trainer: c updated with the previous "
                                               "rollout's estimate, then alpha_k = c_k * 1{e_{k-1} < tgt}) or 'paper' "
                                               "(Eq. 3.2: alpha_k = c_k * 1{e_k <= tgt} with this rollout's estimate, "
                                               "one extra forward pass, then c_{k+1} from e_k)",
                               choices=("code", "paper"))
    rejection_sampling: bool = flag(RECIPE, False, "Skywork-OR1: drop zero-advantage groups, no refill (the batch "
                                                   "shrinks)")
    easy_pool_alpha: float = flag(RECIPE, 0.0, "MiMo: all-correct prompts move to an easy pool, drawn with this "
                                               "probability per slot; 0 = off",
                                  check=within(0, 1, high_open=True,
                                               note="(1 would draw every slot from the easy pool)"))
    drop_solved: bool = flag(RECIPE, False, "all-correct prompts leave the prompt pool for good (no easy pool, no "
                                            "return): the outright removal MiMo's easy pool replaces "
                                            "(resample.EasyPool with alpha 0, no refresh)")
    curriculum: str = flag(RECIPE, "", "staged training: 'skywork' (growing response length) or 'compass' (easy -> "
                                       "hard levels); '' = off",
                           choices=("", "skywork", "compass"), resume="fixed")
    online_filter: bool = flag(RECIPE, False, "Skywork-OR1: with --curriculum, drop at each stage start the prompts "
                                              "whose last group in the previous stage was all correct (the skywork "
                                              "recipe turns it on; Compass-Thinker has none)")
    stages: str = flag(RECIPE, "", "stages of one run (Ring-lite's math -> code RL), ';'-separated, each 'key=value "
                                   "...' with keys data (train data), reward, max_new_tokens, steps, eval (eval "
                                   "data), eval_problems; what a stage leaves out comes from the flags. Stages "
                                   "without steps share the rest of --max-steps equally. Optimizer, reference model, "
                                   "entropy controller and step count carry over; each data set keeps its own prompt "
                                   "order; evaluation covers every stage's held-out set. '' = one stage from "
                                   "--train-data, --reward, --max-new-tokens (the c3po recipe sets math then code)",
                       resume="fixed")
    # --- memory and scale ---
    micro_batch_size: int = flag(SCALE, 256, "responses per forward/backward (gradient accumulation inside a "
                                             "mini-batch)",
                                 check=at_least(1), resume="free")
    micro_batch_tokens: int = flag(SCALE, 4096, "padded tokens per forward/backward: a mini-batch is sorted by length "
                                                "and cut into micro-batches of at most this many (and at most "
                                                "--micro-batch-size responses), so a few long responses do not pad "
                                                "every row to their length; 0 = off (rollout order)",
                                   check=at_least(0), resume="free")
    dtype: str = flag(SCALE, "auto", "precision policy: auto (bf16-mixed on GPU, float32 on CPU); float32; bf16-mixed "
                                     "(fp32 weights, gradients and AdamW states, bf16 autocast forward, fp32 "
                                     "log-softmax); bfloat16 (all bf16, 8 B/param: AdamW steps smaller than ~1/256 of "
                                     "a weight round away, e.g. at lr 1e-6)",
                      choices=("auto", "float32", "bf16-mixed", "bfloat16"), core=True)
    attn_implementation: str = flag(SCALE, "", "the policy's attention (transformers' attn_implementation: sdpa, "
                                               "eager, flash_attention_2, ...); '' = transformers' choice (sdpa). On a "
                                               "CPU, eager's backward is faster than sdpa's at a few hundred tokens "
                                               "(docs/speed.md)")
    logprob_chunk: int = flag(SCALE, 256, "LM-head rows per chunk for the log-probs "
                                          "(logprobs.chunked_token_logprobs): the update never holds more than chunk "
                                          "x vocab logits; 0 = full logits (micro-batch x (P+R) x vocab, the "
                                          "reference)",
                              check=at_least(0, "(0 = full logits)"), resume="free")
    gradient_checkpointing: bool = flag(SCALE, False, "recompute each decoder layer in the backward (HF gradient "
                                                      "checkpointing, non-reentrant): keeps one hidden state per "
                                                      "layer and token, ~1/3 more compute", resume="free")
    fsdp: bool = flag(SCALE, False, "shard weights, gradients and AdamW states over the processes: FSDP2 through "
                                    "Accelerate, one unit per decoder layer (= accelerate launch --config_file "
                                    "configs/fsdp.yaml); see docs/multi_gpu.md")
    threads: int = flag(SCALE, THREADS, "CPU threads for torch (0 = torch's default). 1 by default: the tiny model "
                                        "gains little from more, and an OpenMP pool sharing its cores with other work "
                                        "runs many times slower",
                        check=at_least(0, "(0 = torch's default)"), resume="free", core=True)
    lora_rank: int = flag(SCALE, 0, "LoRA rank r (trainer/lora.py, peft): train low-rank adapters on a frozen base; 0 "
                                    "= full fine-tuning. With LoRA the --lr default is 10x full fine-tuning's (TRL's "
                                    "'LoRA without regret'), the reference model is the base (adapter disabled, no "
                                    "second copy) and checkpoints hold the adapter",
                          check=at_least(0, "(0 = full fine-tuning)"), resume="fixed", core=True)
    lora_alpha: int = flag(SCALE, 32, "LoRA alpha: adapters scaled by alpha / r (32: verl's LoRA guide and example, "
                                      "'LoRA without regret')",
                           check=at_least(1))
    lora_dropout: float = flag(SCALE, 0.0, "dropout on the adapters' input (0: verl's and TRL's GRPO-LoRA examples)",
                               check=within(0, 1, high_open=True))
    lora_targets: str = flag(SCALE, "all-linear", "modules that get adapters: 'all-linear' (every linear layer of the "
                                                  "decoder, not the LM head) or comma-separated names, e.g. "
                                                  "q_proj,k_proj,v_proj,o_proj", resume="fixed")
    load_in_4bit: bool = flag(SCALE, False, "QLoRA: the frozen base's linear layers in 4-bit NF4 (bitsandbytes: pip "
                                            "install -e '.[qlora]'; runs on CPU too, slowly); needs --lora-rank; with "
                                            "--rollout vllm, --lora-vllm-sync adapter", resume="fixed")
    lora_vllm_sync: str = flag(SCALE, "merged", "LoRA with --rollout vllm: 'merged' (the adapters merged out of place "
                                                "in fp32 into the base's weights, loaded into vLLM each step) or "
                                                "'adapter' (vLLM keeps its base weights and serves the adapter "
                                                "through its LoRA support: a smaller sync, a slower decode)",
                               choices=("merged", "adapter"))
    # --- evaluation and logging ---
    eval_every: int = flag(EVAL, 20, "evaluate on held-out data every N steps (0 = only before and after)",
                           check=at_least(0, "(0 = only before and after)"), resume="free", core=True)
    eval_problems: int = flag(EVAL, 400, "number of held-out problems for greedy accuracy (0 = all)",
                              check=at_least(0, "(0 = all)"), resume="fixed", core=True)
    eval_samples: int = flag(EVAL, 4, "k: sampled completions per held-out problem for avg@k and pass@k, at the first "
                                      "and the final evaluation only (intermediate ones are greedy); 0 = greedy only. "
                                      "The papers use k = 32 on AIME",
                             check=at_least(0), resume="fixed", core=True)
    eval_temperature: float = flag(EVAL, 1.0, "sampling temperature of avg@k / pass@k (DAPO, Skywork, Ring-lite 1.0; "
                                              "MiMo 0.6)", resume="fixed")
    eval_top_p: float = flag(EVAL, 1.0, "top-p of avg@k / pass@k (DAPO 0.7, Ring-lite and MiMo 0.95, Skywork 1.0)",
                             resume="fixed")
    report_to: str = flag(EVAL, "none", "experiment tracker through Accelerate: tensorboard (OUTPUT_DIR/tensorboard), "
                                        "wandb, none; the config is logged once, every metrics.jsonl row each step",
                          choices=("none", "tensorboard", "wandb"), check=tracker_installed, resume="free")

    @property
    def stops(self) -> tuple[str, ...]:
        """--stop as strings (engines.stops.read_stops: split on '||', \\n \\t \\r \\\\ read)."""
        return read_stops(self.stop)

    def validate(self):
        """Each field's own choices and check, then the rules between flags (trainer/checks.py); a bad value -> one
        `error:` line."""
        checks.validate(self)


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """train.py's flags: one per Config field, each with its help, choices and default; the core fields first (their
    own group), then the rest by group."""
    ap = ArgParser(prog="train.py", description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                        usage="python train.py [--flag value ...]   (the flags below, by group; a recipe sets defaults)")
    fields = dataclasses.fields(Config)
    for title in (CORE, *GROUPS):
        group = ap.add_argument_group(title)
        for f in [f for f in fields if (CORE if f.metadata["core"] else f.metadata["group"]) == title]:
            flag = "--" + f.name.replace("_", "-")
            if f.type in ("bool", bool):
                group.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
                continue
            typ = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            shown = repr(f.default) if f.default == "" else f.default
            choices = f.metadata["choices"]
            group.add_argument(flag, type=typ, default=f.default, help=f.metadata["help"] + f" (default: {shown})",
                               metavar="{" + ",".join(c or "''" for c in choices) + "}" if choices else None)
    return ap


def given_flags(ap: argparse.ArgumentParser, argv) -> dict:
    """The flags the command line gives, field name -> value (a default, the parser's or a recipe's, is not given).
    The one parse of argv: a bad value or an unknown flag is argparse's one error line here."""
    unset = object()
    ap.set_defaults(**{a.dest: unset for a in ap._actions if a.dest != "help"})
    return {k: v for k, v in vars(ap.parse_args(argv)).items() if v is not unset}


def add_threads(ap) -> None:
    """train.py's --threads on another script's parser (evaluate.py, the tools, bench/): its default, help and check."""
    f = Config.__dataclass_fields__["threads"]
    ap.add_argument("--threads", type=number(int, f.metadata["check"]), default=f.default,
                    help=f"{f.metadata['help']} (default: {f.default})")


def parse_config(argv=None, description: str = "") -> Config:
    """The run's Config: the flags given over the defaults (Config's, then the recipe's, Countdown's or
    reasoning-gym's, LoRA's learning rate, --rollout-lag's cap), or, with --resume, over the run's saved settings,
    each flag given checked against them by its resume rule (runs.resumed); then every check (Config.validate)."""
    given = given_flags(build_parser(description), argv)
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    recipe = given.get("recipe", defaults["recipe"])
    if recipe not in RECIPES:
        raise SystemExit(f"error: --recipe: {recipe!r} is not one of {', '.join(RECIPES)}")
    defaults.update(RECIPES[recipe])  # a recipe changes defaults; flags given on the command line still win
    first = {**defaults, **given}
    if first["reward"] == "countdown" or first["train_data"].partition(":")[0] == "builtin-countdown":  # its defaults
        defaults.update(countdown_defaults(RECIPES[recipe]))
    if first["train_data"].startswith("rg:"):  # reasoning-gym's tasks are scored by their own exact reward (tasks/rg.py)
        defaults["reward"] = "rg"
    if first["lora_rank"]:  # LoRA: its own lr default (lora.LR_SCALE x full fine-tuning's)
        defaults["lr"] = defaults["lr"] * lora.LR_SCALE
    if first["rollout_lag"]:  # off-policy by one step: the decoupled loss's cap (2.0)
        defaults["tis_cap"] = defaults["tis_cap"] or 2.0
    ns = {**defaults, **given}
    if ns["train_data"].startswith(("builtin-countdown:", "rg:")) and "eval_data" not in given:
        ns["eval_data"] = ns["train_data"]  # held out from the levels trained on (run_config.json says which)
    if ns["mini_batch_size"] > ns["batch_size"] >= 1 and "mini_batch_size" not in given:
        ns["mini_batch_size"] = ns["batch_size"]  # a batch below the mini-batch default is one mini-batch (mu = epochs)
    rules = {f.name: f.metadata["resume"] for f in dataclasses.fields(Config)}
    cfg = Config(**runs.resumed(ns, given, rules, builtin_paths))
    cfg.validate()
    return cfg
