#!/usr/bin/env bash
# GRPO on GSM8K with Qwen2.5-0.5B-Instruct: full fine-tuning on one 24 GB GPU, vLLM colocated.
#
#   python examples/prepare_data.py gsm8k                # data/gsm8k/train.jsonl (7,473), data/gsm8k/test.jsonl (1,319)
#   bash examples/qwen2.5-0.5b-instruct-gsm8k.sh          # any train.py flag appended wins, e.g. --max-steps 20
#
# Hardware: one 24 GB GPU (bf16-mixed). Memory (docs/memory.md "Measured on a GPU"; this script has not run on a GPU):
#   the trainer's update peak, measured on one H100 with Qwen2.5-0.5B's shapes (random weights, full fine-tuning,
#   gradient checkpointing), 9.3 GB at micro-batches of 2,560 and of 8,704 tokens alike (AdamW's step, 20 B per
#   parameter, is the peak), + 2.0 GB for the KL reference (--kl-coef: a frozen copy, fp32 weights under bf16-mixed,
#   494M x 4 B) + 1.5 GB CUDA context + vLLM's share 0.3 x 24 GB (1.0 GB of bf16 weights, the rest its KV cache)
#   = ~20 GB (computed from the measured update).
# Time per step: not measured (no GPU has run this script; an H100 timed one update of its shapes, docs/memory.md).
# Template: the model's own chat template, the question and "Please reason step by step, and put your final answer
#   within \boxed{}." as the user turn (--template chat); reward: the final answer, math-verify equivalence (--reward math).
# Compare against (GSM8K test, 1,319 problems, greedy):
#   verl's baseline table: Qwen2.5-0.5B-Instruct 49.6 before RL, 56.7 after PPO; GRPO with LoRA r 32: 54.3.
#   (SimpleRL-Zoo trains the *base* Qwen2.5-0.5B: 36.7 -> 49.5, another model and template.)
#   verl's prompt asks for "####" instead of \boxed{}: the starting accuracy here can differ from 49.6 by a few points.
#
# The rehearsal (tests/test_examples.py) runs this script on a real-shaped stand-in with MODEL, DATA, EVAL_DATA, OUT
# and PYTHON set and a few flags appended (--max-steps 2, small batches, --rollout fast, --dtype float32).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA=${DATA:-data/gsm8k/train.jsonl}
EVAL_DATA=${EVAL_DATA:-data/gsm8k/test.jsonl}
OUT=${OUT:-runs/qwen2.5-0.5b-instruct-gsm8k}
PYTHON=${PYTHON:-python}

exec "$PYTHON" train.py --model "$MODEL" --train-data "$DATA" --eval-data "$EVAL_DATA" --output-dir "$OUT" \
  --recipe grpo --template chat --reward math --kl-coef 1e-3 \
  --rollout vllm --vllm-gpu-memory-utilization 0.3 \
  --batch-size 512 --group-size 8 --mini-batch-size 256 --micro-batch-tokens 5120 --max-new-tokens 512 \
  --lr 1e-6 --warmup-steps 0 --gradient-checkpointing \
  --max-steps 100 --eval-every 10 --eval-problems 1319 --eval-samples 0 --save-every 10 \
  "$@"
