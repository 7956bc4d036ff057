"""The chat-shaped tiny models (models/tiny-qwen2-chat, models/tiny-qwen2-think; tiny.ChatRecipe): Qwen2.5's
conventions, and the invariants a learning run on the real-model path rests on.

  * the shipped models are the ones tiny.py builds (recipe key, tokenizer files, config; the weights bit for bit in the
    slow test of tests/test_tiny.py's kind, here too);
  * the conventions: tokenizer EOS <|endoftext|>, turns end with <|im_end|>, a default system turn, a generation_config
    whose EOS list holds <|im_end|>; the thinking template opens <think>;
  * the loss mask: no template, system-turn or user-turn token is a target, in the cold-start SFT or in RL;
  * the end of turn: <|im_end|> ends each response once, is a response token whose log-prob the trainer computes
    (equal to the engine's sampling log-prob), and the text the reward scores is the response's tokens decoded;
  * the thinking variant: the answer is read after </think>, a box inside the thought does not count;
  * learning (slow): GRPO with LoRA through the chat template, BPE, the <|im_end|> stop and the boxed answer must raise
    held-out accuracy by MARGIN (measured: 0.625 -> 0.975 in 323 s on 2 cores, docs/real_models.md).

Run:  python -m pytest -q tests/test_chat_model.py              (42 s of CPU, 207 s wall on 2 cores shared at load ~12)
      python -m pytest -q tests/test_chat_model.py -m slow      (the learning run and the two SFT rebuilds)
"""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import data
from engines.hf import FastEngine
from engines.loading import load_model
from engines.stops import end_of_turn_id, stop_token_ids
from reward import MathReward
from rollout import SamplingParams
from tasks.addition import builtin_task
from tasks.templates import INSTRUCTION, build_prompt
from tools import tiny
from trainer import batches, logprobs
from verifier.extract import final_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARGIN = 0.2  # held-out greedy accuracy gained by the slow learning run (40 steps, 400 problems)
RECIPES = pytest.mark.parametrize("recipe", [tiny.CHAT_RECIPE, tiny.THINK_RECIPE], ids=["chat", "think"])


@pytest.fixture(scope="module")
def shipped():
    """style -> (path, model, tokenizer) of the shipped chat models."""
    out = {}
    for r in (tiny.CHAT_RECIPE, tiny.THINK_RECIPE):
        path = tiny.shipped_dir(r)
        out[r.style] = (path, *load_model(path, torch.float32))
    return out


@RECIPES
def test_shipped_model_is_what_tiny_builds(recipe, tmp_path):
    """Recipe key, tokenizer files and config of the shipped model are what tools/tiny.py builds now (the weights need the
    SFT: the slow test below)."""
    from transformers import AutoConfig

    where = tiny.shipped_dir(recipe)
    assert where.endswith(os.path.join("models", recipe.name))
    assert tiny.shipped_key(where) == recipe.key()
    assert tiny.get_tiny_model(recipe, verbose=False) == where
    tok = tiny.build_chat_tokenizer(recipe)
    tok.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.load(open(tmp_path / name)) == json.load(open(os.path.join(where, name))), name
    model = tiny.build_chat_model(recipe, tok)
    skip = {"transformers_version", "dtype", "torch_dtype", "architectures", "_name_or_path"}
    built, ship = model.config.to_dict(), AutoConfig.from_pretrained(where).to_dict()
    assert {k: v for k, v in built.items() if k not in skip} == {k: v for k, v in ship.items() if k not in skip}
    shipped_gen = {k: v for k, v in json.load(open(os.path.join(where, "generation_config.json"))).items() if k != "transformers_version"}
    assert shipped_gen == {k: v for k, v in model.generation_config.to_diff_dict().items() if k != "transformers_version"}
    n_merges = len(json.load(open(tmp_path / "tokenizer.json"))["model"]["merges"])
    assert 2000 <= n_merges <= 4000, n_merges  # a few thousand merges, as a real byte-level BPE has many
    size = sum(os.path.getsize(os.path.join(where, f)) for f in os.listdir(where))
    assert size < 8e6, size  # small enough to ship


