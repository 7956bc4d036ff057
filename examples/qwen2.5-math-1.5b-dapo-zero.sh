#!/usr/bin/env bash
# Zero-RL with DAPO on MATH (levels 3-5) from the base Qwen2.5-Math-1.5B: full fine-tuning on one 80 GB GPU.
#
#   python examples/prepare_data.py math                 # data/math/train_level3-5.jsonl, data/math/math500.jsonl
#   bash examples/qwen2.5-math-1.5b-dapo-zero.sh          # any train.py flag appended wins
#
# Hardware: one 80 GB GPU (bf16-mixed). Memory (docs/memory.md "Measured on a GPU"; this script has not run on a GPU):
#   the trainer's update peak 28.8 GB, measured on one H100 with Qwen2.5-1.5B's shapes (random weights, full
#   fine-tuning, gradient checkpointing, 2,560 and 8,704 tokens per micro-batch alike: AdamW's step, 20 B per
#   parameter) + 1.5 GB CUDA context + vLLM's share 0.3 x 80 GB (3.1 GB of bf16 weights, the rest KV cache for 512
#   responses of up to 3,000 tokens) = ~54 GB. A 40 GB card: --vllm-gpu-memory-utilization 0.2 (28.8 + 1.5 + 8 GB).
# Time per step: not measured (no GPU has run this script; an H100 timed one update of its shapes, docs/memory.md).
# Recipe: DAPO's loss and sampling (train.py --recipe dapo: clip-higher 0.28, token-mean, dynamic sampling, soft
#   overlong punishment, +1/-1 reward, 16 updates per rollout), lengths cut to the model's 4,096-token context.
# Template: Qwen2.5-Math's system prompt "Please reason step by step, and put your final answer within \boxed{}."
#   (--template qwen-math), the template the comparison below used; DAPO's own is --template dapo --reward math-dapo.
# Compare against (MATH-500, greedy): Qwen2.5-Math-1.5B 61.8 before RL with this template (33.0 with none), and
#   Oat-Zero-1.5B 74.2 after Dr. GRPO on MATH levels 3-5 (the Dr. GRPO paper, "Understanding R1-Zero-like training").
#   Dr. GRPO's loss is not DAPO's: the figure is a neighbour to compare with, not this run's published result.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-Qwen/Qwen2.5-Math-1.5B}
DATA=${DATA:-data/math/train_level3-5.jsonl}
EVAL_DATA=${EVAL_DATA:-data/math/math500.jsonl}
OUT=${OUT:-runs/qwen2.5-math-1.5b-dapo-zero}
PYTHON=${PYTHON:-python}

exec "$PYTHON" train.py --model "$MODEL" --train-data "$DATA" --eval-data "$EVAL_DATA" --output-dir "$OUT" \
  --recipe dapo --template qwen-math --reward math \
  --rollout vllm --vllm-gpu-memory-utilization 0.3 \
  --batch-size 512 --group-size 8 --mini-batch-size 32 --micro-batch-tokens 8192 \
  --max-new-tokens 3000 --overlong-buffer 512 \
  --lr 1e-6 --warmup-steps 10 --gradient-checkpointing \
  --max-steps 200 --eval-every 20 --eval-problems 500 --eval-samples 0 --save-every 20 \
  "$@"
