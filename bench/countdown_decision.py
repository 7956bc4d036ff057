"""Can the tiny Countdown model learn its check's decision (does this list hold the target)? Level-1 SFT trials.

bench/countdown_mechanism.py finds the cold start's false claims in one decision: at the end of a check's list ("Check
8, 5: 3, 13, 40."), whether the list holds the target, and with the search given (teacher-forced) the 1,200-step
build says "holds" with p 0.40-0.45 where it does and 0.17-0.22 where it does not. Each trial here changes one thing about
what the SFT shows or weighs, SFTs a model from scratch on level-1 problems (3 numbers, two steps: searches of ~150
tokens, so a trial is ~25 minutes on one core) and measures the decision, with the search given and in the model's own
sampled searches:

  plain                     search_trace's searches as they are (tasks/countdown.py)
  target-in-check           the target written in each check and each result decided where it is written: "Check
                            8, 5 for 22: 3, 13, 40. No." and "Check 2, 11 for 22: 9, 13, 22 is the target."
  target-in-check-weighted  the same, the pieces that follow a number (", ", ". No.", " is the target.", ". That is
                            the target.", ". Left: ") 10x in the loss
  number-tokens             every whole number 0-999 one token of the tokenizer (equality with the target becomes a
                            match of one token; the arithmetic a table of tokens)
  check-drill               one row in four a drill of eight checks for the row's target, half of them holding it
                            (positive decisions 4x as dense as in the searches; drill rows end without EOS)
  decision-weighted         the piece after a number ("." or ". No ": a check's decision, or a line's end) 5x in the
                            loss

Every trial: CountdownRecipe's model and tokenizer (plus the variant's pieces), 500 SFT steps of 64 searches (1,000
level-1 training problems; each search within 480 tokens), the recipe's learning rate 3e-3 held for 70 % of the steps
after a 5 % warm-up, then decayed linearly. Measured: with the search given, on search_trace's searches of 200
held-out problems (random.Random(i) for the i-th), the probability of "holds" at each check's end where the list holds
the target and where it does not (target-in-check: at each result, where it is the target and where not); sampled
(T = 1, 8 searches for each of 40 held-out problems): correct share, mean tokens, and tasks/countdown.py check_trace's
counts (steps, wrong steps, claims, false claims, checks, wrong checks, checks that go on to a claim and those of them
whose list lacks the target, targets listed and missed, repeated tries).

The attempts trials are measured on their own form (tasks/countdown.py check_attempts): sampled, 8 searches at T = 1
for each of 50 held-out problems and greedy on 200 (400 new tokens each); with the search given, attempt_trace's
searches (guided 0, 16 attempts) of 200 held-out problems, p("yes") against p("no") at each check where the attempt
makes the target and where it does not. Their SFT problems are drawn at random from the 1,000 (not in turn).

Run:  python bench/countdown_decision.py plain number-tokens [--steps 500] [--out DIR]
      python bench/countdown_decision.py --measure DIR --variant plain   # the decision of a model saved by a trial
      python bench/countdown_decision.py --measure DIR --variant attempts  # an attempts model (a trial's, or a GRPO
                                                                            # checkpoint of one): sampled, greedy, given
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = ("plain", "target-in-check", "target-in-check-weighted", "number-tokens", "check-drill", "decision-weighted",
            "attempts", "attempts-guided")
ATTEMPTS = {"attempts": (16, 0.0), "attempts-guided": (8, 0.25)}  # attempt_trace's max_attempts and guided
TARGET_PIECES = [" for ", " is the target.", ". No."]  # target-in-check's pieces, one token each
_CHECK = re.compile(r"^Check (\d+), (\d+): ([\d, ]+)\.( No (\d+)\.)?$")
_CHECK_T = re.compile(r"Check (\d+), (\d+) for (\d+): ([\d, ]+?)( is the target\.|\. No\.)")


def with_target(variant: str, text: str | None, target: int) -> str | None:
    """target-in-check's form of a search_trace search; the others' search unchanged."""
    if not variant.startswith("target-in-check") or text is None:
        return text
    out = []
    for line in text.split("\n"):
        m = _CHECK.match(line)
        if m:
            res = m[3].split(", ")
            if m[4]:
                line = f"Check {m[1]}, {m[2]} for {target}: {', '.join(res)}. No."
            else:
                line = f"Check {m[1]}, {m[2]} for {target}: {', '.join(res[:res.index(str(target)) + 1])} is the target."
        out.append(line)
    return "\n".join(out)


def results(a: int, b: int) -> list[int]:
    from tasks.countdown import _combine

    return sorted({v for v, _ in _combine(a, None, b, None) if isinstance(v, int) and v != 0})


def drill(target: int, r: random.Random) -> str:
    """Eight checks for `target` in search_trace's form, each holding it with probability 1/2."""
    lines = [f"Target {target}."]
    for _ in range(8):
        if r.random() < 0.5:
            while True:
                a, b = r.randint(1, 2 * target), r.randint(1, 10)
                if target in results(a, b):
                    break
        else:
            a, b = r.randint(1, 2 * target), r.randint(1, 10)
        if r.random() < 0.5:
            a, b = b, a
        res = results(a, b)
        lines.append(f"Check {a}, {b}: {', '.join(map(str, res))}." + ("" if target in res else f" No {target}."))
    return "\n".join(lines)


