"""Train every recipe on the default task (CPU) and print one table: accuracy before / after, wall time, and the
metrics each technique adds (averaged over the run). The README's recipe table is this script's output.

    python bench/recipes.py                              # all recipes, default settings
    python bench/recipes.py --recipes dapo,c3po -- --max-steps 60 --threads 1   # after --: extra train.py flags
"""
import sys
import argparse
import json
import os

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import config
import train

# metric -> column title; a recipe shows the columns its techniques log
COLUMNS = {
    "policy/clip_frac_high": "clip hi", "policy/clip_frac_low": "clip lo", "rollout/gen_rounds": "gen rounds",
    "rollout/groups_kept_frac": "kept groups", "c3po/budget_fill": "budget fill", "c3po/tokens_used": "budget tokens",
    "policy/entropy_coef": "entropy coef", "data/easy_slot_share_total": "easy share", "data/easy_pool_size": "easy pool",
    "data/stage": "stage", "data/dropped_total": "dropped",
}
# avg@k with --stages: summary.json has "math avg@4_before", "code accuracy_after", ...


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default=",".join(config.RECIPES))
    ap.add_argument("--out", default="runs/bench_recipes")
    ap.add_argument("rest", nargs="*", help="extra train.py arguments (after --)")
    a = ap.parse_args()
    lines = ["| recipe | μ | accuracy before | accuracy after | gain | avg@k before → after (T, top-p) | wall time (s) "
             "| technique metrics (mean over steps) |", "|---|---|---|---|---|---|---|---|"]
    for r in a.recipes.split(","):
        out = os.path.join(a.out, r)
        hist = train.main(["--recipe", r, "--output-dir", out, *a.rest])
        s = json.load(open(os.path.join(out, "summary.json")))
        tech = []
        for k, title in COLUMNS.items():
            vals = [h[k] for h in hist if isinstance(h.get(k), (int, float))]
            if vals and (k != "policy/clip_frac_low" or r in ("dapo", "mimo", "compass")):
                tech.append(f"{title} {sum(vals) / len(vals):.3g}" + (f" (last {vals[-1]:.3g})" if k in ("data/stage", "data/easy_pool_size", "data/dropped_total") else ""))
        cfg = json.load(open(os.path.join(out, "config.json")))
        mu = cfg["epochs"] * cfg["batch_size"] // cfg["mini_batch_size"]
        k = cfg["eval_samples"]
        tasks = [t for t in ("math ", "code ") if f"{t}accuracy_before" in s] or [""]  # --stages: one value per task
        cell = lambda key, fmt: ", ".join(f"{t}{fmt.format(s[t + key])}" for t in tasks)  # noqa: E731
        avg = (cell(f"avg@{k}_before", "{:.3f}") + " → " + cell(f"avg@{k}_after", "{:.3f}") +
               f" ({cfg['eval_temperature']}, {cfg['eval_top_p']})" if f"{tasks[0]}avg@{k}_before" in s else "–")
        gain = ", ".join(f"{t}{s[t + 'accuracy_after'] - s[t + 'accuracy_before']:+.3f}" for t in tasks)
        lines.append(f"| {r} | {mu} | {cell('accuracy_before', '{:.3f}')} | {cell('accuracy_after', '{:.3f}')} | {gain} "
                     f"| {avg} | {s['wall_time_s']:.0f} | {', '.join(tech)} |")
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
