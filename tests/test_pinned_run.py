"""Refactors change no numbers: short runs' final weights and metrics, pinned bit for bit.

Each configuration below runs train.py for 2 steps on the test tiny model (tests/conftest.py) and compares
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
        "--max-new-tokens", "32", "--reward-workers", "0", "--eval-every", "0", "--max-steps", "2", "--seed", "5"]
CONFIGS = {
    "grpo-offpolicy-kl": ["--mini-batch-size", "8", "--epochs", "2", "--kl-coef", "0.01"],
    "c3po-budget-entropy": ["--recipe", "c3po", "--token-budget", "120", "--mini-batch-size", "8"],
    "dapo-dynamic-overlong": ["--recipe", "dapo", "--overlong-filter", "--overlong-buffer", "8", "--mini-batch-size", "8"],
    "skywork-stages": ["--recipe", "skywork", "--max-steps", "3", "--entropy-target", "0.5", "--entropy-delta", "0.01"],
    "mimo-easy-pool-seamless": ["--recipe", "mimo", "--seamless"],
}
PINS = {  # name: (sha256 of the final weights, sha256 of the metrics without timings)
}


def digest_weights(model_dir: str) -> str:
    from safetensors.torch import load_file

    w = load_file(os.path.join(model_dir, "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(w):
        h.update(k.encode())
        h.update(w[k].to(torch.float64).numpy().tobytes())
    return h.hexdigest()


def digest_metrics(rows: list[dict]) -> str:
    keep = [{k: v for k, v in r.items() if not k.startswith("perf/") or k in ("perf/grad_norm", "perf/lr")}
            for r in rows]
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_short_run_is_pinned(name, tiny_model_path, tmp_path):
    out = tmp_path / name
    argv = ["--model", tiny_model_path, "--output-dir", str(out), *BASE, *CONFIGS[name]]
    history = train.main(argv)
    steps = int(argv[argv.index("--max-steps", argv.index("--max-steps") + 1)] if argv.count("--max-steps") > 1
                else argv[argv.index("--max-steps") + 1])
    got = (digest_weights(str(out / f"checkpoint-{steps}")), digest_metrics(history))
    if os.environ.get("GRPO_PIN_RECORD"):
        print(f'\n    "{name}": ("{got[0]}",\n        "{got[1]}"),')
        return
    assert name in PINS, f"no pinned digests for {name}: record them (see the module docstring)"
    assert got[0] == PINS[name][0], f"{name}: final weights differ from the pinned run"
    assert got[1] == PINS[name][1], f"{name}: metrics differ from the pinned run"