def piece(tok, text: str) -> int:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, text
    return ids[0]


def trial(variant: str, steps: int, out: str) -> dict:
    import torch

    from tasks.countdown import attempt_trace, check_trace, countdown_reward, countdown_task, search_trace
    from tasks.templates import build_prompt
    from tools import tiny

    torch.set_num_threads(1)
    torch.manual_seed(0)
    recipe = dataclasses.replace(tiny.CountdownRecipe(), levels="1", sft_steps=steps)
    extra = TARGET_PIECES if variant.startswith("target-in-check") else (
        [str(i) for i in range(1000)] if variant == "number-tokens" else [])
    tok = tiny.build_tokenizer(recipe.words() + extra, recipe.positions)
    model = tiny.build_model(recipe, tok)
    if len(tok) > 128:
        model.resize_token_embeddings(-(-len(tok) // 64) * 64, mean_resizing=False)

    rng = random.Random(0)
    problems = countdown_task(1000, "train", 1, levels=(1,))
    order = [dataclasses.replace(problems[i % len(problems)]) for i in range(steps * 64)]
    if variant in ATTEMPTS:
        order = []
    rng.shuffle(order)
    pool, n = [], 0
    while variant in ATTEMPTS and len(pool) < steps * 64:
        ex = dataclasses.replace(problems[rng.randrange(len(problems))])
        ex.solution = attempt_trace(ex.answer, rng, *ATTEMPTS[variant])
        if ex.solution is not None:
            pool.append(ex)
    while len(pool) < len(order):
        ex = dataclasses.replace(order[n % len(order)])
        n += 1
        for _ in range(8):
            s = with_target(variant, search_trace(ex.answer, rng, 1440), ex.answer["target"])
            if s is not None and len(tok(s, add_special_tokens=False)["input_ids"]) <= 480:
                ex.solution = s
                pool.append(ex)
                break
    if variant == "check-drill":
        r = random.Random(9)
        for i in range(0, len(pool), 4):
            pool[i] = dataclasses.replace(pool[i], solution=drill(pool[i].answer["target"], r),
                                          meta={**pool[i].meta, "cut": True})
    weighted = torch.tensor([piece(tok, w) for w in (" is the target.", ". No.", ". That is the target.", ". Left: ",
                                                      ", ")]) if variant == "target-in-check-weighted" else None
    dot, no, zero, nine = (piece(tok, w) for w in (".", ". No ", "0", "9"))

    def accumulate(micro_batches):
        total = sum(int((lab[:, 1:] != -100).sum()) for _, _, lab in micro_batches)
        loss = torch.zeros(())
        for ids, att, lab in micro_batches:
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
            y = lab[:, 1:]
            nll = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-100,
                                                    reduction="none")
            if variant == "decision-weighted":  # "." or ". No " after a digit: a check's decision, or a line's end
                prev = ids[:, :-1]
                w = (1 + 4 * (((y == dot) | (y == no)) & (prev >= zero) & (prev <= nine)).float()).flatten()
            elif weighted is not None:
                w = 1 + 9 * torch.isin(y.flatten(), weighted).float()
            else:
                w = torch.ones_like(nll)
            part = (nll * w).sum() / total
            part.backward()
            loss = loss + (nll.sum() / total).detach()
        return loss

    opt = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm, t0, log = max(1, steps // 20), time.time(), []
    model.train()
    for step in range(steps):
        f = min(1.0, (step + 1) / warm) * (1.0 if step < 0.7 * steps else max(0.02, (steps - step) / (0.3 * steps)))
        for g in opt.param_groups:
            g["lr"] = recipe.sft_lr * f
        rows = sorted(pool[step * 64:(step + 1) * 64], key=lambda e: len(e.solution))
        opt.zero_grad(set_to_none=True)
        batches = [tiny.sft_batch(tok, rows[i:i + 16]) for i in range(0, 64, 16)]
        loss = tiny.accumulate(model, batches) if variant in ATTEMPTS else accumulate(batches)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log.append((step, round(float(loss), 4)))
            print(f"[{variant}] step {step} loss {float(loss):.4f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)

    if variant in ATTEMPTS:
        return {"variant": variant, "steps": steps, "loss": log, **attempts_measure(model, tok)}
    c = Counter()  # sampled: 8 searches at T = 1 for each of 40 held-out problems
    probs = countdown_task(40, "test", 3, levels=(1,))
    for i in range(0, 40, 8):
        chunk = [e for e in probs[i:i + 8] for _ in range(8)]
        enc = [tok(build_prompt(tok, e.prompt, "countdown"), add_special_tokens=False)["input_ids"] for e in chunk]
        P, pad = max(map(len, enc)), tok.pad_token_id
        x = torch.tensor([[pad] * (P - len(e)) + e for e in enc])
        with torch.no_grad():
            o = model.generate(input_ids=x, attention_mask=(x != pad).long(), max_new_tokens=480, do_sample=True,
                               temperature=1.0, top_k=0, pad_token_id=pad, eos_token_id=tok.eos_token_id)
        for e, row in zip(chunk, o):
            text, target = tok.decode(row[P:], skip_special_tokens=True), e.answer["target"]
            c["n"] += 1
            c["correct"] += countdown_reward(text, e.answer)
            c["tokens"] += int((row[P:] != pad).sum())
            k = check_trace(text, target)
            if not variant.startswith("target-in-check"):
                for key in ("checks", "check_hits", "unfounded_hits", "missed_targets", "wrong_checks"):
                    c[key] += k[key]
            for key in ("claims", "false_claims", "steps", "wrong_steps", "repeats"):
                c[key] += k[key]
            for m in _CHECK_T.finditer(text) if variant.startswith("target-in-check") else ():
                listed, want = [int(v) for v in m[4].replace(" ", "").split(",") if v], results(int(m[1]), int(m[2]))
                c["checks"] += 1
                c["wrong_checks"] += listed != (want[:want.index(target) + 1] if target in want else want)
                if m[5] == " is the target.":
                    c["check_hits"] += 1
                    c["unfounded_hits"] += listed[-1] != target or target not in want
                else:
                    c["missed_targets"] += target in listed
    sampled = {k: (round(v / c["n"], 3) if k in ("correct", "tokens") else v) for k, v in c.items()}
    return {"variant": variant, "steps": steps, "loss": log, "sampled": sampled, "given": given(variant, model, tok)}


def attempts_measure(model, tok) -> dict:
    """An attempts trial's model on its own form: sampled (T = 1, 8 searches for each of 50 held-out level-1 problems)
    and greedy (200 problems), 400 new tokens, audited by check_attempts; and the check with the search given."""
    import torch

    from tasks.countdown import check_attempts, countdown_reward, countdown_task
    from tasks.templates import build_prompt

    out = {}
    for mode, probs, reps in (("sampled", countdown_task(50, "test", 3, levels=(1,)), 8),
                              ("greedy", countdown_task(200, "test", 5, levels=(1,)), 1)):
        c = Counter()
        for i in range(0, len(probs), 64 // reps):
            chunk = [e for e in probs[i:i + 64 // reps] for _ in range(reps)]
            enc = [tok(build_prompt(tok, e.prompt, "countdown"), add_special_tokens=False)["input_ids"] for e in chunk]
            P, pad = max(map(len, enc)), tok.pad_token_id
            x = torch.tensor([[pad] * (P - len(e)) + e for e in enc])
            kw = dict(do_sample=True, temperature=1.0, top_k=0) if mode == "sampled" else dict(do_sample=False)
            with torch.no_grad():
                o = model.generate(input_ids=x, attention_mask=(x != pad).long(), max_new_tokens=400, pad_token_id=pad,
                                   eos_token_id=tok.eos_token_id, **kw)
            for e, row in zip(chunk, o):
                text = tok.decode(row[P:], skip_special_tokens=True)
                c["n"] += 1
                c["correct"] += countdown_reward(text, e.answer)
                c["tokens"] += int((row[P:] != pad).sum())
                c.update(check_attempts(text, e.answer["target"]))
        out[mode] = {k: (round(v / c["n"], 3) if k in ("correct", "tokens") else v) for k, v in c.items()}
        out[mode]["hit_rate"] = round(c["hits"] / max(1, c["attempts"]), 3)
    out["given"] = attempts_given(model, tok)
    return out


def attempts_given(model, tok) -> dict:
    """The check with the search given: attempt_trace's searches (guided 0, 16 attempts; random.Random(i) for the
    i-th) of 200 held-out level-1 problems, teacher-forced; at each "Target T: ", p("y") / (p("y") + p("n"))."""
    import importlib.util

    from tasks.countdown import attempt_trace, countdown_task

    spec = importlib.util.spec_from_file_location("countdown_mechanism", os.path.join(ROOT, "bench", "countdown_mechanism.py"))
    mech = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mech)
    y, no = piece(tok, "y"), piece(tok, "n")
    hit, miss = [], []
    for i, e in enumerate(countdown_task(200, "test", 0, levels=(1,))):
        text = attempt_trace(e.answer, random.Random(i))
        if text is None:
            continue
        n, starts, logp = mech.forced(model, tok, e, text)
        for m in re.finditer(r"Target \d+: (yes|no)\.", text):
            j = starts.index(n + m.start(1))
            p_y, p_n = logp[j - 1, y].exp().item(), logp[j - 1, no].exp().item()
            (hit if m[1] == "yes" else miss).append(p_y / (p_y + p_n))
    mean = lambda v: round(statistics.mean(v), 3) if v else None  # noqa: E731
    return {"checks_holding": len(hit), "p_yes_when_it_does": mean(hit), "checks_not_holding": len(miss),
            "p_yes_when_it_does_not": mean(miss),
            "decided_wrong": round((sum(p <= 0.5 for p in hit) + sum(p > 0.5 for p in miss)) / max(1, len(hit) + len(miss)), 3)}


def given(variant: str, model, tok) -> dict:
    """The decision with the search given, on 200 held-out level-1 problems (random.Random(i) for the i-th)."""
    import importlib.util

    from tasks.countdown import countdown_task, search_trace

    spec = importlib.util.spec_from_file_location("countdown_mechanism", os.path.join(ROOT, "bench", "countdown_mechanism.py"))
    mech = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mech)
    examples = countdown_task(200, "test", 0, levels=(1,))
    if not variant.startswith("target-in-check"):
        return mech.decision(model, tok, examples, 0)
    ids = {w: piece(tok, w) for w in (" is the target.", ", ", ". No.")}
    at, other = [], []
    for i, e in enumerate(examples):  # at each result: p(" is the target.") against the list going on or ending
        target = e.answer["target"]
        text = with_target(variant, search_trace(e.answer, random.Random(i), 1440), target)
        if text is None:
            continue
        n, starts, logp = mech.forced(model, tok, e, text)
        for m in re.finditer(r"Check \d+, \d+ for \d+: ([\d, ]+)", text):
            for r in re.finditer(r"\d+", m[1]):
                j = starts.index(n + m.start(1) + r.end())
                q = {w: logp[j - 1, t].exp().item() for w, t in ids.items()}
                (at if int(r[0]) == target else other).append(q[" is the target."] / sum(q.values()))
    mean = lambda v: round(statistics.mean(v), 3) if v else None  # noqa: E731
    return {"results_that_are_the_target": len(at), "p_target_there": mean(at), "other_results": len(other),
            "p_target_elsewhere": mean(other),
            "decided_wrong": round((sum(p <= 0.5 for p in at) + sum(p > 0.5 for p in other)) / max(1, len(at) + len(other)), 3)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*", help="trials to run, each in its own process: " + ", ".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "countdown_decision"))
    ap.add_argument("--measure", metavar="DIR", help="measure a model a trial saved (with --variant), no SFT")
    ap.add_argument("--variant", choices=VARIANTS)
    a = ap.parse_args(argv)
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad or a.steps < 1 or (a.measure is None) == (not a.variants) or (a.measure and not a.variant):
        print("error: " + (f"{', '.join(bad)}: not a trial ({', '.join(VARIANTS)})" if bad else f"--steps must be >= 1, got {a.steps}"
              if a.steps < 1 else "give trials to run, or --measure DIR with --variant"), file=sys.stderr)
        return 2
    if a.measure:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        torch.manual_seed(0)  # the sampled searches: the same figures on every call
        model, tok = AutoModelForCausalLM.from_pretrained(a.measure).eval(), AutoTokenizer.from_pretrained(a.measure)
        print(json.dumps(attempts_measure(model, tok) if a.variant in ATTEMPTS else given(a.variant, model, tok)))
        return 0
    if len(a.variants) == 1:
        res = trial(a.variants[0], a.steps, os.path.join(a.out, a.variants[0]))
        print("RESULT " + json.dumps(res), flush=True)
        with open(os.path.join(a.out, a.variants[0], "trial.json"), "w") as f:
            json.dump(res, f)
        return 0
    import subprocess  # one process a trial, side by side (one core each)

    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), v, "--steps", str(a.steps), "--out", a.out])
             for v in a.variants]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