def test_qwen25_conventions(shipped):
    for style, (path, model, tok) in shipped.items():
        assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
        im_end, eos = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
        assert model.config.eos_token_id == eos and model.generation_config.eos_token_id == [im_end, eos]
        assert end_of_turn_id(tok) == im_end
        assert set(stop_token_ids(tok, model.generation_config)) == {im_end, eos}
        assert model.config.vocab_size > len(tok)  # padded rows beyond the tokenizer, as Qwen2.5's embedding has
        p = build_prompt(tok, "12+3", "math", "chat")
        head = f"<|im_start|>system\n{tiny.CHAT_SYSTEM}<|im_end|>\n<|im_start|>user\n12+3\n{INSTRUCTION}<|im_end|>\n"
        assert p == head + "<|im_start|>assistant\n" + ("<think>\n" if style == "think" else "")
        # --system-prompt replaces the default system turn
        assert build_prompt(tok, "1+2", "math", "chat", system="Be brief.").startswith("<|im_start|>system\nBe brief.<|im_end|>")
        ids = tok(p, add_special_tokens=False)["input_ids"]
        assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and ids.count(im_end) == 2
        assert tok.convert_ids_to_tokens(tok("17+25", add_special_tokens=False)["input_ids"]) == list("17+25")  # digits split


@RECIPES
def test_sft_targets_are_the_response_and_one_end_of_turn(recipe, shipped):
    """The cold start's loss mask: the template, the system and user turns are never targets; the response and its one
    <|im_end|> are; the thinking variant always closes its thought before the boxed answer."""
    _, _, tok = shipped[recipe.style]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    prompts, responses = tiny.chat_sft_data(tok, dataclasses.replace(recipe, sft_steps=1, sft_batch=32))
    ids, attn, labels, pos = tiny.chat_sft_batch(tok, prompts, responses)
    assert sum(r.startswith("\\boxed") or r.startswith("\n</think>") for r in responses) in range(12, 31)  # bare answers mixed in
    for i in range(len(prompts)):
        target = labels[i][labels[i] != -100].tolist()
        assert target == tok(responses[i], add_special_tokens=False)["input_ids"] + [im_end]
        assert tok.decode(ids[i][labels[i] != -100]) == responses[i] + "<|im_end|>"
        n_prompt = len(tok(prompts[i], add_special_tokens=False)["input_ids"])
        assert (labels[i][: -len(target)] == -100).all() and attn[i].sum() == n_prompt + len(target)
        assert pos[i][attn[i] == 1].tolist() == list(range(n_prompt + len(target)))
        if recipe.style == "think":
            assert responses[i].count("</think>") == 1 and "\\boxed" in responses[i].split("</think>")[1]
            assert "<think>" not in responses[i]  # the template opened it


