"""The GPU path, checked on the CPU: the fast engine's host check every k tokens (FastEngine.check_every, CUDA's
default 16) gives HFEngine's samples token for token, and AdamW is fused on CUDA only (trainer.setup.make_optimizer).
The tests marked `cuda` also run them on a GPU (bench/gpu_check.py runs `-m cuda` there); without one they skip.

Run:  python -m pytest tests/test_gpu_path.py -q        (about 40 s on CPU)
"""
import os
import sys
import types

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from engines.hf import FastEngine, HFEngine
from rollout import SamplingParams
from tasks.addition import builtin_task
from tasks.templates import build_prompt
from trainer.setup import make_optimizer

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")


def _model(path, device="cpu"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return tok, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().to(device)


def _sample(engine, prompts, n, params, seed=11):
    torch.manual_seed(seed)
    groups = engine.generate(prompts, n, params)
    return [[(c.token_ids, c.text, c.length, c.truncated) for c in g] for g in groups], torch.rand(3)


@pytest.mark.parametrize("k, params", [(16, SamplingParams(1.0, 1.0, 40)), (16, SamplingParams(0.7, 0.9, 40)),
                                       (16, SamplingParams(0.0, 1.0, 40)), (5, SamplingParams(1.0, 1.0, 40))],
                         ids=["16-t1", "16-t0.7-top_p0.9", "16-greedy", "5-t1"])  # 5: 40 tokens = 8 checks
def test_check_every_k_gives_hf_samples(trained_model_path, k, params):
    """Same seed, same samples, the random stream left in the same state, with the host check every k tokens."""
    tok, model = _model(trained_model_path)
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(6, split="train", seed=3)]
    hf = _sample(HFEngine(model, tok, max_batch=20), prompts, 8, params)
    fast = FastEngine(model, tok, max_batch=20)
    fast.check_every = k
    got = _sample(fast, prompts, 8, params)
    assert got[0] == hf[0] and torch.equal(got[1], hf[1])
    if params.temperature > 0:
        lengths = [c[2] for g in hf[0] for c in g]
        assert min(lengths) < max(lengths)  # rows ended between two checks


def test_check_every_k_with_stop_strings_and_progress(trained_model_path):
    """A stop string completed between two checks ends the row where it completes; the progress callback still
    reports every row once; log-probs as at k = 1 to float rounding (the batch holds other rows when they run)."""
    tok, model = _model(trained_model_path)
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(6, split="train", seed=3)]
    params = SamplingParams(1.0, 1.0, 40, stop=("{",))
    res = {}
    for k in (1, 16):
        eng = FastEngine(model, tok)
        eng.check_every = k
        seen = []
        eng.progress = lambda rows: seen.extend(r for r, _ in rows)
        torch.manual_seed(5)
        groups = eng.generate(prompts, 4, params)
        res[k] = [[(c.token_ids, c.text, c.truncated) for c in g] for g in groups], sorted(seen), [
            torch.tensor(c.logprobs) for g in groups for c in g]
    assert res[16][:2] == res[1][:2]
    assert max((a - b).abs().max().item() for a, b in zip(res[16][2], res[1][2])) < 1e-5
    assert res[1][1] == list(range(len(prompts) * 4))
    assert sum(c[1].endswith("{") for g in res[1][0] for c in g) > len(prompts)  # the stop string ended most rows


def test_adamw_fused_on_cuda_only():
    """make_optimizer: torch's default AdamW on the CPU and under FSDP (the pinned runs' step), fused=True on CUDA."""
    cfg = types.SimpleNamespace(lr=1e-4, weight_decay=0.0)
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert make_optimizer(p, cfg, torch.device("cpu")).defaults["fused"] is None
    assert make_optimizer(p, cfg, "cuda").defaults["fused"] is True
    assert make_optimizer(p, cfg, torch.device("cuda", 0), sharded=True).defaults["fused"] is None


@pytest.mark.cuda
@needs_cuda
def test_fused_adamw_step_matches_the_default_on_cuda():
    """On the GPU: the fused step equals the foreach step to float rounding."""
    torch.manual_seed(0)
    w0 = torch.randn(64, 32, device="cuda")
    g = torch.randn(64, 32, device="cuda")
    cfg = types.SimpleNamespace(lr=1e-3, weight_decay=0.01)
    out = []
    for fused in (True, False):
        p = torch.nn.Parameter(w0.clone())
        opt = make_optimizer([p], cfg, "cuda") if fused else torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01)
        assert opt.defaults["fused"] is (True if fused else None)
        for _ in range(3):
            p.grad = g.clone()
            opt.step()
        out.append(p.detach())
    assert torch.allclose(out[0], out[1], atol=1e-6, rtol=0)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("k", [1, 16])
def test_fast_engine_on_cuda(trained_model_path, k):
    """On the GPU, at k = 1 and 16: greedy samples equal HFEngine's (the tiny model's argmax is far from ties), and
    sampled log-probs are the trainer's log_softmax(logits / T) to float rounding."""
    from trainer import batches
    from trainer.logprobs import response_logprobs

    tok, model = _model(trained_model_path, "cuda")
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(4, split="train", seed=4)]
    fast = FastEngine(model, tok)
    fast.check_every = k
    greedy = SamplingParams(0.0, 1.0, 40)
    assert _sample(fast, prompts, 1, greedy)[0] == _sample(HFEngine(model, tok), prompts, 1, greedy)[0]
    torch.manual_seed(0)
    comps = [c for g in fast.generate(prompts, 4, SamplingParams(1.0, 1.0, 40)) for c in g]
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(4)]
    batch = batches.make_batch(tok, p_ids, [c.token_ids for c in comps], "cuda")
    with torch.no_grad():
        ref, _ = response_logprobs(model, batch, 1.0)
    gaps = [torch.tensor(c.logprobs) - ref[i, : c.length].cpu() for i, c in enumerate(comps)]
    assert max(g.abs().max().item() for g in gaps) < 1e-3
