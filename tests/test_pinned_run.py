"""Refactors change no numbers: short runs' final weights and metrics, pinned bit for bit.

Each configuration below runs train.py for 2 steps on the default tiny model (models/tiny-qwen2) and compares
sha256 digests of the final weights and of the metrics (timings excluded) with values recorded from the code
before a refactor. The configurations cover every branch of the update: mu > 1 with mini- and micro-batches,
the KL reference, C3PO's budget with the entropy bonus, dynamic sampling with DAPO's overlong shaping and
filter, Skywork's adaptive entropy, rejection sampling and stages, MiMo's easy pool, and the seamless scheduler.

A change that is *meant* to change numbers (a new default, a fix) re-records them:
    GRPO_PIN_RECORD=1 python -m pytest -q tests/test_pinned_run.py -s  # rewrites pinned_runs.json, prints PINS rows
and says so in its commit message. Bit-for-bit digests hold on machines with the same float kernels only: PINS is
keyed by a fingerprint of the machine's numerics, and every machine checks the tolerant pins (see PINS below). Run:  python -m pytest -q tests/test_pinned_run.py   (~1 min on 2 cores)
"""
import hashlib
import json
import os

import pytest
import torch

import train

BASE = ["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "16", "--micro-batch-size", "4", "--eval-problems", "8",
        "--max-new-tokens", "32", "--reward-workers", "0", "--eval-every", "0", "--max-steps", "2", "--seed", "5",
        "--max-gen-rounds", "20"]
CONFIGS = {
    "grpo-offpolicy-kl": ["--mini-batch-size", "8", "--epochs", "2", "--kl-coef", "0.01"],
    "c3po-budget-entropy": ["--recipe", "c3po", "--stages", "", "--token-budget", "120", "--mini-batch-size", "8"],  # math only
    "dapo-dynamic-overlong": ["--recipe", "dapo", "--overlong-filter", "--overlong-buffer", "8", "--mini-batch-size", "8"],
    "skywork-stages": ["--recipe", "skywork", "--max-steps", "3", "--entropy-target", "0.5", "--entropy-delta", "0.01"],
    "mimo-easy-pool-seamless": ["--recipe", "mimo", "--seamless"],
}
PINS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pinned_runs.json")
# Bit-for-bit digests are only comparable between machines whose float kernels agree (the same CPU features give the
# same MKL / oneDNN / ATen code paths). They are keyed by `numerics_fingerprint()`: the digest of the tiny model's
# logits on a fixed input. On a machine with no recorded digests the test still runs every configuration and compares
# against pinned_runs.json: discrete metrics (rewards, lengths, counts) exactly, since the same samples must come out,
# and float metrics and each tensor's update (sum and norm of final - initial weights) to a tolerance far below what a
# change to the update would move (measured: two CPU code paths of this machine, ATEN_CPU_CAPABILITY default vs
# avx512, gave the same samples, weights within 1.2e-5 and losses within 1e-6 relative).
PINS = {  # numerics fingerprint: {name: (sha256 of the final weights, sha256 of the metrics without timings)}
    "2cc6ad2d38178817": {  # recorded 2026-11-24 on an AVX-512 Xeon (torch 2.13.0+cpu, MKL 2024.2, oneDNN 3.12); the
        # metrics' digests re-recorded 2026-11-26 for two added columns (rollout/frac_all_correct, frac_all_wrong):
        # every earlier value and weight digest unchanged
        "grpo-offpolicy-kl": ("f42ae3d5c0126f166e58a630c9e6939c947445efb68d868e7b22b7f00ac23c1f",
            "89a8bf238baebad32767e78b45f04f9d604ffaef0068918485e48ba6e2afaa1f"),
        "c3po-budget-entropy": ("27c1ab48a33474194642ab5fe34d6be57c3077f31fb504cb9628f98e3b842962",
            "75fd38ef21bfad3302e22ec9d161c6a083005dddde1e6a63bca05af1d02e6792"),
        "dapo-dynamic-overlong": ("7f1e3de51a66f486e1125473e71da78ad5f7d276e05432c71c1a5f21e10dc28b",  # 2026-11-26: the
            "a46dc673c1fba6ca52596e10f8a01593f61b96bfc7f8247933f0aeee2480cd8e"),  # truncated-response rule (reward.py)
        "skywork-stages": ("4511adbbae856d40346dee5ebd32da9bb6363f62b8d06eb566c620c34138cccc",
            "2a9c0b8da808ee94f042169c7152166482171a2af785b8ecd27e0b13fac5cfcb"),
        "mimo-easy-pool-seamless": ("a0fecaeb102c379b8da5099470523a7512b0fdccd27b6fd6bb2e4e9fad5bad6c",
            "e5be0f4fda1715839335edae98bb56dcafb3525cb6735df2b986bbabe875f3da"),
    },
}
RTOL_METRICS, RTOL_DELTA = 1e-4, 2e-3


