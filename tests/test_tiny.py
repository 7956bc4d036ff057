"""tools/tiny.py: the models shipped in models/tiny-qwen2/ (math), models/tiny-qwen2-code/ (math + code) and
models/tiny-qwen2-countdown/ (Countdown) are the ones tools/tiny.py builds.

Run:  python -m pytest tests/test_tiny.py -q                 (a few seconds)
      python -m pytest tests/test_tiny.py -q -m slow         (the full cold-start SFTs from scratch: ~8 + 9 + 12 min on 2 cores)
"""
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import tiny


def _tensors(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


RECIPES = pytest.mark.parametrize("recipe", [tiny.TinyRecipe(), tiny.CODE_RECIPE, tiny.COUNTDOWN_RECIPE],
                                  ids=["math", "math+code", "countdown"])


@RECIPES
def test_shipped_model_has_the_current_recipe_key(recipe):
    """A change to the recipe, the tokenizer or the task changes the key: the shipped model must be rebuilt
    (`python -m tools.tiny --ship [--tasks math+code | --countdown]`), else get_tiny_model would silently build instead of using it."""
    assert tiny.shipped_key(tiny.shipped_dir(recipe)) == recipe.key()
    rec = json.load(open(os.path.join(tiny.shipped_dir(recipe), "recipe.json")))
    assert {k: v for k, v in rec.items() if k != "key"} == {f.name: getattr(recipe, f.name) for f in
                                                           __import__("dataclasses").fields(type(recipe))}
    assert tiny.get_tiny_model(recipe, verbose=False) == tiny.shipped_dir(recipe)


def test_default_model_is_the_shipped_one_and_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny, "sft", lambda *a, **k: pytest.fail("the shipped model should have been used"))
    assert tiny.get_tiny_model(cache_dir=str(tmp_path), verbose=False) == tiny.SHIPPED_DIR
    assert os.listdir(tmp_path) == []
    # another recipe is not the shipped one: it is built (SFT skipped here) and cached
    monkeypatch.setattr(tiny, "sft", lambda *a, **k: None)
    other = tiny.get_tiny_model(tiny.TinyRecipe(sft_steps=1), cache_dir=str(tmp_path), verbose=False)
    assert other != tiny.SHIPPED_DIR and other.startswith(str(tmp_path))


@RECIPES
def test_shipped_tokenizer_and_initial_config_are_what_tiny_builds(recipe, tmp_path):
    """The cheap half of the build: tokenizer files and model config (the weights need the SFT: slow test)."""
    from transformers import AutoConfig

    where = tiny.shipped_dir(recipe)
    tok = tiny.build_tokenizer(recipe.words(), getattr(recipe, "positions", 512))
    tok.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.load(open(tmp_path / name)) == json.load(open(os.path.join(where, name))), name
    model = tiny.build_model(recipe, tok)
    shipped = AutoConfig.from_pretrained(where).to_dict()
    built = model.config.to_dict()
    skip = {"transformers_version", "dtype", "torch_dtype", "architectures", "_name_or_path"}
    assert {k: v for k, v in built.items() if k not in skip} == {k: v for k, v in shipped.items() if k not in skip}
    shipped_w = _tensors(where)
    assert set(shipped_w) == {k for k in model.state_dict() if k != "lm_head.weight"}  # tied head saved once
    assert all(shipped_w[k].shape == v.shape for k, v in model.state_dict().items() if k in shipped_w)


@pytest.mark.slow
@RECIPES
def test_fresh_build_reproduces_the_shipped_weights_bit_for_bit(recipe, tmp_path):
    torch.set_num_threads(1)  # as `python -m tools.tiny` builds it
    path = tiny.get_tiny_model(recipe, cache_dir=str(tmp_path), verbose=False, use_shipped=False)
    assert path != tiny.shipped_dir(recipe)
    built, shipped = _tensors(path), _tensors(tiny.shipped_dir(recipe))
    assert set(built) == set(shipped)
    for k in built:
        assert torch.equal(built[k], shipped[k]), k
    for name in ("recipe.json", "tokenizer.json", "generation_config.json"):
        assert json.load(open(os.path.join(path, name))) == json.load(open(os.path.join(tiny.shipped_dir(recipe), name))), name


