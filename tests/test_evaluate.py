"""evaluate.py: the unbiased pass@k estimator on hand-computed numbers, and evaluate() on scripted completions.

Run:  python -m pytest tests/test_evaluate.py -q        (about 2 s on CPU)
"""
import itertools
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data
import evaluate
import reward
from rollout import Completion, SamplingParams
from tasks.templates import build_prompt


# ------------------------------------------------------------------------------------------------
# pass@k (Chen et al. 2021, Eq. 1)
# ------------------------------------------------------------------------------------------------
def test_pass_at_k_by_hand():
    assert evaluate.pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert evaluate.pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert evaluate.pass_at_k(5, 2, 3) == pytest.approx(0.9)  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert evaluate.pass_at_k(5, 0, 1) == 0.0
    assert evaluate.pass_at_k(5, 0, 5) == 0.0
    assert evaluate.pass_at_k(5, 4, 2) == 1.0  # n - c = 1 < k: every pair holds a correct sample
    assert evaluate.pass_at_k(5, 5, 1) == 1.0
    assert evaluate.pass_at_k(5, 1, 5) == 1.0
    with pytest.raises(ValueError, match="pass@6 needs at least 6 samples"):
        evaluate.pass_at_k(5, 2, 6)


@pytest.mark.parametrize("n", [1, 2, 4, 6])
def test_pass_at_k_is_the_subset_probability(n):
    """pass@k = P(a uniformly drawn k-subset of the n samples holds a correct one), by enumeration."""
    for c in range(n + 1):
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            p = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
            assert evaluate.pass_at_k(n, c, k) == pytest.approx(p, abs=1e-12)
            # and the numerically stable product form of Chen et al.'s code
            stable = 1.0 if n - c < k else 1.0 - math.prod(1.0 - k / j for j in range(n - c + 1, n + 1))
            assert evaluate.pass_at_k(n, c, k) == pytest.approx(stable, abs=1e-12)


# ------------------------------------------------------------------------------------------------
# evaluate() with a scripted engine and the real MathReward
# ------------------------------------------------------------------------------------------------
class ScriptedEngine:
    """generate() returns scripted texts: GREEDY[question] for temperature 0, SAMPLED[question] otherwise."""

    def __init__(self, greedy, sampled):
        self.greedy, self.sampled, self.calls = greedy, sampled, []

    def generate(self, prompts, n, params):
        self.calls.append((list(prompts), n, params))
        out = []
        for p in prompts:
            q = p.split("Question: ", 1)[1].split("\n", 1)[0]  # plain template: tokenizer None
            texts = [self.greedy[q]] if params.temperature == 0 else self.sampled[q]
            assert len(texts) == n
            out.append([Completion(list(range(len(t))), t, len(t), False) for t in texts])
        return out


EXAMPLES = [
    data.Example("1+2", "3", level=1),
    data.Example("10+5+5", "20", level=2),
    data.Example("7+1+1", "9", level=2),
    data.Example("half of one", "\\frac{1}{2}", level=None),  # no level: left out of the per-level breakdown
]
GREEDY = {  # right, wrong, right, right (the last one only through math-verify: 0.5 == \frac{1}{2})
    "1+2": "1+2=3 \\boxed{3}",
    "10+5+5": "\\boxed{21}",
    "7+1+1": "7+1=8 8+1=9 \\boxed{9}",
    "half of one": "\\boxed{0.5}",
}
SAMPLED = {  # correct counts c = 4, 0, 2, 1 out of n = 4
    "1+2": ["\\boxed{3}"] * 4,
    "10+5+5": ["\\boxed{19}", "\\boxed{21}", "no answer given", "<think>\\boxed{20}</think>\\boxed{2}"],
    "7+1+1": ["\\boxed{9}", "\\boxed{8}", "\\boxed{9.0}", "\\boxed{}"],
    "half of one": ["\\boxed{1/2}", "\\boxed{2}", "\\boxed{0.25}", "\\boxed{\\frac{1}{3}}"],
}


@pytest.fixture(scope="module")
def result():
    engine = ScriptedEngine(GREEDY, SAMPLED)
    res = evaluate.evaluate(engine, None, EXAMPLES, reward.MathReward(workers=0), samples=4, ks=(1, 2, 4, 8),
                            temperature=0.7, top_p=0.9, max_new_tokens=33, n_show=2)
    return res, engine


def test_greedy_accuracy_and_levels(result):
    res, _ = result
    assert res["accuracy"] == pytest.approx(3 / 4)
    assert res["accuracy_level1"] == 1.0
    assert res["accuracy_level2"] == 0.5
    assert not any(k.startswith("accuracy_level") and k not in ("accuracy_level1", "accuracy_level2") for k in res)
    lens = [len(t) for t in GREEDY.values()]
    assert res["response_length"] == pytest.approx(sum(lens) / 4)


