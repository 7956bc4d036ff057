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
    "c3po-budget-entropy": ["--recipe", "c3po", "--stages", "", "--token-budget", "120", "--mini-batch-size", "8"],  # math only
    "dapo-dynamic-overlong": ["--recipe", "dapo", "--overlong-filter", "--overlong-buffer", "8", "--mini-batch-size", "8"],
    "skywork-stages": ["--recipe", "skywork", "--max-steps", "3", "--entropy-target", "0.5", "--entropy-delta", "0.01"],
    "mimo-easy-pool-seamless": ["--recipe", "mimo", "--seamless"],
}
PINS = {  # name: (sha256 of the final weights, sha256 of the metrics without timings)
    # Re-recorded after the changes meant to move numbers: length-sorted micro-batches (--micro-batch-tokens),
    # chunked LM-head log-probs (--logprob-chunk), float64 advantages, sequence means over non-empty rows, Skywork's
    # entropy timing, sampled evaluation, the recipes' mu / gen-batch factor / online filter. Each branch checked
    # first that with its change switched off it reproduced the previous pins bit for bit. The metrics digests were
    # re-recorded once more when the rows gained rollout/groups_levelN and rollout/signal_frac_levelN (new keys only:
    # every weights digest stayed the same, and the test checks the weights first).
    "grpo-offpolicy-kl": ("5767d41c967dfdcb0939bda6be4b415db2d04d3811b49d502551de8e67642158",
        "931838d96a0e46b273f590f260e4cf8a94b00020b04de283d9b766387eec6a47"),
    "c3po-budget-entropy": ("560e28181b67a77df450d67824c595361384cfb0ab062ff42425472e59e68f6f",
        "79d357cebe1db0dd54d32933ed0185448c9b405d28323fe4fe529fbccebde8f8"),
    "dapo-dynamic-overlong": ("917c0ae2c7d08010d888642f8a7ad746ff9c7ebd0c7ae25b8af9e41c2df33ed9",
        "554705436445dee34c24776156d53c8178c18dbfb68a0ab8fd8deb6d9b3d5273"),
    "skywork-stages": ("3482a50273d94558b6699629dff80c63ad351a31f2fd921cccc713d8211f897a",
        "4f01d6070fca7b64d26e3d13d07ddf68a57f0bb773cce9c3d7c75a055e8d20ee"),
    "mimo-easy-pool-seamless": ("126c48e95690dd826b9e722586099cd25cb0967bc2faca30eceff30b68d7c945",
        "266a0b922f900bb406b1c4d3a1b2ecb615ce92d9507eee89d58000ee7285b8b7"),
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
