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
    # Re-recorded for --micro-batch-tokens 4096 (length-sorted micro-batches: the same gradients up to rounding);
    # with --micro-batch-tokens 0 the runs (rollout 'fast' included) gave the previous pins bit for bit.
    "grpo-offpolicy-kl": ("b53209a089016a8e0891dfdc6e6f449b8c4ccef4b76b7c8d29e99eeca8d1c6b8",
        "b41fe6fb6c26b4ac2a52b7c1b5c52918f152a650ed4ab94c61707adcf84ebe33"),
    "c3po-budget-entropy": ("fe49c41978cddce3201ec1d39d0bcf777a284126ced3da0882a17d469e9202c6",
        "dd53d19f1d1fadcf3082629d935f070c2a8569d94f568def2dbaff4434c41109"),
    "dapo-dynamic-overlong": ("0b2a6654a3405ff2864733018ba77b7389421470ea34ae999a2ef73850aa1251",
        "5c99e895e9d089630d5ca8c0b29ded99c279b5ebbca74c2e8d5abe4784a181c2"),
    "skywork-stages": ("e3d3138e2595897f3c784b2643775facc0e05e94931449ecc6067654d0abe444",
        "06cdf3d539f69d0ebf36da75d07b7bee07fb8542ded74282d2b022567b249aaf"),
    "mimo-easy-pool-seamless": ("1e58987255e4271ca5ae6cd4dde4da568c0761743fdc2e1cf004e61373695f45",
        "4de7cd3203dfdc658017437954ea816a04fd5cf6bc099793c578e90ddc474a96"),
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