def test_avg_and_pass_at_k(result):
    res, _ = result
    counts, n = [4, 0, 2, 1], 4
    assert res["avg@4"] == pytest.approx(7 / 16)
    assert res["pass@1"] == pytest.approx(7 / 16)  # pass@1 == avg@n
    # pass@2 per problem: 1, 0, 1 - C(2,2)/C(4,2) = 5/6, 1 - C(3,2)/C(4,2) = 1/2
    assert res["pass@2"] == pytest.approx((1 + 0 + 5 / 6 + 1 / 2) / 4)
    assert res["pass@4"] == pytest.approx(3 / 4)  # any correct among all 4
    assert "pass@8" not in res  # k > samples is skipped
    assert res["pass@2"] == pytest.approx(sum(evaluate.pass_at_k(n, c, 2) for c in counts) / 4)


def test_engine_calls_and_samples(result):
    res, engine = result
    (p1, n1, s1), (p2, n2, s2) = engine.calls
    assert p1 == p2 == [build_prompt(None, ex.prompt) for ex in EXAMPLES]
    assert n1 == 1 and s1 == SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=33)
    assert n2 == 4 and s2 == SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33)
    assert res["samples"] == [
        {"prompt": "1+2", "answer": "3", "completion": GREEDY["1+2"], "truncated": False, "correct": True},
        {"prompt": "10+5+5", "answer": "20", "completion": GREEDY["10+5+5"], "truncated": False, "correct": False},
    ]


def test_greedy_only():
    engine = ScriptedEngine(GREEDY, SAMPLED)
    res = evaluate.evaluate(engine, None, EXAMPLES[:2], reward.MathReward(workers=0))
    assert len(engine.calls) == 1
    assert res["accuracy"] == 0.5 and res["samples"] == []
    assert not any(k.startswith(("avg@", "pass@")) for k in res)


@pytest.mark.parametrize("recipe", ["grpo", "dapo", "mimo"])
def test_a_checkpoint_is_evaluated_with_its_runs_settings(recipe, trained_model_path, tmp_path, capsys):
    """evaluate.py with no flag but --model on a run's final checkpoint prints the numbers the run printed: the
    checkpoint carries its run's evaluation (problems, seed, T / top-p of the recipe, k, reward, template, length),
    and says so. The run directory means its newest checkpoint; a flag given wins (and is named)."""
    import train

    out = tmp_path / recipe
    train.main(["--model", trained_model_path, "--output-dir", str(out), "--recipe", recipe, "--max-steps", "1",
                "--batch-size", "32", "--group-size", "4", "--mini-batch-size", "32", "--reward-workers", "0",
                "--eval-every", "0", "--eval-problems", "40", "--eval-samples", "3", "--max-gen-rounds", "20",
                "--seed", "3"])
    summary = json.load(open(out / "summary.json"))
    capsys.readouterr()
    evaluate.main(["--model", str(out / "checkpoint-1")])
    cap = capsys.readouterr()
    got = json.loads(cap.out)
    cfg = json.load(open(out / "config.json"))
    assert f"with the run's settings ({out}/checkpoint-1/run_config.json)" in cap.err
    assert f"top-p {cfg['eval_top_p']!r}" in cap.err and "given:" not in cap.err
    assert (got["problems"], got["samples"], got["seed"], got["temperature"], got["top_p"]) == (
        40, 3, 3, cfg["eval_temperature"], cfg["eval_top_p"])
    assert got["accuracy"] == summary["accuracy_after"]
    assert got["avg@3"] == summary["avg@3_after"] and got["pass@3"] == summary["pass@3_after"]
    if recipe == "dapo":  # the run directory: its newest checkpoint; a flag given wins and is named
        evaluate.main(["--model", str(out), "--samples", "0"])
        cap = capsys.readouterr()
        got = json.loads(cap.out)
        assert got["model"] == str(out / "checkpoint-1") and "avg@3" not in got and "given: --samples" in cap.err
        assert got["accuracy"] == summary["accuracy_after"]


def test_evaluate_takes_train_pys_threads(monkeypatch):
    """--threads as train.py's (one helper, tools.cli.set_threads): default 1, set before any model work (an OpenMP
    pool sharing its cores with another job runs many times slower); 0 leaves torch's own. tools/grade.py too."""
    import torch

    import config
    from tools import cli, grade

    seen = []
    monkeypatch.setattr(evaluate, "set_threads", lambda n: (seen.append(n), cli.set_threads(n)))

    def stop(path):  # the first step after the set-up: how many threads the evaluation would run on
        seen.append(torch.get_num_threads())
        raise SystemExit("error: stopped here")

    monkeypatch.setattr(evaluate, "resolve_model", stop)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert cli.cli(evaluate.main, ["--model", "m"]) == 2
        torch.set_num_threads(2)
        assert cli.cli(evaluate.main, ["--model", "m", "--threads", "0"]) == 2
    finally:
        torch.set_num_threads(before)
    assert config.Config().threads == 1
    assert seen == [1, 2 if torch.cuda.is_available() else 1, 0, 2]  # (on a GPU machine the CPU's are left alone)
    assert grade.parse_args(["--data", "builtin", "--out", "o.jsonl"]).threads == 1
