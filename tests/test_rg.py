"""reasoning-gym's tasks (tasks/rg.py): the spec, seeded disjoint splits, levels, the exact reward (reasoning-gym's
partial credits score 0), the declared answer rules, answer-anywhere, and the flags that bring them to train.py.

Run:  python -m pytest -q tests/test_rg.py          (~10 s)
"""
import os

import pytest

pytest.importorskip("reasoning_gym")

import reasoning_gym  # noqa: E402

import tools.cli  # noqa: E402
import train  # noqa: E402
from data import DataError  # noqa: E402
from evaluate import evaluate  # noqa: E402
from rollout import Completion  # noqa: E402
from tasks.load import load_dataset  # noqa: E402
from tasks.rg import FORMATS, RGReward, anywhere_candidates, parse_spec, read_answer, rg_task  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = "rg:chain_sum?min_terms=2&max_terms=2&max_digits=1"  # ~200 distinct problems: splits that must not overlap


def test_spec_is_parsed_and_bad_specs_are_one_line():
    assert parse_spec("rg:chain_sum?min_terms=2&max_digits=1&format=final-answer&levels=0,2") == (
        "chain_sum", {"min_terms": 2, "max_digits": 1}, (0, 2), "final-answer")
    assert parse_spec("rg:chain_sum") == ("chain_sum", {}, None, "boxed")
    for spec, words in [("rg:nope", "has no task 'nope'"), ("rg:chain_sum?foo=1", "'foo' is not a setting of chain_sum"),
                        ("rg:chain_sum?seed=3", "seed and size come from --seed"), ("rg:chain_sum?levels=x", "levels are"),
                        ("rg:chain_sum?levels=0,99", "levels must be distinct, 0..10"),
                        ("rg:chain_sum?format=latex", "format must be one of boxed"),
                        ("rg:chain_sum?min_terms=5&max_terms=2", "reasoning-gym refused the settings")]:
        with pytest.raises(DataError, match=words):
            rg_task(spec, 4)


def test_splits_are_disjoint_seeded_and_levelled():
    train_set = load_dataset(SMALL, "train", n=3000, seed=0)  # more draws than the space has: every train question
    held_out = load_dataset(SMALL, "test", n=20, seed=0)
    assert len(train_set) == 3000 and len(held_out) == 20
    assert not {e.prompt for e in train_set} & {e.prompt for e in held_out}
    assert len({e.prompt for e in held_out}) == 20  # each held-out question once
    assert [e.prompt for e in rg_task(SMALL, 10, "train", 1)] == [e.prompt for e in rg_task(SMALL, 10, "train", 1)]
    assert [e.prompt for e in rg_task(SMALL, 10, "train", 1)] != [e.prompt for e in rg_task(SMALL, 10, "train", 2)]
    with pytest.raises(DataError, match="distinct held-out problems"):
        rg_task(SMALL, 60, "test")  # the space holds fewer
    lv = rg_task("rg:chain_sum?levels=0,3", 6, "test", 0)
    assert [e.level for e in lv] == [1, 4, 1, 4, 1, 4]
    terms = {k: {e.answer["entry"]["metadata"]["num_terms"] for e in lv if e.level == k} for k in (1, 4)}
    assert terms[1] == {2} and max(terms[4]) > 2  # level 3 of its curriculum: up to 5 terms
    ex = train_set[0]
    assert ex.prompt.endswith("\n" + FORMATS["boxed"]) and ex.answer["task"] == "chain_sum" and ex.meta["kind"] == "rg"


def test_the_reward_is_exact_where_reasoning_gym_pays_partial_credit():
    ex = rg_task(SMALL, 1, "test", 0)[0]
    gold, entry = ex.answer["entry"]["answer"], ex.answer["entry"]
    scorer = reasoning_gym.get_score_answer_fn("chain_sum")
    assert 0 < scorer(f"x{gold} y", entry) < 1  # reasoning-gym's substring credit
    r = RGReward(correct_reward=1.0, wrong_reward=-1.0)
    texts = [f"so \\boxed{{{gold}}}", f"\\boxed{{x{gold} y}}", f"\\boxed{{{gold}0}}", f"The answer is {gold}.",
             f"<think>\\boxed{{{gold}}}", f"<think>no</think> \\boxed{{{gold}}}<|im_end|>",
             "\\boxed{" * 5000 + gold, "\\boxed{" + "}" * 10000, "x" * 100000, ""]
    rewards, correct, metrics = r(texts, [ex.answer] * len(texts))
    assert correct == [True, False, False, False, False, True, False, False, False, False]
    assert rewards == [1.0 if c else -1.0 for c in correct] and metrics == {"reward/timeouts": 0}
    assert r.anywhere(texts, [ex.answer] * len(texts)) == [True, True, False, True, True, True, True, False, False, False]
    # a prompt that opens the thought: the response must close it before its answer
    assert RGReward(thought_open=True)([f"\\boxed{{{gold}}}", f"hm</think>\\boxed{{{gold}}}"], [ex.answer] * 2)[1] == [False, True]


