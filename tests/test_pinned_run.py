"""Refactors change no numbers: short runs' final weights and metrics, pinned bit for bit.

Each configuration below runs train.py for 2 steps on the default tiny model (models/tiny-qwen2) and compares
sha256 digests of the final weights and of the metrics (timings excluded) with values recorded from the code
before a refactor. The configurations cover every branch of the update: mu > 1 with mini- and micro-batches,
the KL reference, C3PO's budget with the entropy bonus, dynamic sampling with DAPO's overlong shaping and
filter, Skywork's adaptive entropy, rejection sampling and stages, MiMo's easy pool, and the seamless scheduler.

A change that is *meant* to change numbers (a new default, a fix) re-records the digests:
    GRPO_PIN_RECORD=1 python -m pytest -q tests/test_pinned_run.py -s      # prints the new PINS table
and says so in its commit message. Run:  python -m pytest -q tests/test_pinned_run.py   (~1 min on 2 cores)
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
    "c3po-budget-entropy": ["--recipe", "c3po", "--token-budget", "120", "--mini-batch-size", "8"],
    "dapo-dynamic-overlong": ["--recipe", "dapo", "--overlong-filter", "--overlong-buffer", "8", "--mini-batch-size", "8"],
    "skywork-stages": ["--recipe", "skywork", "--max-steps", "3", "--entropy-target", "0.5", "--entropy-delta", "0.01"],
    "mimo-easy-pool-seamless": ["--recipe", "mimo", "--seamless"],
}
PINS = {  # name: (sha256 of the final weights, sha256 of the metrics without timings)
    # Re-recorded on branch recipes: float64 advantages, sequence means over non-empty rows, Skywork entropy timing
    # (code: update then use), avg@4 evaluation, recipe presets (mu, gen-batch factor, online filter). Meant to change.
    "grpo-offpolicy-kl": ("e5aaf80b40c03cfcc72f003ce4d096bae905baf7aa60fc61835e89fdd7af197b",
        "82c0348270f2739ae672e6ec42c89abe6c9dc49f2b80eb4e149539eb53ba31c2"),
    "c3po-budget-entropy": ("503ac589d3b5a18ac295eaf2bcc0ee578beed1f36cff0676521e1180dbf4111b",
        "30fd01b6606845248d14ef273bdd5e0aeb384b19ea27621d2b4da6e9ac2067b6"),
    "dapo-dynamic-overlong": ("28d6bade51899d8641e900b3cb9ce38dde1bf5d91e155f5ffc46d4ac6c3cc97f",
        "9016178ece2d3c8296deb7e92e4cd39db35d12d42cddbd39cf49a788483fcc0a"),
    "skywork-stages": ("37a048aff689e9e990c6281406c7bed6d830653bbc87c58990b25cb90fda18fa",
        "dc003f121535258f6b2608e322a56bc16a2db8b4c60ea752405a82ca2e018001"),
    "mimo-easy-pool-seamless": ("32580bb267a60f65f1c81f931a500ff901adf0f3c881c0b9384b3656cb733a29",
        "945df09aeaabca86f1a5710bfecb7920e475e96cae435ab0080cb3a667869b13"),
}


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


@pytest.mark.parametrize("name", list(CONFIGS))
def test_short_run_is_pinned(name, trained_model_path, tmp_path):
    out = tmp_path / name
    argv = ["--model", trained_model_path, "--output-dir", str(out), *BASE, *CONFIGS[name]]
    history = train.main(argv)
    got = (digest_weights(str(out / f"checkpoint-{len(history)}")), digest_metrics(history))
    if os.environ.get("GRPO_PIN_RECORD"):
        print(f'\n    "{name}": ("{got[0]}",\n        "{got[1]}"),')
        return
    assert name in PINS, f"no pinned digests for {name}: record them (see the module docstring)"
    assert got[0] == PINS[name][0], f"{name}: final weights differ from the pinned run"
    assert got[1] == PINS[name][1], f"{name}: metrics differ from the pinned run"
