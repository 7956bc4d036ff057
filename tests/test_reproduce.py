"""bench/reproduce.py: every experiment's flags are valid train.py flags, the claim checks on hand-made numbers, and
one paper end to end at 2 steps (the reproductions themselves are benchmarks, not tests).

Run:  python -m pytest -q tests/test_reproduce.py
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import config  # noqa: E402
import reproduce  # noqa: E402
from trainer import stages  # noqa: E402


@pytest.mark.parametrize("paper", list(reproduce.PAPERS))
def test_every_variant_is_a_valid_run(paper):
    for e in reproduce.PAPERS[paper]():
        assert e.variants and e.table and e.plots
        for v in e.variants:
            for smoke in (False, True):
                cfg = config.parse_config(reproduce.train_argv(e, v, 0, "/tmp/x", smoke))
                planned = stages.parse_stages(cfg)
                assert planned[-1].end == cfg.max_steps
                if smoke:
                    assert cfg.max_steps == 2


def run(metrics, summary=None):
    return reproduce.Run("x", [{"step": i + 1, **m} for i, m in enumerate(metrics)], [], summary or {"after": {}})


def test_compare_and_verdict_by_hand():
    e = reproduce.Experiment("e", "", [], {"a": [], "b": []}, None, [], [])
    e.runs = {"a": [run([{"k": 1.0}, {"k": 3.0}]), run([{"k": 2.0}, {"k": 2.0}]), run([{"k": 0.0}, {"k": 1.0}])],
              "b": [run([{"k": 1.0}, {"k": 1.0}]), run([{"k": 1.0}, {"k": 1.0}]), run([{"k": 1.0}, {"k": 1.0}])]}
    mean = reproduce.over_run("k")  # a: 2, 2, 0.5 (mean 1.5, sd 0.866); b: 1, 1, 1 (sd 0)
    holds, wins, n, ma, mb = reproduce.compare(e, "a", "b", mean)
    assert (holds, wins, n, ma, mb) == (False, 2, 3, 1.5, 1.0)  # ahead by 0.5, within a's spread: no difference
    e.runs["c"] = [run([{"k": 3.0}]), run([{"k": 3.0}]), run([{"k": 3.3}])]  # mean 3.1, sd 0.173: clear of b
    assert reproduce.compare(e, "c", "b", mean)[:3] == (True, 3, 3)
    assert reproduce.verdict_of([(True, 2, 3, 1.5, 1.0)]) == "partly"  # in the mean, not in every seed
    assert reproduce.verdict_of([(True, 3, 3, 0, 0), (True, 3, 3, 0, 0)]) == "reproduces"
    assert reproduce.verdict_of([(False, 1, 3, 0, 0)]) == "does not"
    assert reproduce.compare(e, "a", "b", mean, higher=False)[:3] == (False, 1, 3)
    assert reproduce.cv("k")(e.runs["a"][0]) == pytest.approx(2 ** 0.5 / 2)  # sd(1, 3) / mean(1, 3)
    assert reproduce.mean_sd([1.0, 2.0, 3.0]) == "2 ± 1"


def test_one_paper_end_to_end_at_two_steps(tmp_path):
    """compass --smoke: both variants run 2 steps through train.py, the report and its check are computed, nothing
    goes to docs/; a second call reuses the finished runs."""
    docs = os.path.join(reproduce.ROOT, "docs", "reproduce_compass.md")
    before = os.path.getmtime(docs) if os.path.exists(docs) else None
    out = reproduce.main(["compass", "--smoke", "--out", str(tmp_path)])
    (name, verdict), = out["compass"]
    assert verdict in ("reproduces", "partly", "does not")
    runs = list((tmp_path / "compass").glob("*/*/seed0"))
    assert len(runs) == 2
    for r in runs:
        assert len([json.loads(x) for x in open(r / "metrics.jsonl")]) == 2
        assert json.load(open(r / "run.json"))["wall_s"] > 0
    assert (os.path.getmtime(docs) if os.path.exists(docs) else None) == before
    stamp = [os.path.getmtime(r / "summary.json") for r in runs]
    reproduce.main(["compass", "--smoke", "--out", str(tmp_path)])
    assert [os.path.getmtime(r / "summary.json") for r in runs] == stamp
