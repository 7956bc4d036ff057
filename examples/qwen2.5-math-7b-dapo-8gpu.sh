#!/usr/bin/env bash
# DAPO on DAPO-Math-17k with Qwen2.5-Math-7B on 8 GPUs: data parallel (DDP), LoRA r 32, vLLM colocated on each GPU.
#
#   python examples/prepare_data.py dapo                 # data/dapo/dapo-math-17k.jsonl (deduplicated), data/dapo/aime2024.jsonl
#   bash examples/qwen2.5-math-7b-dapo-8gpu.sh            # any train.py flag appended wins
#
# Hardware: 8 x 80 GB GPUs, one process each (accelerate launch --multi_gpu). Why LoRA and DDP: full fine-tuning of
#   7B needs ~142 GB at AdamW's step (weights, gradients, AdamW states and its temporary: 20 B/param; docs/memory.md), so it must be sharded (--fsdp), and
#   FSDP here cannot run DAPO's dynamic sampling (docs/multi_gpu.md); with LoRA each GPU holds the frozen bf16 base and
#   the adapters, and every DAPO technique stays on. Full fine-tuning without dynamic sampling instead:
#   --lora-rank 0 --fsdp --no-dynamic-sampling --lr 1e-6.
# Memory per GPU (docs/memory.md "Measured on a GPU"; this script has not run on a GPU): trainer 19.6 GB measured on
#   one H100 (Qwen2.5-7B shapes, random weights, LoRA r 16, gradient checkpointing, 8,704 tokens per micro-batch, near
#   this script's 8,192) + ~0.8 GB for r 32's larger adapters (40M more parameters x 20 B, computed) + 1.5 GB CUDA
#   context + vLLM's share 0.4 x 80 GB (15 GB of bf16 weights + KV cache) = ~54 GB.
# Time per step: not measured (no GPU has run this script; an H100 timed one update of its shapes, docs/memory.md).
# Recipe: DAPO (train.py --recipe dapo), its template and reward (--template dapo --reward math-dapo: the answer on an
#   "Answer:" last line), group size 16 as in the paper, lengths cut to the model's 4,096-token context; lr 1e-5 for
#   LoRA (10x DAPO's 1e-6, "LoRA without regret"); evaluation avg@32 on AIME 2024 at T 1.0, top-p 0.7 (DAPO Sec. 4.1).
# Compare against (AIME 2024 avg@32): Qwen2.5-Math-7B 20.0 before RL (Compass-Thinker-7B, Table 1), 40.0 after
#   Compass-Thinker's DAPO-style RL (full fine-tuning, 30k problems, staged by difficulty). No published DAPO run
#   with LoRA on this model exists to compare with.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-Qwen/Qwen2.5-Math-7B}
DATA=${DATA:-data/dapo/dapo-math-17k.jsonl}
EVAL_DATA=${EVAL_DATA:-data/dapo/aime2024.jsonl}
OUT=${OUT:-runs/qwen2.5-math-7b-dapo}
NUM_PROCESSES=${NUM_PROCESSES:-8}
LAUNCH_ARGS=${LAUNCH_ARGS:-}  # more `accelerate launch` flags, e.g. --main_process_port 29501
PYTHON=${PYTHON:-python}

exec "$PYTHON" -m accelerate.commands.launch --multi_gpu --num_processes "$NUM_PROCESSES" $LAUNCH_ARGS train.py \
  --model "$MODEL" --train-data "$DATA" --eval-data "$EVAL_DATA" --output-dir "$OUT" \
  --recipe dapo --template dapo --reward math-dapo \
  --lora-rank 32 --lora-alpha 32 --lr 1e-5 \
  --rollout vllm --vllm-gpu-memory-utilization 0.4 \
  --batch-size 2048 --group-size 16 --mini-batch-size 128 --micro-batch-tokens 8192 \
  --max-new-tokens 3072 --overlong-buffer 512 \
  --warmup-steps 10 --gradient-checkpointing \
  --max-steps 300 --eval-every 25 --eval-problems 30 --eval-samples 32 --save-every 25 \
  "$@"
