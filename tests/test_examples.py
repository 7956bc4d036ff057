"""Every example run (examples/*.sh) rehearsed on CPU: the same script, the model swapped for a real-shaped stand-in
(examples/standins.py), the data for small fixtures of the same schema, a few flags appended (two steps, small
batches, the fast engine, float32), then checked: generation stops at the model's end of turn, each reward is read
from the response's own turn, the config is the one the script names, and the checkpoint loads back into evaluate.py
and into vLLM. What this cannot show is a GPU's speed and memory: no GPU has run these scripts.

Run:  python -m pytest -q tests/test_examples.py      (~3 min: three rehearsals, two vLLM loads)
"""
import json
import os
import socket
import subprocess
import sys

import pytest

import data
from reward import MathReward

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import standins  # noqa: E402

FX = os.path.join(ROOT, "fixtures", "math")
# Two steps of 2 prompts x 4 on CPU. The stand-ins answer nothing correctly, so DAPO's dynamic sampling would never
# fill a batch (it stops with an error line, as verl's does): the rehearsals of the DAPO scripts switch it off.
SMALL = ["--rollout", "fast", "--dtype", "float32", "--max-steps", "2", "--batch-size", "8", "--group-size", "4",
         "--mini-batch-size", "4", "--max-new-tokens", "24", "--eval-problems", "4", "--eval-every", "0",
         "--save-every", "2", "--warmup-steps", "0"]
EXAMPLES = {  # script -> (stand-in kind, train data, eval data, extra flags, what config.json must say)
    "qwen2.5-0.5b-instruct-gsm8k.sh": ("qwen2.5-instruct", "gsm8k.jsonl", "gsm8k.jsonl", [],
                                       dict(recipe="grpo", template="chat", reward="math", kl_coef=1e-3, lora_rank=0)),
    "qwen2.5-math-1.5b-dapo-zero.sh": ("qwen2.5-base", "math.jsonl", "math500.json",
                                       ["--no-dynamic-sampling", "--overlong-buffer", "4"],
                                       dict(recipe="dapo", template="qwen-math", reward="math", clip_high=0.28,
                                            loss_agg="token-mean", lora_rank=0)),
    "qwen2.5-math-7b-dapo-8gpu.sh": ("qwen2.5-base", "dapo.parquet", "aime.jsonl",
                                     ["--no-dynamic-sampling", "--overlong-buffer", "4", "--batch-size", "16",
                                      "--mini-batch-size", "8", "--eval-samples", "2"],
                                     dict(recipe="dapo", template="dapo", reward="math-dapo", lora_rank=32, group_size=4)),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    built = {}

    def get(kind):
        if kind not in built:
            built[kind] = standins.build(kind, str(tmp_path_factory.mktemp(kind) / "model"))
        return built[kind]

    return get


def run(cmd, env=None, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHON=sys.executable, **(env or {}))
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-5000:]}"
    return r