@pytest.mark.parametrize("fmt,text,answer", [
    ("boxed", "Adding: \\boxed{12}.<|im_end|>", "12"),
    ("boxed", "\\boxed{3} then \\boxed{12}<|endoftext|>", "12"),
    ("answer-line", "3 + 9 = 12\nAnswer: 12", "12"),
    ("answer-line", "**Answer:** 12\n", "12"),
    ("answer-tag", "<answer>3</answer> no, <answer> 12 </answer></s>", "12"),
    ("final-answer", "So 3 + 9 = 12. The final answer is **12**.<|im_end|>", "12"),
    ("final-answer", "The final answer is: $12$.\nHope it helps", "12"),
    ("final-answer", "I think it is 12.", None),
    ("answer-tag", "<answer>12", None),
    ("worked", "34 + 57: 4 + 7 = 11, carry 1; 3 + 5 + 1 = 9. The final answer is 91.<|im_end|>", "91"),
    ("worked", "5 - 8 = -3", "-3"),
    ("worked", "no number", None),
])
def test_each_format_reads_its_declared_answer(fmt, text, answer):
    assert read_answer(text, fmt) == answer


def test_worked_gives_a_cut_response_no_answer():
    """The `worked` format reads the last number, so a response cut off mid-working (its last number a step) is
    wrong whatever that number is; a finished one is read; the other formats do not read the flag."""
    ex = rg_task(SMALL + "&format=worked", 1, "test", 0)[0]
    gold = ex.answer["entry"]["answer"]
    assert ex.prompt.endswith("Work it out step by step, then end your response with 'The final answer is ANSWER.'")
    texts = [f"so it is {gold}", f"so it is {gold}", f"{gold} is wrong, it is {int(gold) + 1}"]
    assert RGReward()(texts, [ex.answer] * 3, truncated=[False, True, False])[1] == [True, False, False]
    assert RGReward()(texts, [ex.answer] * 3)[1] == [True, True, False]  # no flags: a text scored on its own
    boxed = rg_task(SMALL, 1, "test", 0)[0]
    assert RGReward()([f"\\boxed{{{boxed.answer['entry']['answer']}}} and"], [boxed.answer], truncated=[True])[1] == [True]


def test_anywhere_reads_the_end_in_any_form():
    assert anywhere_candidates("So the sum is 12.\n\n**The answer is 12**.<|im_end|>") == ["12", "12"]
    assert anywhere_candidates("Answer: $-4$") == ["-4", "-4"]
    assert anywhere_candidates("yes") == ["yes"] and anywhere_candidates("") == []


class Engine:
    """Returns the given texts, in order, for each prompt's completions."""

    def __init__(self, texts):
        self.texts = iter(texts)

    def generate(self, prompts, n, params):
        return [[Completion([1], next(self.texts), 1, False) for _ in range(n)] for _ in prompts]


def test_evaluate_reports_both_accuracies():
    from transformers import AutoTokenizer

    exs = rg_task(SMALL, 2, "test", 0)
    g = [e.answer["entry"]["answer"] for e in exs]
    greedy = [f"\\boxed{{{g[0]}}}", f"it is {g[1]}"]  # in format / anywhere only
    sampled = [f"\\boxed{{{g[0]}}}", "no", f"{g[0]}", "no", "no", f"\\boxed{{{g[1]}}}", "no", "no"]
    res = evaluate(Engine(greedy + sampled), AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2")), exs, RGReward(), samples=4,
                   ks=(1, 4), kind="rg", template="plain")
    assert res["accuracy"] == 0.5 and res["accuracy_anywhere"] == 1.0
    assert res["avg@4"] == 2 / 8 and res["avg@4_anywhere"] == 3 / 8


def test_train_flags(tmp_path, capsys, monkeypatch):
    import config

    cfg = config.parse_config(["--train-data", SMALL])
    assert cfg.reward == "rg" and cfg.eval_data == SMALL  # held out from the same task, scored by its exact reward
    out = str(tmp_path / "run")
    for argv, words in [(["--train-data", "rg:nope"], "has no task 'nope'"),
                        (["--reward", "rg"], "does not go with --reward rg"),
                        (["--train-data", SMALL, "--reward", "math"], "does not go with --reward math")]:
        capsys.readouterr()
        assert tools.cli.cli(train.main, [*argv, "--output-dir", out]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and words in err, err
    assert not (tmp_path / "run").exists()
