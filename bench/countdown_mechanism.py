"""Why a Countdown policy's answers are wrong: its searches audited line by line, before and after RL.

For each model (a cold-start build or a run's checkpoint) and each level 1-3: sample G responses at T = 1 (what GRPO
sees) to held-out problems and sort each response into one outcome: correct; no answer (none, or cut off at the
length limit); an answer the verifier rejects (a number not given or used twice, unparsable); a wrong answer after a
search with an arithmetic slip in it; a wrong answer without one. Then, over all of the searches' lines
(tasks/countdown.py check_trace): the share of "Try a op b = r." steps whose arithmetic is wrong, of "That is the
target" claims that are false, and of "Check a, b: ..." lines that list the wrong results (and the wrong steps' share by
operation, by the size of the true result and by whether the step claims the target); the checks' decisions (how
many list the target and say "No"; of those that go on to a step as if the target were listed, the share whose list
does not hold it); the same decision with the search given (teacher-forced on search_trace's searches of five times
as many held-out problems of the level: the probability the model gives to "the list holds the target" at the end
of each check's list, for lists that hold it and lists that do not, which tells a decision not learned from one
made right but off the data's contexts); the share of groups with at least one correct response (the groups that carry a GRPO signal); the mean length (of all, of the correct and of the
wrong responses) and the mean negative log-probability per sampled token.

Run:  python bench/countdown_mechanism.py MODEL [MODEL ...] [--problems 40] [--samples 8]
      e.g. the cold start beside a run's checkpoint:
      python bench/countdown_mechanism.py models/tiny-qwen2-countdown runs/countdown/checkpoint-20
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

OUTCOMES = ("correct", "no answer", "rejected answer", "wrong, slip in search", "wrong, no slip")


def audit(model_path: str, problems: int, samples: int, max_new: int, seed: int) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rollout
    from tasks.countdown import check_trace, countdown_reward, countdown_task, evaluate, extract_equation
    from tasks.templates import build_prompt

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    engine = rollout.make_engine("fast", model, tok, max_batch=256)
    rows = []
    for level in (1, 2, 3):
        examples = countdown_task(problems, "test", 0, levels=(level,))
        prompts = [build_prompt(tok, e.prompt, "countdown") for e in examples]
        torch.manual_seed(seed)
        t0 = time.time()
        groups = engine.generate(prompts, samples, rollout.SamplingParams(temperature=1.0, max_new_tokens=max_new))
        outcome, lines, lengths, logprobs, signal, right_len, wrong_len = Counter(), Counter(), [], [], 0, [], []
        for e, group in zip(examples, groups):
            problem, any_right = e.answer, False
            for c in group:
                audit_ = check_trace(c.text, problem["target"])
                lines += audit_
                lengths.append(c.length)
                logprobs += list(c.logprobs or [])
                equation = extract_equation(c.text)
                right = countdown_reward(c.text, problem) > 0
                (right_len if right else wrong_len).append(c.length)
                if right:
                    outcome["correct"] += 1
                    any_right = True
                elif c.truncated or equation is None:
                    outcome["no answer"] += 1
                elif evaluate(equation, problem["numbers"]) is None:
                    outcome["rejected answer"] += 1
                elif audit_["wrong_steps"] or audit_["wrong_checks"]:
                    outcome["wrong, slip in search"] += 1
                else:
                    outcome["wrong, no slip"] += 1
            signal += any_right
        n = sum(outcome.values())
        rows.append({"model": model_path, "level": level, "problems": len(examples), "samples": samples,
                     **{k: outcome[k] / n for k in OUTCOMES},
                     "wrong_steps": lines["wrong_steps"] / max(lines["steps"], 1), "steps": lines["steps"],
                     "false_claims": lines["false_claims"] / max(lines["claims"], 1), "claims": lines["claims"],
                     "wrong_checks": lines["wrong_checks"] / max(lines["checks"], 1), "checks": lines["checks"],
                     "repeated_tries": lines["repeats"] / max(lines["steps"], 1),
                     "missed_targets": lines["missed_targets"], "check_hits": lines["check_hits"],
                     "unfounded_hits": lines["unfounded_hits"] / max(lines["check_hits"], 1),
                     "wrong_steps_by_kind": {k[len("steps, "):]: round(lines["wrong " + k] / lines[k], 3)
                                             for k in sorted(lines) if k.startswith("steps, ")},
                     "groups_with_signal": signal / len(examples), "length": statistics.mean(lengths),
                     "length_correct": statistics.mean(right_len) if right_len else None,
                     "length_wrong": statistics.mean(wrong_len) if wrong_len else None,
                     "nll": -sum(logprobs) / max(len(logprobs), 1),
                     "decision_given_the_search": decision(model, tok, countdown_task(5 * problems, "test", 0, levels=(level,)), seed),
                     "seconds": round(time.time() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def forced(model, tok, example, text: str):
    """`text` read by the model as its response to `example`'s prompt (teacher-forced): the prompt's length in
    characters, each token's first character, and the log-probabilities of the next token at each position."""
    import torch

    from tasks.templates import build_prompt

    prompt = build_prompt(tok, example.prompt, "countdown")
    enc = tok(prompt + text, add_special_tokens=False, return_offsets_mapping=True)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([enc["input_ids"]])).logits[0].float(), -1)
    return len(prompt), [a for a, _ in enc["offset_mapping"]], logp