@pytest.mark.parametrize("script", list(EXAMPLES))
def test_example_rehearsal(script, standin, tmp_path):
    kind, train, evald, extra, want = EXAMPLES[script]
    model, out = standin(kind), tmp_path / "run"
    env = dict(MODEL=model, DATA=os.path.join(FX, train), EVAL_DATA=os.path.join(FX, evald), OUT=str(out),
               NUM_PROCESSES="2", LAUNCH_ARGS=f"--num_machines 1 --mixed_precision no --dynamo_backend no "
                                              f"--main_process_port {free_port()}")
    r = run(["bash", os.path.join("examples", script), *SMALL, *extra], env)
    assert "held-out greedy accuracy" in r.stdout.strip().splitlines()[-1]
    cfg = json.load(open(out / "config.json"))
    assert {k: cfg[k] for k in want} == want and cfg["model"] == model
    ckpt = out / "checkpoint-2"
    assert ckpt.is_dir() and (ckpt / ("adapter_config.json" if want["lora_rank"] else "config.json")).exists()

    # generation stops at the end of turn: most responses end before --max-new-tokens (the stand-ins end a turn
    # after ~19 tokens on average; without the end-of-turn stop every response ran to the limit)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert len(rows) == 2 and all(r["rollout/truncated_frac"] < 0.8 for r in rows), [r["rollout/truncated_frac"] for r in rows]

    # each reward is read from the response's own turn: no completion holds a next turn, and re-scoring the completion
    # gives the correctness the run recorded
    reward = MathReward(mode=want["reward"], workers=0)
    samples = [json.loads(line) for line in open(out / "samples.jsonl")]
    assert samples
    for s in samples:
        assert "<|im_start|>" not in s["completion"] and "<|im_end|>" not in s["completion"]
    _, correct, _ = reward([s["completion"] for s in samples], [s["answer"] for s in samples],
                           truncated=[s["truncated"] for s in samples])
    assert [bool(c) for c in correct] == [bool(s["correct"]) for s in samples]

    # the checkpoint loads back: evaluate.py (the run's final greedy accuracy, same problems and template) and vLLM
    summary = json.load(open(out / "summary.json"))
    common = [sys.executable, "evaluate.py", "--model", str(ckpt), "--data", env["EVAL_DATA"], "--eval-problems", "4",
              "--samples", "0", "--template", want["template"], "--reward", want["reward"], "--max-new-tokens", "24"]
    r = run(common + ["--out", str(tmp_path / "eval.json")])
    assert json.load(open(tmp_path / "eval.json"))["accuracy"] == summary["accuracy_after"]
    if want["recipe"] == "dapo" and not want["lora_rank"]:
        return  # vLLM is loaded for one full checkpoint and one adapter: a third start adds time, not coverage
    pytest.importorskip("vllm")
    run(common + ["--rollout", "vllm", "--out", str(tmp_path / "eval_vllm.json")])
    assert json.load(open(tmp_path / "eval_vllm.json"))["problems"] == json.load(open(tmp_path / "eval.json"))["problems"]


def test_prepare_data_converts_and_dedupes(tmp_path):
    """examples/prepare_data.py through a --source file: DAPO-Math-17k's duplicated rows kept once, the question taken
    out of DAPO's template, MATH levels filtered; nothing is written when a source fails."""
    pre, post = data.DAPO_TEMPLATE.split("{question}")
    rows = [{"prompt": [{"role": "user", "content": pre + q + post}], "reward_model": {"ground_truth": a}}
            for q, a in [("What is 2+3?", "5"), ("What is 2+3?", "5"), ("What is 7*6?", "42")]]
    src = tmp_path / "dapo17k.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "data"
    run([sys.executable, "examples/prepare_data.py", "dapo", "--out", str(out), "--source", f"dapo/dapo-math-17k={src}",
         "--source", f"dapo/aime2024={FX}/aime.jsonl"])
    got = [json.loads(line) for line in open(out / "dapo" / "dapo-math-17k.jsonl")]
    assert got == [{"prompt": "What is 2+3?", "answer": "5"}, {"prompt": "What is 7*6?", "answer": "42"}]
    math = [{"problem": f"p{i}", "answer": str(i), "level": f"Level {i}"} for i in range(1, 6)]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math))
    run([sys.executable, "examples/prepare_data.py", "math", "--out", str(out), "--source", f"math/train_level3-5={tmp_path / 'm.jsonl'}",
         "--source", f"math/math500={FX}/math500.json"])
    assert [r["level"] for r in map(json.loads, open(out / "math" / "train_level3-5.jsonl"))] == [3, 4, 5]
    r = subprocess.run([sys.executable, "examples/prepare_data.py", "gsm8k", "--out", str(tmp_path / "none"), "--source",
                        f"gsm8k/train={FX}/bad_unknown_schema.jsonl"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()


def test_hub_name_without_network_fails_at_once(tmp_path):
    """A hub model or dataset name on a machine that cannot reach the hub: one line naming it, in seconds (not
    transformers' retries). HF_HUB_OFFLINE=1 stands for "no network" on machines that have one."""
    for args, name in [(["--model", "Qwen/Qwen2.5-0.5B-Instruct"], "Qwen/Qwen2.5-0.5B-Instruct"),
                       (["--train-data", "openai/gsm8k:main"], "openai/gsm8k")]:
        r = subprocess.run([sys.executable, "train.py", *args, "--output-dir", str(tmp_path / "x"), "--max-steps", "1"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, HF_HUB_OFFLINE="1"))
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.startswith(f"error: ") and name in r.stderr and "cannot be reached" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