@RECIPES
def test_rl_batch_scores_the_response_and_its_end_of_turn_once(recipe, shipped):
    """What the RL update sees of sampled chat responses: the masked tokens are exactly the completion's tokens (no
    template token, <|im_end|> last and only there), the trainer's log-prob of each, <|im_end|> included, is the engine's
    sampling log-prob, and the text the reward scores is those tokens decoded without the end of turn."""
    _, model, tok = shipped[recipe.style]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    stops = set(stop_token_ids(tok, model.generation_config))
    exs = builtin_task(6, "test", seed=3)
    prompts = [build_prompt(tok, ex.prompt, "math", "chat") for ex in exs]
    torch.manual_seed(0)
    comps = [c for g in FastEngine(model, tok).generate(prompts, 4, SamplingParams(1.0, 1.0, 64)) for c in g]
    ended = [c for c in comps if not c.truncated]
    assert len(ended) >= 0.9 * len(comps) and all(c.token_ids[-1] == im_end for c in ended)
    p_ids = [tok(prompts[i // 4], add_special_tokens=False)["input_ids"] for i in range(len(comps))]
    r_ids = [c.token_ids for c in comps]
    batch = batches.make_batch(tok, p_ids, r_ids, "cpu")
    resp, mask = batch[3], batch[4]
    template = set(tok.convert_tokens_to_ids(["<|im_start|>", "<|endoftext|>"]))
    for i, c in enumerate(comps):
        scored = resp[i][mask[i].bool()].tolist()
        assert scored == c.token_ids and not template & set(scored)
        assert not stops & set(scored[:-1]) and scored.count(im_end) == (0 if c.truncated else 1)
        assert c.text == tok.decode(scored, skip_special_tokens=True) and "<|im_end|>" not in c.text
    with torch.no_grad():
        logp, _ = logprobs.response_logprobs(model, batch, 1.0)
    for i, c in enumerate(comps):
        got = logp[i][: c.length]
        assert torch.allclose(got, torch.tensor(c.logprobs), atol=2e-4), i
        assert (logp[i][c.length :] == 0).all()
    rewards, correct, _ = MathReward(workers=0)([c.text for c in comps], [exs[i // 4].answer for i in range(len(comps))])
    assert any(correct) and not all(correct)  # the model answers, sometimes right: there is something to learn


def test_thinking_answer_is_read_after_the_thought(shipped):
    """The thinking model's responses close </think> and box the answer after it; the reward reads only that part: a
    box inside the thought is not the answer."""
    _, model, tok = shipped["think"]
    exs = builtin_task(40, "test", seed=5)
    prompts = [build_prompt(tok, ex.prompt, "math", "chat") for ex in exs]
    comps = [g[0] for g in FastEngine(model, tok).generate(prompts, 1, SamplingParams(0.0, 1.0, 64))]
    assert sum("</think>" in c.text for c in comps) >= 0.9 * len(comps)
    reward = MathReward(workers=0)
    _, correct, _ = reward([c.text for c in comps], [ex.answer for ex in exs])
    for c, ex, ok in zip(comps, exs, correct):
        after = c.text.rsplit("</think>", 1)[1] if "</think>" in c.text else ""
        assert final_text(c.text) == after
        assert ok == (data.last_boxed(after) == ex.answer)
    golds = ["7", "9"]
    text = "3+4=7 \\boxed{7}\n</think>\n\n\\boxed{9}"
    assert reward([text, text], golds)[1] == [False, True]


@pytest.mark.slow
@RECIPES
def test_fresh_build_reproduces_the_shipped_weights_bit_for_bit(recipe, tmp_path):
    torch.set_num_threads(1)  # as `python -m tools.tiny` builds it
    from safetensors.torch import load_file

    path = tiny.get_tiny_model(recipe, cache_dir=str(tmp_path), verbose=False, use_shipped=False)
    built, ship = load_file(os.path.join(path, "model.safetensors")), load_file(os.path.join(tiny.shipped_dir(recipe), "model.safetensors"))
    assert set(built) == set(ship) and all(torch.equal(built[k], ship[k]) for k in built)
    for name in ("recipe.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert json.load(open(os.path.join(path, name))) == json.load(open(os.path.join(tiny.shipped_dir(recipe), name))), name


@pytest.mark.slow
def test_grpo_with_lora_through_the_chat_path_learns(tmp_path):
    """GRPO with LoRA on models/tiny-qwen2-chat, through everything a real model's run goes through: the chat template
    and its system turn, the BPE tokenizer, the <|im_end|> stop (the tokenizer's EOS is <|endoftext|>), the \\boxed{}
    answer read by the math reward, peft adapters on a frozen base: the example script's run with --lora-rank 8.
    Held-out greedy accuracy must rise by >= MARGIN while responses end their turn (truncated share near 0) and no
    completion holds a template token."""
    out = tmp_path / "run"
    r = subprocess.run(["bash", "examples/tiny-qwen2-chat-cpu.sh", "--lora-rank", "8"], cwd=ROOT, capture_output=True,
                       text=True, env=dict(os.environ, OUT=str(out), PYTHON=sys.executable, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.load(open(out / "summary.json"))
    assert summary["accuracy_after"] - summary["accuracy_before"] >= MARGIN, summary
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert max(row["rollout/truncated_frac"] for row in rows[-5:]) <= 0.02, [row["rollout/truncated_frac"] for row in rows]
    for s in (json.loads(line) for line in open(out / "samples.jsonl")):
        assert not any(t in s["completion"] for t in ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "system\n"))


@pytest.mark.slow
def test_grpo_through_the_thinking_path_learns(tmp_path):
    """GRPO (full fine-tuning) on models/tiny-qwen2-think: the template opens <think>, the response reasons, closes the
    thought and boxes its answer after it, and the math reward reads only what follows </think>. The example
    script's run with MODEL=models/tiny-qwen2-think (~5 minutes on 2 cores): held-out greedy accuracy must rise by
    >= MARGIN, responses end their turn, and every logged completion closes its thought once with the answer after."""
    out = tmp_path / "run"
    r = subprocess.run(["bash", "examples/tiny-qwen2-chat-cpu.sh"], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, MODEL="models/tiny-qwen2-think", OUT=str(out), PYTHON=sys.executable,
                                OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.load(open(out / "summary.json"))
    assert summary["accuracy_after"] - summary["accuracy_before"] >= MARGIN, summary
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert max(row["rollout/truncated_frac"] for row in rows[-5:]) <= 0.02, [row["rollout/truncated_frac"] for row in rows]
    samples = [json.loads(line) for line in open(out / "samples.jsonl")]
    assert samples
    for s in samples:
        thought, _, answer = s["completion"].partition("</think>")
        assert "<think>" not in s["completion"] and "</think>" not in answer and "\\boxed{" in answer, s
        assert "\\boxed{" not in thought, s
