"""SmolLM2-135M-Instruct before any RL, on reasoning-gym tasks: where GRPO has signal. Prints figures, asserts nothing.

    python bench/smollm2_base.py                                   # the specs below, 16 problems x 8 samples, 128 tokens
    python bench/smollm2_base.py --specs "rg:chain_sum?format=answer-line" --max-new-tokens 256
    python bench/smollm2_base.py --specs SPEC --cut 16 32 --ask "Work it out step by step, then end your response with
        'The final answer is ANSWER.'"   # right answers a shorter limit would cut; another instruction than the format's

Per spec (held-out problems of tasks.rg, the model's chat template, T 1, the fast engine, one thread): in-format accuracy
(what RGReward pays: the answer read by the spec's format rule), answer-anywhere accuracy (the right answer at the end
in any form: RGReward.anywhere), the share of groups of G samples with mixed in-format outcomes (GRPO's signal: a group
all right or all wrong has zero advantages), the truncated share and the mean response length. With --cut N: of the
in-format right responses, the share longer than N tokens (those a limit of N would cut: the reward noise DAPO's
overlong techniques are for) and the in-format accuracy of the responses longer than N. With --ask: that instruction
after the question in place of the format's (the answer is still read by the format's rule).
"""
import argparse
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SPECS = ["rg:chain_sum?min_terms=2&max_terms=2&max_digits=2&format=boxed",
         "rg:chain_sum?min_terms=2&max_terms=2&max_digits=2&format=answer-line",
         "rg:chain_sum?min_terms=2&max_terms=2&max_digits=2&format=answer-tag"]


def main():
    import torch

    from engines.loading import load_model
    from rollout import SamplingParams, make_engine
    from tasks.rg import RGReward, rg_task
    from tasks.templates import build_prompt
    from tools import smollm2
    from tools.cli import set_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", nargs="+", default=SPECS)
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--engine", default="fast")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cut", type=int, nargs="*", default=[], help="limits N: right answers longer than N tokens")
    ap.add_argument("--ask", help="the instruction after the question, in place of the format's")
    a = ap.parse_args()
    set_threads(1)
    model, tok = load_model(smollm2.get(install=False), torch.float32)
    engine = make_engine(a.engine, model.eval(), tok)
    reward = RGReward()
    cuts = "".join(f" right over {n} | acc over {n} |" for n in a.cut)
    print(f"| spec | in-format | answer-anywhere | mixed groups | truncated | mean length |{cuts} s |")
    print("|---|---|---|---|---|---|" + "---|---|" * len(a.cut) + "---|")
    for spec in a.specs:
        torch.manual_seed(a.seed)
        exs = rg_task(spec, a.problems, "test", a.seed)
        if a.ask:
            exs = [replace(ex, prompt=ex.prompt.rsplit("\n", 1)[0] + "\n" + a.ask) for ex in exs]
        prompts = [build_prompt(tok, ex.prompt, "rg", "chat") for ex in exs]
        t0 = time.time()
        outs = engine.generate(prompts, a.samples, SamplingParams(1.0, 1.0, a.max_new_tokens))
        comps = [c for g in outs for c in g]
        golds = [ex.answer for ex in exs for _ in range(a.samples)]
        _, ok, _ = reward([c.text for c in comps], golds, [c.truncated for c in comps])
        anywhere = reward.anywhere([c.text for c in comps], golds)
        G = a.samples
        mixed = sum(0 < sum(ok[i * G:(i + 1) * G]) < G for i in range(len(exs))) / len(exs)
        over = ""
        for n in a.cut:
            long_ok = [o for c, o in zip(comps, ok) if c.length > n]
            over += (f" {sum(long_ok)}/{sum(ok)} | " + (f"{sum(long_ok) / len(long_ok):.3f}" if long_ok else "-") +
                     " |")
        print(f"| `{spec}` | {sum(ok) / len(ok):.3f} | {sum(anywhere) / len(ok):.3f} | {mixed:.2f} | "
              f"{sum(c.truncated for c in comps) / len(comps):.2f} | {sum(c.length for c in comps) / len(comps):.1f} |"
              f"{over} {time.time() - t0:.0f} |", flush=True)
        if os.environ.get("SHOW"):
            for c, g in list(zip(comps, golds))[: int(os.environ["SHOW"])]:
                print("---", g["entry"]["answer"], repr(c.text[-300:]))


if __name__ == "__main__":
    main()
