"""GRPO-family RL for math reasoning: one loop, driven by Accelerate, every knob on the command line.

    python train.py                                   # tiny model, built-in task, CPU: learns in minutes
    python train.py --model Qwen/Qwen2.5-Math-1.5B --train-data dapo_math_17k.parquet --eval-data math500.jsonl \
        --max-new-tokens 4096 --lr 1e-6 --batch-size 512 --mini-batch-size 512 --micro-batch-size 8
    accelerate launch --num_processes 8 train.py ...  # the same file on N processes (DDP), unchanged
    python train.py --recipe dapo                     # a paper's recipe (grpo dapo c3po skywork mimo compass)
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

Run directory: metrics.jsonl (one row per step), curves.png, samples.jsonl (completions at each evaluation),
checkpoint-N/ (model, tokenizer, optimizer, RNG, step, data position; written atomically) and summary.json.
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
import shutil
import time
from dataclasses import dataclass, field

import torch

import data
import grpo
from rollout import SamplingParams, load_model


def opt(default, help):
    return field(default=default, metadata={"help": help})


# Each paper's choices (../shared/reference/algorithms.md Sec. 7), lengths scaled to the built-in task (responses of
# 10-50 tokens; the papers generate 4K-32K). Anything not listed keeps the Config default (GRPO).
RECIPES = {
    "grpo": {},  # DeepSeekMath GRPO without KL (add --kl-coef 0.04 for the original)
    "dapo": dict(  # DAPO Sec. 3, Alg. 1
        wrong_reward=-1.0, clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, overlong_buffer=16),
    "c3po": dict(  # Ring-lite Sec. 3.2, 4.1: token budget, KL 1e-3, entropy bonus 5e-4, 1/0 reward
        token_budget=4096, kl_coef=1e-3, entropy_coef=5e-4),
    "skywork": dict(  # Skywork-OR1 MAGIC Sec. 3: token-mean, no KL, adaptive entropy, rejection sampling, stages
        loss_agg="token-mean", adaptive_entropy=True, rejection_sampling=True, curriculum="skywork"),
    "mimo": dict(  # MiMo Sec. 3.3: DAPO-style loss, dynamic sampling, easy-data resampling alpha = 0.1
        clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, easy_pool_alpha=0.1),
    "compass": dict(  # Compass-Thinker Sec. 3-4: +-1 reward, DAPO-style loss, dynamic sampling, easy -> hard stages
        wrong_reward=-1.0, clip_high=0.28, loss_agg="token-mean", dynamic_sampling=True, curriculum="compass"),
}


@dataclass
class Config:
    # --- run ---
    model: str = opt("", "model path or hub name; empty = the built-in tiny Qwen2 (built offline and cached on first use)")
    train_data: str = opt("builtin", "'builtin' (the built-in task) or a .jsonl/.json/.parquet file or hub dataset name")
    eval_data: str = opt("builtin", "'builtin' (held-out split of the built-in task) or a file / hub dataset name")
    eval_split: str = opt("test", "split to use when --eval-data is a hub dataset")
    output_dir: str = opt("runs/default", "run directory (metrics, curves, samples, checkpoints, summary)")
    max_steps: int = opt(40, "number of RL steps (one step = one rollout batch)")
    seed: int = opt(0, "seed for data order, sampling and initialisation: same seed, same run")
    save_every: int = opt(0, "checkpoint every N steps (0 = only at the end)")
    resume: str = opt("", "checkpoint directory to resume from, or 'auto' for the latest one in --output-dir")
    eval_every: int = opt(20, "evaluate on held-out data every N steps (0 = only before and after)")
    eval_problems: int = opt(400, "number of held-out problems for greedy accuracy")
    # --- rollout ---
    rollout: str = opt("hf", "generation engine: 'hf' (transformers generate) or 'vllm' (colocated in each training process)")
    vllm_gpu_memory_utilization: float = opt(0.3, "vLLM on GPU: share of GPU memory for its weights and KV cache "
                                                  "(the rest is the trainer's; TRL moved its default 0.9 -> 0.3 after OOM reports)")
    vllm_sleep: bool = opt(False, "vLLM on GPU: sleep the engine (free its KV cache) during the optimizer updates")
    tis_cap: float = opt(0.0, "truncated importance sampling (rollout.tis_weights): each token's surrogate term is weighted by "
                              "min(pi_old / pi_engine, cap), correcting for the engine sampling from a slightly different "
                              "distribution than the trainer's (other kernels, bf16); 0 = off; needs an engine that returns "
                              "log-probs (--rollout vllm). TRL's vllm_importance_sampling_cap; 2.0 is a common cap")
    batch_size: int = opt(256, "responses per step (prompts x group size); must be divisible by --group-size")
    group_size: int = opt(8, "G: completions per prompt (>= 2)")
    temperature: float = opt(1.0, "sampling temperature (all five papers use 1.0 for training)")
    top_p: float = opt(1.0, "nucleus sampling top-p for training rollouts")
    max_new_tokens: int = opt(64, "maximum response length in tokens (responses hitting it are 'truncated')")
    # --- reward ---
    correct_reward: float = opt(1.0, "reward of a correct answer")
    wrong_reward: float = opt(0.0, "reward of a wrong answer (-1 for DAPO / Compass-Thinker, 0 for Ring-lite / Skywork / MiMo)")
    reward_timeout: float = opt(5.0, "seconds allowed to verify one answer (a timeout scores 0)")
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
    dtype: str = opt("auto", "model weights dtype: auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16")
    threads: int = opt(1, "CPU threads for torch (0 = torch's default). 1 by default: the tiny model gains little from more, "
                          "and an OpenMP pool sharing its cores with other work ran 30x slower here (measured)")
    # --- recipe: each paper's techniques (train.py --recipe NAME sets them; any flag given still wins) ---
    recipe: str = opt("grpo", "preset of a paper's settings: " + ", ".join(RECIPES) + " (see RECIPES in train.py and the README)")
    dynamic_sampling: bool = opt(False, "DAPO: keep only groups with mixed correctness, regenerating until the batch is full")
    max_gen_rounds: int = opt(10, "DAPO: cap on generation rounds per step under dynamic sampling (<= 0: no cap)")
    seamless: bool = opt(False, "MiMo: seamless rollout for --dynamic-sampling (seamless.py): launches sized by the pass-rate estimate (continuous batching with --rollout vllm, waves with hf), scoring overlapped with generation, FIFO early termination; with N processes each collects its share of the batch")
    seamless_max_wave: int = opt(0, "MiMo seamless rollout: cap on prompts per wave (0 = half the step's prompts)")
    overlong_buffer: int = opt(0, "DAPO: L_cache of the soft overlong punishment (Eq. 13; L_max = --max-new-tokens); 0 = off")
    overlong_filter: bool = opt(False, "DAPO: mask the loss of truncated responses (overlong filtering)")
    token_budget: int = opt(0, "C3PO: Phi, training tokens per optimizer update (constant 1/Phi normaliser); 0 = off")
    entropy_coef: float = opt(0.0, "static entropy bonus alpha (Ring-lite: 5e-4)")
    adaptive_entropy: bool = opt(False, "Skywork-OR1: adaptive entropy control towards --entropy-target")
    entropy_target: float = opt(0.2, "Skywork-OR1: target entropy (sampled-token NLL of the previous rollout)")
    entropy_delta: float = opt(1e-4, "Skywork-OR1: coefficient step Delta per training step")
    entropy_max: float = opt(5e-3, "Skywork-OR1: upper clamp of the entropy coefficient")
    rejection_sampling: bool = opt(False, "Skywork-OR1: drop zero-advantage groups, no refill (the batch shrinks)")
    easy_pool_alpha: float = opt(0.0, "MiMo: all-correct prompts move to an easy pool, drawn with this probability per slot; 0 = off")
    curriculum: str = opt("", "staged training: 'skywork' (growing response length) or 'compass' (easy -> hard levels); '' = off")
    reward: str = opt("math", "reward: 'math' (math-verify) or code modes 'code' (all tests pass), 'code-strict', 'code-soft' (MiMo)")

    def validate(self):
        def bad(flag, msg):
            raise SystemExit(f"error: --{flag}: {msg}")

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
        if self.max_steps < 1:
            bad("max-steps", "must be >= 1")
        if self.rollout not in ("hf", "vllm"):
            bad("rollout", f"{self.rollout!r} is not 'hf' or 'vllm'")
        if self.curriculum not in ("", "skywork", "compass"):
            bad("curriculum", f"{self.curriculum!r} is not 'skywork', 'compass' or ''")
        if self.curriculum and self.easy_pool_alpha:
            bad("curriculum", "cannot be combined with --easy-pool-alpha (both choose the prompts)")
        if self.tis_cap < 0 or (self.tis_cap and self.tis_cap < 1):
            bad("tis-cap", f"must be 0 (off) or >= 1, got {self.tis_cap}")
        if self.tis_cap and self.rollout != "vllm":
            bad("tis-cap", "needs the sampling log-probs of --rollout vllm (the HF engine samples from the trainer's own model)")
        if self.seamless and not self.dynamic_sampling:
            bad("seamless", "is a scheduler for dynamic sampling: add --dynamic-sampling (or a recipe that has it)")
        if self.reward not in ("math", "code", "code-strict", "code-soft"):
            bad("reward", f"{self.reward!r} is not one of math, code, code-strict, code-soft")


def parse_config(argv=None) -> Config:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            typ = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            ap.add_argument(flag, type=typ, default=f.default, help=f.metadata["help"] + f" (default: {f.default})")
    recipe = vars(ap.parse_known_args(argv)[0])["recipe"]
    if recipe not in RECIPES:
        raise SystemExit(f"error: --recipe: {recipe!r} is not one of {', '.join(RECIPES)}")
    ap.set_defaults(**RECIPES[recipe])  # a recipe changes defaults; flags given on the command line still win
    cfg = Config(**vars(ap.parse_args(argv)))
    cfg.validate()
    return cfg


# ------------------------------------------------------------------------------------------------
# Plumbing: data order, batches, log-probs, checkpoints
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


def response_logprobs(model, batch, temperature: float, with_entropy: bool = False):
    """Per-token log-probs (and entropy) of the response tokens: logits at t-1 predict token t."""
    ids, attn, pos, resp, _, P = batch
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits  # (N, P+R, V)
    return grpo.token_logprobs(logits[:, P - 1 : -1], resp, temperature, with_entropy)  # (N, R)


def save_checkpoint(path, accelerator, model, tok, optimizer, state: dict):
    """Written to a temporary directory and renamed: a crash never leaves half a checkpoint."""
    if not accelerator.is_main_process:
        return
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    accelerator.unwrap_model(model).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    torch.save(
        {"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(), **state},
        os.path.join(tmp, "trainer_state.pt"),
    )
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def latest_checkpoint(output_dir: str) -> str | None:
    cks = [d for d in os.listdir(output_dir) if d.startswith("checkpoint-") and not d.endswith(".tmp")] if os.path.isdir(output_dir) else []
    return os.path.join(output_dir, max(cks, key=lambda d: int(d.split("-")[1]))) if cks else None


def plot_curves(rows: list[dict], evals: list[dict], path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("reward/mean", "train reward"), ("rollout/accuracy", "train accuracy"), ("rollout/response_length", "response length"),
            ("policy/entropy", "entropy"), ("rollout/frac_zero_std", "zero-std groups"), ("perf/grad_norm", "grad norm")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    steps = [r["step"] for r in rows]
    for ax, (k, title) in zip(axes.flat, keys):
        ax.plot(steps, [r.get(k, float("nan")) for r in rows])
        ax.set_title(title), ax.set_xlabel("step")
    ax = axes.flat[6]
    ax.plot([e["step"] for e in evals], [e["eval/accuracy"] for e in evals], "o-")
    ax.set_title("held-out greedy accuracy"), ax.set_xlabel("step"), ax.set_ylim(0, 1)
    axes.flat[7].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


class Round:
    """One generation round on this process: prompts, their G completions each, rewards and correctness."""

    def __init__(self, idx, exs, prompts, comps, rewards, correct, G):
        self.idx, self.exs, self.prompts, self.comps, self.rewards, self.correct, self.G = idx, exs, prompts, comps, rewards, correct, G

    def groups(self):  # one item per prompt, for dapo.DynamicSampler
        G = self.G
        return [(self.idx[i], self.exs[i], self.prompts[i], self.comps[i * G:(i + 1) * G], self.rewards[i * G:(i + 1) * G],
                 self.correct[i * G:(i + 1) * G]) for i in range(len(self.idx))]

    @staticmethod
    def from_groups(groups, G):
        cat = lambda k: [x for g in groups for x in g[k]]  # noqa: E731
        return Round([g[0] for g in groups], [g[1] for g in groups], [g[2] for g in groups], cat(3), cat(4), cat(5), G)


# ------------------------------------------------------------------------------------------------
def main(argv=None):
    cfg = parse_config(argv)
    # Everything that can fail on bad input is checked before the run directory is touched.
    schema = "code" if cfg.reward.startswith("code") else None
    train_set = data.load_dataset(cfg.train_data, split="train", seed=cfg.seed, schema=schema)
    eval_set = data.load_dataset(cfg.eval_data, split=cfg.eval_split if cfg.eval_data != "builtin" else "test",
                                 n=cfg.eval_problems, seed=cfg.seed, schema=schema)
    resume_from = None
    if cfg.resume:
        resume_from = latest_checkpoint(cfg.output_dir) if cfg.resume == "auto" else cfg.resume
        if cfg.resume != "auto" and not os.path.exists(os.path.join(cfg.resume, "trainer_state.pt")):
            raise SystemExit(f"error: --resume {cfg.resume!r}: not a checkpoint directory (no trainer_state.pt)")

    from accelerate import Accelerator
    from accelerate.utils import gather_object
    from tqdm import tqdm

    import c3po
    import curriculum
    import dapo
    import entropy
    import resample
    import rollout
    import tiny
    from evaluate import evaluate

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    if cfg.threads and not torch.cuda.is_available():
        torch.set_num_threads(cfg.threads)
    dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16}[cfg.dtype]
    with accelerator.main_process_first():  # N processes: the tiny model is built once, by the main process
        model_path = cfg.model or tiny.get_tiny_model(verbose=accelerator.is_main_process)
    model, tok = load_model(resume_from or model_path, dtype)
    # Seeded after the model exists: building the tiny model (its SFT) must not shift the sampling streams, so a
    # first run that builds it and a later run that finds it cached are the same run.
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed + accelerator.process_index)  # per-process sampling streams
    ref_model = load_model(model_path, dtype)[0].eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    if ref_model is not None:
        ref_model = ref_model.to(accelerator.device)
    policy = accelerator.unwrap_model(model)
    engine = rollout.make_engine(cfg.rollout, policy, tok, model_path=resume_from or model_path, seed=cfg.seed,
                                 max_model_len=512 if not cfg.model else None,
                                 gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, enable_sleep=cfg.vllm_sleep)
    if cfg.reward == "math":
        from reward import MathReward

        reward_fn = MathReward(cfg.correct_reward, cfg.wrong_reward, cfg.reward_timeout, cfg.reward_workers)
    else:
        from coding.code_reward import CodeReward

        reward_fn = CodeReward({"code": "all_or_nothing", "code-strict": "strict", "code-soft": "soft"}[cfg.reward])
    kind = "code" if schema == "code" else "math"
    seamless_ro = None
    if cfg.seamless:
        import seamless

        seamless_ro = seamless.SeamlessRollout(  # streaming with --rollout vllm (continuous batching), else waves
            engine, reward_fn, cfg.group_size, max_wave=max(4, cfg.seamless_max_wave or cfg.batch_size // cfg.group_size // 2))
    G = cfg.group_size
    # Prompt sources: the plain epoch walk, MiMo's easy pool, or a staged curriculum (all resumable).
    stages = None
    if cfg.curriculum:
        mk = curriculum.skywork_stages if cfg.curriculum == "skywork" else curriculum.compass_stages
        base = cfg.max_new_tokens // 2 if cfg.curriculum == "skywork" else cfg.max_new_tokens
        stages = mk(cfg.max_steps, base, batch_size=cfg.batch_size // G, group_size=G)
        sampler = curriculum.Curriculum(stages, [ex.level for ex in train_set], seed=cfg.seed)
    elif cfg.easy_pool_alpha > 0:
        sampler = resample.EasyPool(len(train_set), alpha=cfg.easy_pool_alpha, seed=cfg.seed)
    else:
        sampler = PromptSampler(len(train_set), cfg.seed)
    ent_ctrl = entropy.AdaptiveEntropy(cfg.entropy_target, cfg.entropy_delta, c_max=cfg.entropy_max) if cfg.adaptive_entropy else None
    start_step, history, evals, wall_before, last_nll = 0, [], [], 0.0, None
    if resume_from:
        st = torch.load(os.path.join(resume_from, "trainer_state.pt"), weights_only=False)
        optimizer.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["torch_rng"]), random.setstate(st["py_rng"]), sampler.load_state_dict(st["sampler"])
        if ent_ctrl is not None:
            ent_ctrl.load_state_dict(st["entropy"])
        start_step, history, evals, wall_before, last_nll = st["step"], st["history"], st["evals"], st["wall_time_s"], st["last_nll"]
    os.makedirs(cfg.output_dir, exist_ok=True)
    if accelerator.is_main_process:
        with open(os.path.join(cfg.output_dir, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(cfg), f, indent=1)
        with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "w") as f:  # rewritten from the checkpoint's history
            f.writelines(json.dumps(r) + "\n" for r in history)
    world, rank = accelerator.num_processes, accelerator.process_index

    def run_eval(step):
        if not accelerator.is_main_process:
            return None
        with torch.random.fork_rng():  # evaluation never shifts the training sampling stream
            res = evaluate(engine, tok, eval_set, reward_fn, max_new_tokens=cfg.max_new_tokens, n_show=8, kind=kind)
        with open(os.path.join(cfg.output_dir, "samples.jsonl"), "a") as f:
            f.writelines(json.dumps({"step": step, **s}, default=str) + "\n" for s in res.pop("samples"))
        row = {"step": step, **{f"eval/{k}": v for k, v in res.items()}}
        evals.append(row)
        return row

    def take_prompts(step, n_global, strided=False):
        """Every process draws the same global list (samplers stay in lockstep) and keeps its slice of whole groups:
        a contiguous block, or (strided) every world-th prompt from its rank on, so that draws of any sizes give
        each process its own prompts."""
        idx = sampler.next_batch(step, n_global)[0] if stages else sampler.sample(n_global) if cfg.easy_pool_alpha > 0 else sampler.take(n_global)
        if strided:
            return idx[rank::world]
        n_local = n_global // world
        return idx[rank * n_local : (rank + 1) * n_local]

    def generate_round(step, n_global, G, sp):
        idx = take_prompts(step, n_global)
        exs = [train_set[i] for i in idx]
        prompts = [data.build_prompt(tok, ex.prompt, kind) for ex in exs]
        comps = [c for g in engine.generate(prompts, G, sp) for c in g]  # (N,) prompt-major
        rewards, correct, rm = reward_fn([c.text for c in comps], [ex.answer for ex in exs for _ in range(G)])
        # every generated group's pass rate, before any filter: the easy pool and the online filter need the
        # all-correct groups that dynamic sampling drops
        observed.extend(zip(idx, torch.tensor(correct, dtype=torch.float).view(-1, G).mean(1).tolist()))
        if cfg.overlong_buffer:  # DAPO Eq. 13: added to the correctness reward, before the group statistics
            rewards = (torch.tensor(rewards) + dapo.overlong_penalty([c.length for c in comps], sp.max_new_tokens, cfg.overlong_buffer)).tolist()
        return Round(idx, exs, prompts, comps, rewards, correct, G), rm["reward/timeouts"]

    def rollout_batch(step, n_prompts, G, sp, extra, observed):
        """Steps 1-3 for one training step: the batch (a Round), reward timeouts, responses generated. Plain: one
        round. Dynamic sampling (DAPO Alg. 1): rounds until n_prompts groups of mixed correctness are kept (the
        first ones in generation order; surplus discarded), or MiMo's seamless scheduler. Fills `extra` (metrics)
        and `observed` (every generated group's pass rate)."""
        if cfg.dynamic_sampling and seamless_ro is not None:  # MiMo Sec. 3.4.1 (seamless.py): same groups format
            n_local = n_prompts // world  # each process collects its share of the groups
            seamless_ro.G, seamless_ro.max_groups = G, n_local * cfg.max_gen_rounds if cfg.max_gen_rounds > 0 else 10**9
            seamless_ro.shape = (lambda comps, r: (torch.tensor(r) + dapo.overlong_penalty(  # noqa: E731
                [c.length for c in comps], sp.max_new_tokens, cfg.overlong_buffer)).tolist()) if cfg.overlong_buffer else None
            drawn = [0]

            def nxt(k):  # k prompts for this process: positions rank, rank + world, ... of the global draw
                drawn[0] += k
                return [(i, train_set[i], data.build_prompt(tok, train_set[i].prompt, kind), train_set[i].answer)
                        for i in take_prompts(step, k * world, strided=True)]

            batch = Round.from_groups(seamless_ro.collect(nxt, n_local, sp), G)
            if world > 1:  # processes drew different amounts: all draw (and skip) up to the largest, in lockstep
                most = int(accelerator.reduce(torch.tensor([float(drawn[0])], device=accelerator.device), "max").item())
                if most > drawn[0]:
                    take_prompts(step, (most - drawn[0]) * world)
            observed.extend(seamless_ro.last_observed)  # every scored group, for the easy pool / online filter
            extra.update(seamless_ro.last_metrics)
            timeouts, n_gen = extra.pop("reward/timeouts"), extra.pop("rollout/generated")
        elif cfg.dynamic_sampling:
            ds = dapo.DynamicSampler(n_prompts // world, G, cfg.max_gen_rounds)
            n_gen, timeouts = 0, 0
            while True:
                if ds.full:  # another process is still short: draw (and skip) its round to keep samplers in lockstep
                    take_prompts(step, n_prompts)
                else:
                    rnd, to = generate_round(step, n_prompts, G, sp)
                    ds.add(rnd.groups(), torch.tensor(rnd.correct))  # raises after --max-gen-rounds
                    n_gen, timeouts = n_gen + len(rnd.comps), timeouts + to
                if not accelerator.reduce(torch.tensor([0.0 if ds.full else 1.0], device=accelerator.device), "sum").item():
                    break
            extra.update(ds.metrics())
            batch = Round.from_groups(ds.take(), G)
        else:
            batch, timeouts = generate_round(step, n_prompts, G, sp)
            n_gen = len(batch.comps)
        return batch, timeouts, n_gen

    t_start = time.time()
    if not evals:
        if accelerator.is_main_process:
            print(f"evaluating the initial policy on {len(eval_set)} held-out problems ...", flush=True)
        run_eval(0)
    bar = tqdm(range(start_step, cfg.max_steps), initial=start_step, total=cfg.max_steps, disable=not accelerator.is_main_process, dynamic_ncols=True)
    for step in bar:
        t0, extra, observed = time.time(), {}, []
        stage = sampler.stage_at(step) if stages else None  # curriculum: this stage's G, batch and length
        G = stage.group_size if stage else cfg.group_size
        n_prompts = stage.batch_size if stage else cfg.batch_size // cfg.group_size
        if n_prompts % world:
            raise SystemExit(f"error: {n_prompts} prompts per step do not split over {world} processes")
        sp = SamplingParams(cfg.temperature, cfg.top_p, stage.max_new_tokens if stage else cfg.max_new_tokens)
        # 1.-3. sample prompts, generate G completions each, score them (dynamic sampling: until the batch is full)
        batch, timeouts, n_gen = rollout_batch(step, n_prompts, G, sp, extra, observed)
        t_gen = time.time() - t0
        # pass rates of every generated group feed MiMo's easy pool and the curriculum's online filter; every
        # process sees all of them, so the samplers stay identical
        seen = gather_object(observed) if world > 1 else observed
        if cfg.easy_pool_alpha > 0:
            sampler.update([i for i, _ in seen], [p for _, p in seen])
            extra.update(sampler.metrics())
        elif stages:
            sampler.observe([i for i, _ in seen], [p for _, p in seen])
            extra.update(sampler.metrics())
        if world > 1:  # invariant: every process holds the same prompt sampler (else they train on other data)
            st = {k: v for k, v in sampler.state_dict().items() if k != "last_share"}  # last_share: a metric
            digests = gather_object([hashlib.sha256(repr(st).encode()).hexdigest()])
            if len(set(digests)) > 1:
                raise RuntimeError(f"step {step + 1}: the prompt samplers of the {world} processes diverged")
        # 4. group-relative advantages (a group lives on one process, so this is exact)
        rewards_t = torch.tensor(batch.rewards)
        adv = grpo.group_advantages(rewards_t, G, scale_by_std=cfg.scale_adv_by_std)  # (N,)
        keep = torch.ones(len(batch.comps), dtype=torch.bool)
        if cfg.rejection_sampling:  # Skywork-OR1 Sec. 3.1: zero-advantage groups leave, nothing replaces them
            keep = curriculum.reject_zero_advantage(adv, G).repeat_interleave(G)
            extra["rollout/groups_kept_frac"] = keep.float().mean().item()
        alpha = cfg.entropy_coef
        if ent_ctrl is not None:  # Skywork-OR1 Eq. 3.2 with its code's timing: e is the previous rollout's NLL
            alpha = ent_ctrl.step(last_nll) if last_nll is not None else 0.0
            extra.update(ent_ctrl.metrics() if last_nll is not None else {"policy/entropy_coef": 0.0})
        # 5. mu optimizer updates over mini-batches of the rollout batch
        sel = keep.nonzero().flatten().tolist()
        p_ids = [tok(batch.prompts[i // G], add_special_tokens=False)["input_ids"] for i in sel]
        r_ids = [batch.comps[i].token_ids for i in sel]
        truncated = [batch.comps[i].truncated for i in sel]
        engine_lp = [batch.comps[i].logprobs for i in sel] if cfg.tis_cap else None
        if cfg.vllm_sleep and hasattr(engine, "sleep"):  # colocated on one GPU: give training the KV-cache memory
            engine.sleep()  # sync_weights / generate wake it up again
        umetrics = update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, r_ids, adv[sel], truncated, alpha,
                                 step, c3po, engine_lp)
        last_nll = umetrics.pop("policy/sampled_nll", last_nll)
        engine.sync_weights(policy)
        # 6. log / evaluate / save
        row = {"step": step + 1, **step_stats(accelerator, batch, rewards_t, G, timeouts, n_gen), **extra, **umetrics}
        dt = time.time() - t0
        row.update({"perf/tokens_per_s": row.pop("_tokens") / dt, "perf/step_time_s": dt, "perf/gen_time_s": t_gen})
        history.append(row)
        bar.set_postfix(reward=f"{row['reward/mean']:.3f}", acc=f"{row['rollout/accuracy']:.3f}", len=f"{row['rollout/response_length']:.1f}")
        done = step + 1 == cfg.max_steps
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and not done:
            e = run_eval(step + 1)
            if e:
                bar.write(f"step {step + 1}: held-out greedy accuracy {e['eval/accuracy']:.3f}")
        if accelerator.is_main_process:
            with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
        if done or (cfg.save_every and (step + 1) % cfg.save_every == 0):
            save_checkpoint(os.path.join(cfg.output_dir, f"checkpoint-{step + 1}"), accelerator, model, tok, optimizer,
                            {"step": step + 1, "sampler": sampler.state_dict(), "history": history, "evals": evals,
                             "entropy": ent_ctrl.state_dict() if ent_ctrl else None, "last_nll": last_nll,
                             "wall_time_s": wall_before + time.time() - t_start, "config": dataclasses.asdict(cfg)})
    bar.close()
    run_eval(cfg.max_steps)
    if seamless_ro is not None:
        seamless_ro.close()
    if hasattr(reward_fn, "close"):
        reward_fn.close()
    if accelerator.is_main_process:
        before, after = evals[0], evals[-1]
        summary = {"accuracy_before": before["eval/accuracy"], "accuracy_after": after["eval/accuracy"],
                   "wall_time_s": wall_before + time.time() - t_start, "steps": cfg.max_steps, "recipe": cfg.recipe,
                   "eval_problems": len(eval_set), "before": before, "after": after}
        with open(os.path.join(cfg.output_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        plot_curves(history, evals, os.path.join(cfg.output_dir, "curves.png"))
        print(f"held-out greedy accuracy: {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
              f"({len(eval_set)} problems, {summary['wall_time_s']:.0f}s); run directory: {cfg.output_dir}")
    accelerator.wait_for_everyone()
    return history


def step_stats(accelerator, batch, rewards_t, G, timeouts, n_gen) -> dict:
    """The step's rollout metrics, summed over processes (`_tokens`: response tokens, for the throughput)."""
    world, comps = accelerator.num_processes, batch.comps
    stats = accelerator.gather(torch.tensor(
        [sum(batch.rewards), sum(r * r for r in batch.rewards), sum(batch.correct), len(comps), sum(c.length for c in comps),
         max(c.length for c in comps), sum(c.truncated for c in comps), timeouts,
         float((rewards_t.view(-1, G).std(1) == 0).sum()), len(batch.idx), n_gen], dtype=torch.float64).to(accelerator.device)
    ).view(world, -1).cpu()
    s = stats.sum(0)
    s[5] = stats[:, 5].max()
    n = s[3].item()
    return {"reward/mean": s[0].item() / n, "reward/std": math.sqrt(max(0.0, s[1].item() / n - (s[0].item() / n) ** 2)),
            "rollout/accuracy": s[2].item() / n, "rollout/frac_zero_std": s[8].item() / s[9].item(),
            "rollout/response_length": s[4].item() / n, "rollout/response_length_max": s[5].item(),
            "rollout/truncated_frac": s[6].item() / n, "reward/timeouts": int(s[7].item()), "rollout/generated": int(s[10].item()),
            "_tokens": s[4].item()}


def update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, r_ids, adv, truncated, alpha, step, c3po,
                  engine_lp=None) -> dict:
    """Step 5: `epochs` passes over the rollout batch, each split into batch_size / mini_batch_size mini-batches,
    one optimizer update per mini-batch.

    Normalisers are global: a mini-batch's sequence and token counts are summed over its micro-batches and over
    processes, and each micro-batch loss is divided by them (times the world size, because DDP averages gradients
    over processes). Gradient accumulation therefore reproduces the one-big-batch gradient exactly. Every process
    makes the same number of updates (DDP needs it), even when filtering left it fewer responses than the others.

    engine_lp (with --tis-cap): per response, the engine's sampling log-probs; each token's surrogate term is then
    weighted by min(exp(log pi_old - log pi_engine), cap) (rollout.tis_weights).
    """
    import entropy
    from rollout import tis_weights

    device, world = accelerator.device, accelerator.num_processes
    N = len(r_ids)
    n_chunks = max(1, cfg.batch_size // cfg.mini_batch_size)  # mini-batches per epoch, the same on every process
    mu = cfg.epochs * n_chunks
    total = accelerator.reduce(torch.tensor([float(N)], device=device), "sum").item()
    if total == 0:  # Skywork: nothing survived rejection sampling anywhere: skip the update
        return {"policy/updates": 0}
    old_logp = None  # per response: log pi_old of its tokens, (len_i,)
    if mu > 1:  # off-policy updates need pi_old of the sampled tokens; with mu == 1 it is logp.detach()
        old_logp = []
        with torch.no_grad():
            for i in range(0, N, cfg.micro_batch_size):
                j = min(N, i + cfg.micro_batch_size)
                lp = response_logprobs(model, make_batch(tok, p_ids[i:j], r_ids[i:j], device), cfg.temperature)[0]
                old_logp += [lp[k, : len(r_ids[i + k])] for k in range(lp.shape[0])]
    g = torch.Generator().manual_seed(cfg.seed * 100003 + step)
    agg = {"loss": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
    nll_sum, nll_tok, n_upd, extra = 0.0, 0, 0, {}
    tis_stats = [0.0, 0.0, 0.0, 0.0]  # sum of weights, capped tokens, sum |log pi_old - log pi_engine|, tokens
    for epoch in range(cfg.epochs):
        order = torch.randperm(N, generator=g).tolist() if mu > 1 else list(range(N))
        for mb in [c.tolist() for c in torch.tensor(order, dtype=torch.long).tensor_split(n_chunks)]:
            lens = [len(r_ids[i]) for i in mb]
            kept = None
            if cfg.token_budget:  # C3PO: greedy selection of exactly Phi tokens (Phi / world per process), rollout order
                kept = c3po.budget_select(lens, cfg.token_budget // world) if mb else torch.zeros(0, dtype=torch.long)
                extra = c3po.budget_metrics(lens, kept, cfg.token_budget // world) if mb else extra
            n_tok_i = lens if kept is None else kept.tolist()  # tokens each response contributes to the loss
            if cfg.overlong_filter:  # truncated responses contribute none
                n_tok_i = [0 if truncated[i] else t for t, i in zip(n_tok_i, mb)]
            n_tok = float(sum(n_tok_i))
            counts = accelerator.reduce(torch.tensor([float(len(mb)), n_tok], device=device), "sum").cpu() / world
            seqs, toks = max(counts[0].item(), 1e-9), max(counts[1].item(), 1e-9)
            stats = []
            micro = [mb[c : c + cfg.micro_batch_size] for c in range(0, len(mb), cfg.micro_batch_size)] or [[]]
            for k, mc in enumerate(micro):
                with accelerator.no_sync(model) if k < len(micro) - 1 else contextlib.nullcontext():  # all-reduce once
                    if not mc:  # no responses here this update: a zero loss still joins DDP's gradient all-reduce
                        accelerator.backward(sum(p.sum() for p in model.parameters()) * 0.0)
                        continue
                    batch = make_batch(tok, [p_ids[i] for i in mc], [r_ids[i] for i in mc], device)
                    logp, ent = response_logprobs(model, batch, cfg.temperature, with_entropy=True)  # (n, R)
                    mask = batch[4]  # (n, R)
                    if cfg.overlong_filter:  # DAPO Sec. 3.4: truncated responses leave the loss (not the group stats)
                        mask = mask * torch.tensor([not truncated[i] for i in mc], device=device).unsqueeze(1)
                    if kept is not None:
                        mask = c3po.budget_mask(mask, kept[[mb.index(i) for i in mc]])
                    if old_logp is None:
                        old = logp.detach()  # ratio == 1: the gradient is A * grad log pi (REINFORCE)
                    else:
                        old = torch.zeros_like(logp)
                        for j, i in enumerate(mc):
                            old[j, : len(r_ids[i])] = old_logp[i]
                    ref = None
                    if ref_model is not None:
                        with torch.no_grad():
                            ref = response_logprobs(ref_model, batch, cfg.temperature)[0]
                    tis = None
                    if engine_lp is not None:  # truncated IS: engine (behaviour) vs trainer's pi_old, per token
                        eng = torch.zeros_like(old)
                        for j, i in enumerate(mc):
                            if engine_lp[i] is None or len(engine_lp[i]) != len(r_ids[i]):
                                raise RuntimeError("--tis-cap: the rollout engine returned no log-probs for a response")
                            eng[j, : len(r_ids[i])] = torch.tensor(engine_lp[i], device=device)
                        tis = tis_weights(old, eng, mask, cfg.tis_cap)
                        tis_stats[0] += (tis * mask).sum().item()
                        tis_stats[1] += ((tis >= cfg.tis_cap) & mask.bool()).sum().item()
                        tis_stats[2] += ((old - eng).abs() * mask).sum().item()
                        tis_stats[3] += mask.sum().item()
                    common = dict(loss_agg="budget", budget=cfg.token_budget / world) if cfg.token_budget else dict(loss_agg=cfg.loss_agg)
                    loss_fn = c3po.policy_loss if cfg.token_budget else grpo.policy_loss  # dapo's = grpo's with DAPO's arguments
                    loss, m = loss_fn(logp, old, adv[mc].to(device), mask, ref, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                      kl_coef=cfg.kl_coef, num_seqs=seqs, num_tokens=toks, token_weights=tis, **common)
                    if alpha:
                        eterm, _ = entropy.entropy_loss(ent, mask, alpha, num_seqs=seqs, num_tokens=toks, **common)
                        loss = loss + eterm
                    accelerator.backward(loss)
                ntok = mask.sum().item()
                stats.append((loss.item(), m, (ent * mask).sum().item(), ntok))
                if epoch == 0:
                    nll_sum, nll_tok = nll_sum - (old * batch[4]).sum().item(), nll_tok + batch[4].sum().item()
            gn = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            for pg in optimizer.param_groups:
                pg["lr"] = cfg.lr * min(1.0, (step * mu + n_upd + 1) / max(1, cfg.warmup_steps))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            T = sum(s[3] for s in stats) or 1
            agg["loss"] += sum(s[0] for s in stats)
            for key in ("clip_frac_low", "clip_frac_high", "kl"):
                agg[key] += sum(s[1][key] * s[3] for s in stats) / T
            agg["entropy"] += sum(s[2] for s in stats) / T
            agg["grad_norm"] += float(gn)
            n_upd += 1
    out = {f"policy/{k}" if k != "grad_norm" else "perf/grad_norm": v / n_upd for k, v in agg.items()}
    out.update({"policy/updates": n_upd, "perf/lr": optimizer.param_groups[0]["lr"], **extra})
    if engine_lp is not None:  # over every process's tokens (each process has its own engine to check)
        t = accelerator.reduce(torch.tensor(tis_stats, dtype=torch.float64, device=device), "sum").tolist()
        if t[3]:
            out.update({"policy/tis_weight_mean": t[0] / t[3], "policy/tis_capped_frac": t[1] / t[3],
                        "policy/engine_logp_gap": t[2] / t[3]})
    if nll_tok:
        out["policy/sampled_nll"] = nll_sum / nll_tok
    if alpha:
        out["policy/entropy_coef"] = alpha
    return out


if __name__ == "__main__":
    main()
