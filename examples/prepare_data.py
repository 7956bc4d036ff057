"""Download and convert the example runs' data to the project's plain schema (prompt, answer, level): one .jsonl per
split under data/, so that a training machine needs no network and every run reads the same frozen files.

    pip install datasets                          # the hub loader (not a dependency of the project itself)
    python examples/prepare_data.py gsm8k         # data/gsm8k/train.jsonl (7,473) and test.jsonl (1,319)
    python examples/prepare_data.py math          # data/math/train_level3-5.jsonl and math500.jsonl (MATH-500)
    python examples/prepare_data.py dapo          # data/dapo/dapo-math-17k.jsonl (deduplicated) and aime2024.jsonl

Sources (hub datasets; `--source NAME=FILE_OR_HUB_NAME` replaces one, e.g. a copy downloaded elsewhere):
  gsm8k/train, gsm8k/test      openai/gsm8k (config main): the answer after '####'
  math/train_level3-5          DigitalLearningGmbH/MATH-lighteval, train split, levels 3-5 (the Dr. GRPO paper's
                               zero-RL training set), the answer of the last \\boxed{} in the solution
  math/math500                 HuggingFaceH4/MATH-500 (test): the 500 problems of "Let's Verify Step by Step"
  dapo/dapo-math-17k           BytedTsinghua-SIA/DAPO-Math-17k: each of its ~17k problems is stored ~100 times
                               (1.79M rows); kept once, the question taken out of DAPO's template (data.row_to_example)
  dapo/aime2024                HuggingFaceH4/aime_2024 (train split: its only one), 30 problems
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data  # noqa: E402
from tasks.load import load_dataset  # noqa: E402
from tools.cli import ArgParser, cli  # noqa: E402

# name -> (hub spec or file, split, levels kept or None)
SETS = {
    "gsm8k": {"gsm8k/train": ("openai/gsm8k:main", "train", None), "gsm8k/test": ("openai/gsm8k:main", "test", None)},
    "math": {"math/train_level3-5": ("DigitalLearningGmbH/MATH-lighteval", "train", (3, 4, 5)),
             "math/math500": ("HuggingFaceH4/MATH-500", "test", None)},
    "dapo": {"dapo/dapo-math-17k": ("BytedTsinghua-SIA/DAPO-Math-17k", "train", None),
             "dapo/aime2024": ("HuggingFaceH4/aime_2024", "train", None)},
}


def convert(spec: str, split: str, levels) -> list[dict]:
    """Rows of the plain schema from `spec`, deduplicated by question (first occurrence kept), optionally by level."""
    rows, seen = [], set()
    for ex in load_dataset(spec, split):
        if levels and ex.level not in levels:
            continue
        if ex.prompt in seen:
            continue
        seen.add(ex.prompt)
        rows.append({"prompt": ex.prompt, "answer": ex.answer, **({"level": ex.level} if ex.level is not None else {})})
    if not rows:
        raise data.DataError(f"{spec}[{split}]: no rows left" + (f" at levels {levels}" if levels else ""))
    return rows


def main(argv=None):
    ap = ArgParser(prog="examples/prepare_data.py", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="+", choices=list(SETS), help="which example's data")
    ap.add_argument("--out", default=os.path.join(ROOT, "data"), help="directory the files go to")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=SPEC",
                    help="read NAME (e.g. gsm8k/train) from SPEC (a .jsonl/.json/.parquet file or hub dataset) instead")
    a = ap.parse_args(argv)
    sources = {}
    for s in a.source:
        name, sep, spec = s.partition("=")
        if not sep or not any(name in SETS[k] for k in SETS):
            raise SystemExit(f"error: --source {s!r}: expected NAME=SPEC with NAME one of "
                             f"{', '.join(n for k in SETS for n in SETS[k])}")
        sources[name] = spec
    jobs = [(name, *SETS[k][name]) for k in a.sets for name in SETS[k]]
    converted = {}  # everything read before anything is written: no half-prepared data directory
    for name, spec, split, levels in jobs:
        spec = sources.get(name, spec)
        print(f"{name}: reading {spec} [{split}] ...", flush=True)
        converted[name] = convert(spec, split, levels)
    for name, rows in converted.items():
        path = os.path.join(a.out, name + ".jsonl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data.write_jsonl(path, rows)
        print(f"{name}: {len(rows)} problems -> {path}")


if __name__ == "__main__":
    sys.exit(cli(main))