def test_countdown_micro_batches_give_the_batch_gradient():
    """countdown_sft cuts each step's searches, sorted by length, into micro-batches (less padding): the gradient is
    the whole batch's mean token loss (float64; RoPE's float32 tables leave ~1e-9)."""
    import random

    from tasks import countdown as cd

    recipe = tiny.CountdownRecipe(hidden=32, layers=1, intermediate=64, heads=2, kv_heads=1, trace="guided")
    tok = tiny.build_tokenizer(recipe.words(), recipe.positions)
    rows = cd.countdown_task(8, "train", 1, levels=(1, 2, 3))
    rng = random.Random(0)
    for ex in rows:
        ex.solution = cd.solve_trace(ex.answer, rng, recipe.max_tries)
    whole, parts = tiny.build_model(recipe, tok).double(), tiny.build_model(recipe, tok).double()
    ids, attn, labels = tiny.sft_batch(tok, rows)
    ref = whole(input_ids=ids, attention_mask=attn, labels=labels).loss
    ref.backward()
    rows = sorted(rows, key=lambda ex: len(ex.solution))
    loss = tiny.accumulate(parts, [tiny.sft_batch(tok, rows[i : i + 3]) for i in range(0, 8, 3)])
    assert abs(loss.item() - ref.item()) < 1e-9
    for (name, p), q in zip(whole.named_parameters(), parts.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-8), name
    assert max(len(ex.solution) for ex in rows) > 2 * min(len(ex.solution) for ex in rows)  # padding differs


def _sft_rows(monkeypatch, **fields):
    """countdown_sft's SFT rows for a small CountdownRecipe (fit replaced: each step's micro-batches are collected) ->
    (tokenizer, [(the row's ids without padding, its labels)])."""
    recipe = tiny.CountdownRecipe(hidden=32, layers=1, intermediate=64, heads=2, kv_heads=1, sft_micro=8, **fields)
    tok = tiny.build_tokenizer(recipe.words(), recipe.positions)
    seen = []
    monkeypatch.setattr(tiny, "fit", lambda model, r, batch_of, log_every: seen.extend(
        batch_of(step) for step in range(r.sft_steps)))
    tiny.countdown_sft(None, tok, recipe)
    return tok, [(ids[i][attn[i] == 1], lab[i]) for mb in seen for ids, attn, lab in mb for i in range(len(ids))]


def test_countdown_sft_keeps_searches_within_the_token_budget(monkeypatch):
    """trace "search": every SFT search fits `sft_tokens` tokens and ends in its answer (a cut search would teach no
    ending), the pool has sft_steps x sft_batch of them, and the levels' long searches still come in (some > half the
    budget)."""
    from tasks import countdown as cd

    tok, rows = _sft_rows(monkeypatch, sft_steps=6, sft_batch=16, sft_problems=60, sft_tokens=200, trace="search",
                          levels="1,2,3")
    assert len(rows) == 6 * 16
    lengths = []
    for ids, lab in rows:
        response = [t for t in lab.tolist() if t != -100]
        assert len(response) - 1 <= 200 and response[-1] == tok.eos_token_id
        text = tok.decode(response[:-1])
        assert text.splitlines()[-1].startswith("<answer>") and cd.check_trace(text, int(text.split()[1]))["claims"] == 1
        lengths.append(len(response))
    assert max(lengths) > 100 and min(lengths) < 60


