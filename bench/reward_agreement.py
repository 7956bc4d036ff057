"""Agreement of each math reward mode with careful human labels (fixtures/math/labelled.jsonl), beside math-verify
alone, per batch of rows: 'before-tuning' (written before the grader existed), 'after-tuning' (written after its
first version, labelled before it was run on them), 'after-tuning-2' (the same, after the second round of changes),
'after-tuning-3' (the same, written for the decimal-comma, currency and unit, e-notation, percent, interval-in-words
and reversed / negated inequality answers, labelled before the third round of changes was written), 'after-tuning-4'
(thousands with LaTeX thin spaces, a currency sign or decimal comma on an answer line in prose, answers in running
prose, a box split by `$`, responses cut off by the length limit: written and labelled by hand alongside the fourth
round of changes, so a check that those kinds are handled, not a blind test).

Run:  python bench/reward_agreement.py [--table fixtures/math/labelled.jsonl] [--show-misses]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reward  # noqa: E402
from verifier import extract  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def mv_default(completion: str, gold: str) -> bool:
    """math-verify alone: its default extraction over the text after </think>, the gold wrapped in \\boxed{}."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse("\\boxed{" + gold + "}"), parse(completion.rsplit("</think>", 1)[-1])))
    except BaseException:
        return False


def mv_last_box(completion: str, gold: str) -> bool:
    """math-verify on the content of the last box only (what this project did before its `math` mode)."""
    from math_verify import parse, verify

    boxes = extract.find_boxes(extract.final_text(completion, "math-strict"))
    if not boxes:
        return False
    try:
        return bool(verify(parse("\\boxed{" + gold + "}"), parse("\\boxed{" + boxes[-1][2] + "}")))
    except BaseException:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", default=os.path.join(HERE, "..", "fixtures", "math", "labelled.jsonl"))
    ap.add_argument("--show-misses", action="store_true")
    a = ap.parse_args(argv)
    try:
        rows = [json.loads(line) for line in open(a.table, encoding="utf-8")]
    except (OSError, json.JSONDecodeError) as e:
        print(f"error: --table {a.table}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    graders = {m: (lambda c, g, m=m: reward.check(c, g, m, 5.0).correct) for m in reward.MODES}
    graders["math-verify, default extraction"] = mv_default
    graders["math-verify, last box"] = mv_last_box
    batches = sorted({r["written"] for r in rows}, key=["before-tuning", "after-tuning", "after-tuning-2", "after-tuning-3",
                                                             "after-tuning-4"].index)
    print("| grader | " + " | ".join(f"{b} ({sum(r['written'] == b for r in rows)})" for b in batches)
          + f" | all ({len(rows)}) | false pos. | false neg. |")
    print("|---" * (len(batches) + 4) + "|")
    for name, f in graders.items():
        v = [f(r["completion"], r["gold"]) for r in rows]
        cells = []
        for b in batches + [None]:
            idx = [i for i, r in enumerate(rows) if b is None or r["written"] == b]
            cells.append(f"{sum(v[i] == rows[i]['label'] for i in idx) / len(idx):.1%}")
        fp = sum(x and not r["label"] for x, r in zip(v, rows))
        fn = sum(not x and r["label"] for x, r in zip(v, rows))
        print(f"| {name} | " + " | ".join(cells) + f" | {fp} | {fn} |")
        if a.show_misses:
            for x, r in zip(v, rows):
                if x != r["label"]:
                    print(f"|   miss {r['id']} {r['category']}: label {r['label']} | {r['completion'][-70:]!r} | gold {r['gold']!r} |")


if __name__ == "__main__":
    main()
