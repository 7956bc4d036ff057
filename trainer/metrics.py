"""The run's numbers: the step's rollout metrics summed over processes, the update's metrics, summary.json and
curves.png. (What each metric means: docs/internals.md.)"""
from __future__ import annotations

import json
import math
import os
from typing import NamedTuple

import torch

from trainer.records import Update

TOKEN_MEANS = ("clip_frac_low", "clip_frac_high", "kl", "clip_frac_dual", "capped_frac_low", "capped_frac_high")  # over
# the update's tokens (clip_frac_dual with --dual-clip; capped_frac_*: cispo.py's weight-capped shares)
SEQ_MEANS = ("seq_clip_frac_low", "seq_clip_frac_high")  # over its responses (gspo.py: clipped responses)
TIS_SUMS = ("weight", "capped", "logp_gap", "tokens", "weight_sq")  # per token: min(pi_old/pi_engine, cap), its
# cap reached, |log pi_old - log pi_engine|, the token itself, the weight squared: summed over tokens (and processes)


class UpdateLog:
    """Step 5's metrics: per update, token-weighted means over its micro-batches; over updates, plain means."""

    def __init__(self):
        self.agg = {"loss": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
        self.updates, self.extra = 0, {}  # extra: C3PO's budget metrics of the last mini-batch that had responses
        self.tis = dict.fromkeys(TIS_SUMS, 0.0)  # truncated IS (--tis-cap): TIS_SUMS over every micro-batch

    def add(self, stats: list[dict], grad_norm: float, extra: dict | None = None):
        T = sum(s["tokens"] for s in stats) or 1
        self.agg["loss"] += sum(s["loss"] for s in stats)
        S = sum(s["seqs"] for s in stats) or 1
        for key in [k for k in TOKEN_MEANS + SEQ_MEANS if k in stats[0]]:  # the metrics the run's policy_loss returns
            w, total = ("seqs", S) if key in SEQ_MEANS else ("tokens", T)
            self.agg[key] = self.agg.get(key, 0.0) + sum(s[key] * s[w] for s in stats) / total
        self.agg["entropy"] += sum(s["entropy_sum"] for s in stats) / T
        self.agg["grad_norm"] += grad_norm
        self.updates += 1
        if extra is not None:
            self.extra = extra
        for s in stats:
            if "tis" in s:
                self.tis = {k: self.tis[k] + s["tis"][k] for k in TIS_SUMS}

    def result(self, accelerator, optimizer, alpha) -> Update:
        out = {f"policy/{k}" if k != "grad_norm" else "perf/grad_norm": v / self.updates for k, v in self.agg.items()}
        out.update({"policy/updates": self.updates, "perf/lr": optimizer.param_groups[0]["lr"], **self.extra})
        if any(self.tis.values()):  # over every process's tokens (each process has its own engine to check)
            t = accelerator.reduce(torch.tensor([self.tis[k] for k in TIS_SUMS], dtype=torch.float64,
                                                device=accelerator.device), "sum").tolist()
            t = dict(zip(TIS_SUMS, t))
            if t["tokens"]:
                n = t["tokens"]
                out.update({"policy/tis_weight_mean": t["weight"] / n, "policy/tis_capped_frac": t["capped"] / n,
                            "policy/engine_logp_gap": t["logp_gap"] / n,  # with --rollout-lag: |log pi_prox - log pi_behav|
                            "policy/tis_ess": t["weight"] ** 2 / (n * t["weight_sq"]) if t["weight_sq"] else 1.0})  # ESS / tokens
        if alpha:
            out["policy/entropy_coef"] = alpha
        return Update(out)


class StepStats(NamedTuple):
    metrics: dict  # the rollout's metrics.jsonl columns (reward/*, rollout/*), over every process
    response_tokens: float  # response tokens of the step over every process (the throughput's numerator)


STAT_SUMS = ("reward", "reward_sq", "correct", "responses", "tokens", "longest", "truncated", "timeouts", "zero_std_groups",
             "groups", "generated", "all_correct_groups", "all_wrong_groups", "anywhere")  # summed over processes (the longest: the max)


def _all_correct_wrong(correct, G: int) -> tuple[int, int]:
    """Groups whose G responses are all correct, and all wrong (correctness, not reward: a code-soft partial score is
    still wrong): the two ways a group gives no signal under a 1/0 reward."""
    c = torch.tensor([bool(x) for x in correct]).view(-1, G)
    return int(c.all(1).sum()), int((~c).all(1).sum())


def step_stats(accelerator, rollout, reward_fn=None) -> StepStats:
    """The step's rollout metrics (a Rollout on each process), summed over processes; with a reward that reads the
    answer anywhere too (tasks/rg.py RGReward.anywhere), rollout/accuracy_anywhere beside rollout/accuracy."""
    anywhere = getattr(reward_fn, "anywhere", None)
    world, comps, G = accelerator.num_processes, rollout.completions, rollout.group_size
    local = [sum(rollout.rewards), sum(r * r for r in rollout.rewards), sum(rollout.correct), len(comps),
             sum(c.length for c in comps), max(c.length for c in comps), sum(c.truncated for c in comps), rollout.timeouts,
             float((torch.tensor(rollout.rewards).view(-1, G).std(1) == 0).sum()), len(rollout.idx), rollout.generated,
             *(float(x) for x in _all_correct_wrong(rollout.correct, G)),
             float(sum(anywhere([c.text for c in comps], [ex.answer for ex in rollout.examples for _ in range(G)])))
             if anywhere else 0.0]
    every = accelerator.gather(torch.tensor(local, dtype=torch.float64).to(accelerator.device)).view(world, -1).cpu()
    s = dict(zip(STAT_SUMS, every.sum(0).tolist()))
    s["longest"] = every[:, STAT_SUMS.index("longest")].max().item()
    n = s["responses"]
    out = {"reward/mean": s["reward"] / n, "reward/std": math.sqrt(max(0.0, s["reward_sq"] / n - (s["reward"] / n) ** 2)),
           "rollout/accuracy": s["correct"] / n, "rollout/frac_zero_std": s["zero_std_groups"] / s["groups"],
           "rollout/response_length": s["tokens"] / n, "rollout/response_length_max": s["longest"],
           "rollout/truncated_frac": s["truncated"] / n, "reward/timeouts": int(s["timeouts"]),
           "rollout/generated": int(s["generated"]), "rollout/frac_all_correct": s["all_correct_groups"] / s["groups"],
           "rollout/frac_all_wrong": s["all_wrong_groups"] / s["groups"],
           **({"rollout/accuracy_anywhere": s["anywhere"] / n} if anywhere else {})}
    # per difficulty level (when the data has levels): groups, and groups with a signal (rewards not all equal)
    signal = (torch.tensor(rollout.rewards, dtype=torch.float64).view(-1, G).std(1) > 0).tolist()
    per_level = torch.zeros(2, 5, dtype=torch.float64)
    for ex, sig in zip(rollout.examples, signal):
        if ex.level in (1, 2, 3, 4, 5):
            per_level[:, ex.level - 1] += torch.tensor([1.0, float(sig)], dtype=torch.float64)
    per_level = accelerator.reduce(per_level.to(accelerator.device), "sum").cpu()
    for lv in range(5):
        if per_level[0, lv] > 0:
            out[f"rollout/groups_level{lv + 1}"] = int(per_level[0, lv].item())
            out[f"rollout/signal_frac_level{lv + 1}"] = per_level[1, lv].item() / per_level[0, lv].item()
    return StepStats(out, s["tokens"])


def write_summary(run, wall_time_s: float):
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
        if avg + "_anywhere" in before and avg + "_anywhere" in after:  # tasks/rg.py: how much of the gain is format
            sampled += f"; answer anywhere: avg@{k} {before[avg + '_anywhere']:.3f} -> {after[avg + '_anywhere']:.3f}"
            summary.update({f"{name}avg@{k}_anywhere_before": before[avg + "_anywhere"],
                            f"{name}avg@{k}_anywhere_after": after[avg + "_anywhere"]})
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
    # the panels' second lines: the longest response and the truncated share (its own axis) beside the mean length,
    # all-correct and all-wrong groups beside the zero-std share
    length, groups = axes.flat[1], axes.flat[3]
    length.lines[0].set_label("mean"), groups.lines[0].set_label("all the same")
    for k, label, ax in (("rollout/response_length_max", "longest", length), ("rollout/frac_all_correct", "all correct", groups),
                         ("rollout/frac_all_wrong", "all wrong", groups)):
        if any(k in r for r in rows):
            ax.plot(steps, [r.get(k, float("nan")) for r in rows], label=label)
    if any("rollout/accuracy_anywhere" in r for r in rows):  # tasks/rg.py: the right answer in any form, beside the paid one
        axes.flat[0].plot(steps, [r.get("rollout/accuracy_anywhere", float("nan")) for r in rows], label="answer anywhere")
        axes.flat[0].lines[0].set_label("in format (paid)"), axes.flat[0].legend(fontsize=8)
    length.legend(fontsize=8, loc="upper left"), groups.legend(fontsize=8)
    if any("rollout/truncated_frac" in r for r in rows):
        share = length.twinx()
        share.plot(steps, [r.get("rollout/truncated_frac", float("nan")) for r in rows], "r:", label="truncated share")
        share.set_ylim(0, 1), share.tick_params(axis="y", colors="r"), share.legend(fontsize=8, loc="upper right")
    length.set_title("response length (tokens)"), groups.set_title("groups without signal")
    ax = axes.flat[6]
    tasks = sorted({k.split("/")[1] for e in evals for k in e if k.count("/") == 2 and k.endswith("/accuracy")})
    for t in tasks or [None]:  # --stages: one curve per task
        p = f"eval/{t}/" if t else "eval/"
        ax.plot([e["step"] for e in evals], [e.get(p + "accuracy", float("nan")) for e in evals], "o-", label=f"{t or ''} greedy".strip())
        if any(p + "accuracy_anywhere" in e for e in evals):
            ax.plot([e["step"] for e in evals], [e.get(p + "accuracy_anywhere", float("nan")) for e in evals], "o:",
                    label=f"{t or ''} greedy, answer anywhere".strip())
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