def test_countdown_sft_cut_searches(monkeypatch):
    """trace "search-cut": a search longer than `sft_tokens` is cut after its last whole line within them, as the
    length limit cuts a sampled one: no answer and no EOS; those that fit end in their answer and EOS."""
    from tasks import countdown as cd

    tok, rows = _sft_rows(monkeypatch, sft_steps=4, sft_batch=16, sft_problems=60, sft_tokens=150, trace="search-cut",
                          levels="2,3")
    rows = [lab for _, lab in rows]
    ended = cut = 0
    for lab in rows:
        response = [t for t in lab.tolist() if t != -100]
        text = tok.decode([t for t in response if t != tok.eos_token_id])
        assert len(response) <= 151 and cd.check_trace(text, int(text.split()[1]))["wrong_steps"] == 0
        if response[-1] == tok.eos_token_id:
            ended += 1
            assert text.splitlines()[-1].startswith("<answer>")
        else:
            cut += 1
            assert "<answer>" not in text and text.endswith(".") and len(response) > 100
    assert ended >= 5 and cut >= 20


def test_countdown_sft_attempts_searches(monkeypatch):
    """trace "attempts" (the shipped build): sft_steps x sft_batch searches by attempt_trace, problems drawn at random
    from the sft_problems, each search with no slip, one "yes" on its last attempt, an answer that scores 1 and EOS."""
    from tasks import countdown as cd

    assert (tiny.CountdownRecipe().trace, tiny.CountdownRecipe().levels) == ("attempts", "1")
    tok, rows = _sft_rows(monkeypatch, sft_steps=5, sft_batch=16, sft_problems=40)
    assert len(rows) == 5 * 16
    problems = {p.prompt: p.answer for p in cd.countdown_task(40, "train", 1, levels=(1,))}
    used, attempts = set(), []
    for ids, lab in rows:
        response = [t for t in lab.tolist() if t != -100]
        assert response[-1] == tok.eos_token_id
        prompt = tok.decode(ids[: len(ids) - len(response)]).removeprefix("Question: ").removesuffix("\nAnswer: ")
        problem = problems[prompt]  # one of the recipe's 40 training problems
        used.add(prompt)
        text = tok.decode(response[:-1])
        c = cd.check_attempts(text, problem["target"])
        assert (c["wrong_steps"], c["wrong_checks"], c["repeats"], c["claims"], c["false_claims"]) == (0, 0, 0, 1, 0)
        assert cd.countdown_reward(text, problem) == 1.0
        attempts.append(c["attempts"])
    assert len(used) > 20 and max(attempts) > 3 * min(attempts)


@pytest.mark.parametrize("schedule", ["wsd", "cosine"])
def test_fit_schedule(schedule, monkeypatch):
    """fit's learning rate: a linear warm-up over 5 % of the steps, times a cosine decay, or (CountdownRecipe's "wsd")
    times 1 to 70 % of the steps, then a linear decay toward 0 at the end, floored at 2 %."""
    import math

    recipe = tiny.CountdownRecipe(sft_steps=1000, sft_lr=1.0, schedule=schedule)
    model = torch.nn.Linear(1, 1)
    lrs = []
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: lrs.append(self.param_groups[0]["lr"]))
    x = torch.ones(1, 1)
    monkeypatch.setattr(tiny, "accumulate", lambda m, b: model(x).sum().backward() or torch.zeros(()))
    tiny.fit(model, recipe, lambda step: [None], log_every=0)
    assert len(lrs) == 1000
    if schedule == "wsd":
        assert lrs[0] == pytest.approx(1 / 50) and lrs[39] == pytest.approx(40 / 50)
        assert lrs[49] == lrs[699] == 1.0 and lrs[700] == pytest.approx(1.0) and lrs[850] == pytest.approx(0.5)
        assert lrs[990] == pytest.approx(10 / 300) and lrs[994] == lrs[999] == 0.02
    else:
        assert lrs[0] == pytest.approx(1 / 50) and lrs[39] == pytest.approx(40 / 50 * 0.5 * (1 + math.cos(math.pi * 0.039)))
        assert lrs[500] == pytest.approx(0.5) and lrs[999] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.999)))