def digest_weights(model_dir: str) -> str:
    from safetensors.torch import load_file

    w = load_file(os.path.join(model_dir, "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(w):
        h.update(k.encode())
        h.update(w[k].to(torch.float64).numpy().tobytes())
    return h.hexdigest()


TIMED = ("rollout/reward_wait_frac", "rollout/gen_time_s", "rollout/wall_s")  # wall times: not part of a run's numbers


def digest_metrics(rows: list[dict]) -> str:
    keep = [{k: v for k, v in r.items() if (not k.startswith("perf/") or k in ("perf/grad_norm", "perf/lr")) and k not in TIMED}
            for r in rows]
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def kept_metrics(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if (not k.startswith("perf/") or k in ("perf/grad_norm", "perf/lr")) and k not in TIMED}
            for r in rows]


def digest_metrics(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(kept_metrics(rows), sort_keys=True).encode()).hexdigest()


def weight_deltas(init_dir: str, final_dir: str) -> dict[str, list[float]]:
    """Per tensor: the sum and the L2 norm of (final - initial) weights, in float64."""
    from safetensors.torch import load_file

    a, b = load_file(os.path.join(init_dir, "model.safetensors")), load_file(os.path.join(final_dir, "model.safetensors"))
    return {k: [(b[k].double() - a[k].double()).sum().item(), (b[k].double() - a[k].double()).norm().item()] for k in sorted(b)}


def numerics_fingerprint(model_path: str) -> str:
    """Digest of the tiny model's float32 logits on a fixed input: equal on machines whose float kernels agree."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    ids = torch.arange(3, 67).remainder(model.config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits
    return hashlib.sha256(logits.numpy().tobytes()).hexdigest()[:16]


def close(a, b, rtol: float, where: str) -> None:
    """Discrete values (ints, strings, bools) exactly; floats to rtol (with an absolute floor of rtol * 1e-2)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), f"{where}: keys differ: {sorted(set(a) ^ set(b))}"
        for k in a:
            close(a[k], b[k], rtol, f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, rtol, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= rtol * max(abs(a), abs(b), 1e-2), f"{where}: {a} != {b} (rtol {rtol})"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_short_run_is_pinned(name, trained_model_path, tmp_path):
    out = tmp_path / name
    argv = ["--model", trained_model_path, "--output-dir", str(out), *BASE, *CONFIGS[name]]
    history = train.main(argv)
    final = str(out / f"checkpoint-{len(history)}")
    got = (digest_weights(final), digest_metrics(history))
    fingerprint = numerics_fingerprint(trained_model_path)
    tolerant = {"metrics": json.loads(json.dumps(kept_metrics(history))), "deltas": weight_deltas(trained_model_path, final)}
    if os.environ.get("GRPO_PIN_RECORD"):
        pins = json.load(open(PINS_FILE)) if os.path.exists(PINS_FILE) else {}
        pins[name] = tolerant
        with open(PINS_FILE, "w") as f:
            json.dump(pins, f, indent=0, sort_keys=True)
        print(f'\n    "{fingerprint}": {{"{name}": ("{got[0]}",\n        "{got[1]}")}},')
        return
    pinned = json.load(open(PINS_FILE))
    assert name in pinned, f"no pinned values for {name}: record them (see the module docstring)"
    close(pinned[name]["metrics"], tolerant["metrics"], RTOL_METRICS, f"{name}: metrics")
    close(pinned[name]["deltas"], tolerant["deltas"], RTOL_DELTA, f"{name}: weight updates")
    if fingerprint in PINS:  # this machine's float kernels recorded: bit for bit
        assert got[0] == PINS[fingerprint][name][0], f"{name}: final weights differ from the pinned run"
        assert got[1] == PINS[fingerprint][name][1], f"{name}: metrics differ from the pinned run"