def decision(model, tok, examples, seed: int) -> dict | None:
    """The check's decision with the search given (teacher-forced): for held-out problems (the audit's level, 5 x
    --problems of them: the searches within the bound below hold few checks that list the target), search_trace's
    searches (random.Random(seed + i) for the i-th problem; those within 1,440 characters, the SFT data's bound); at the
    end of each check's list the model's probability that the list holds the target: p(".") / (p(".") + p(". No ")),
    the two pieces that follow a list that holds it and one that does not. None when the tokenizer does not have both
    as one token each. It reads a model SFT'd on search_trace's searches as they are now (a check on the last two
    numbers first, then the step: tasks/countdown.py); on another format's model the figures mean nothing."""
    import random
    import re

    from tasks.countdown import search_trace

    ids = [tok(x, add_special_tokens=False)["input_ids"] for x in (".", ". No ")]
    if any(len(i) != 1 for i in ids):
        return None
    (dot,), (no,) = ids
    hit, miss, late = [], [], []
    for i, e in enumerate(examples):
        text = search_trace(e.answer, random.Random(seed + i), 1440)
        if text is None:
            continue
        n, starts, logp = forced(model, tok, e, text)
        for k, m in enumerate(re.finditer(r"Check \d+, \d+: [\d, ]+(?=\.)", text)):
            j = starts.index(n + m.end())  # the token after the list: "." or ". No "
            p_dot, p_no = logp[j - 1, dot].exp().item(), logp[j - 1, no].exp().item()
            p = p_dot / (p_dot + p_no)
            holds = text.startswith(".\nTry", m.end())
            (hit if holds else miss).append(p)
            if not holds and k >= 4:
                late.append(p)
    mean = lambda v: round(statistics.mean(v), 3) if v else None  # noqa: E731
    return {"checks_holding": len(hit), "p_holds_when_it_does": mean(hit), "checks_not_holding": len(miss),
            "p_holds_when_it_does_not": mean(miss), "p_holds_when_it_does_not_5th_check_on": mean(late),
            "decided_wrong": round((sum(p <= 0.5 for p in hit) + sum(p > 0.5 for p in miss)) / max(1, len(hit) + len(miss)), 3)}


def held(d: dict | None) -> str:
    return "-" if not d or d["p_holds_when_it_does"] is None or d["p_holds_when_it_does_not"] is None else (
        f"{d['p_holds_when_it_does']:.2f} / {d['p_holds_when_it_does_not']:.2f}")


def table(rows: list[dict]) -> str:
    out = ["| model | level | " + " | ".join(OUTCOMES) + " | wrong steps | false claims | wrong checks | groups with a "
           "correct response | repeated tries | mean length | NLL / token | search given: p(holds) when it does / "
           "does not |", "|" + "---|" * (15 + len(OUTCOMES) - 5)]
    for r in rows:
        out.append(f"| {r['model']} | {r['level']} | " + " | ".join(f"{r[k]:.3f}" for k in OUTCOMES)
                   + f" | {r['wrong_steps']:.3f} of {r['steps']} | {r['false_claims']:.3f} of {r['claims']}"
                   f" | {r['wrong_checks']:.3f} of {r['checks']} | {r['groups_with_signal']:.3f} | {r['repeated_tries']:.3f}"
                   f" | {r['length']:.0f} | {r['nll']:.3f} | {held(r['decision_given_the_search'])} |")
    return "\n".join(out)


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="model directories (a build in models/, or a run's checkpoint-N)")
    ap.add_argument("--problems", type=int, default=40, help="held-out problems per level (default 40)")
    ap.add_argument("--samples", type=int, default=8, help="responses per problem at T = 1 (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    for name, v in (("--problems", args.problems), ("--samples", args.samples), ("--max-new-tokens",
                    args.max_new_tokens), ("--threads", args.threads)):
        if v < 1:
            fail(f"{name} must be >= 1, got {v}")
    for m in args.models:
        if not os.path.isfile(os.path.join(m, "config.json")):
            fail(f"{m}: not a model directory (no config.json)")
    import torch
    torch.set_num_threads(args.threads)
    rows = []
    for m in args.models:
        rows += audit(m, args.problems, args.samples, args.max_new_tokens, args.seed)
    print(table(rows))


if __name__ == "__main__":
    main()
