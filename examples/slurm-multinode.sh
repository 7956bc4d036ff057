#!/usr/bin/env bash
# Several machines under SLURM: the 8-GPU DAPO run (examples/qwen2.5-math-7b-dapo-8gpu.sh, its flags unchanged) on
# N nodes x 8 GPUs through Accelerate: one `srun` task per node, each running `accelerate launch` with the node's rank
# and the first node's address; Accelerate (torchrun) starts the 8 processes of its node.
#
#   source .venv/bin/activate                                # srun passes the environment on to every node
#   sbatch examples/slurm-multinode.sh                       # 2 nodes x 8 GPUs (the #SBATCH lines below), from the
#                                                            # repository root (SLURM runs a copy of the script)
#   sbatch --nodes 4 examples/slurm-multinode.sh --max-steps 100   # any train.py flag appended wins
#
# What every node needs (docs/multi_gpu.md, "Several machines"):
#   * the repository and the same virtual environment (pip install -e ".[gpu]"; the script runs
#     `python -m tools.check_install --require-gpu` on every node first and stops if one lacks CUDA or vLLM);
#   * the model and data at the same paths: a hub model in each node's Hugging Face cache (or a shared HF_HOME),
#     the prepared data files (python examples/prepare_data.py dapo) on a shared filesystem or copied to each node;
#   * --output-dir (OUT) on a filesystem every node mounts at the same path: global rank 0 alone writes the run
#     directory (config, metrics, checkpoints), every process reads the checkpoint on --resume auto; train.py stops
#     with one line when a node cannot see it.
# Topology: global rank = node rank x 8 + local rank; every process holds the policy (LoRA on the frozen bf16 base)
#   and its own colocated vLLM engine on its own GPU (cuda:LOCAL_RANK), generates for its own share of each step's
#   prompts and scores it with its own reward workers; gradients are all-reduced over all 16 processes (NCCL).
#   Batch: --batch-size 2048 responses = 128 prompts x 16, i.e. 8 prompts a process on 2 x 8 GPUs (the step's
#   prompts must divide by the process count).
# Resume after a failure (a node lost, the job's time limit): sbatch the same script with --resume auto.
# Time per step and memory: not measured (no GPU has run this); memory per GPU as the 8-GPU script (~54 GB).
# Rehearsed on CPU with stub srun / scontrol: two "nodes" on localhost (tests/test_multinode.py).
#SBATCH --job-name=grpo-recipes
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --output=slurm-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=${SLURM_NNODES:?run under SLURM (sbatch), or set SLURM_NNODES and SLURM_JOB_NODELIST}
MAIN_IP=${MAIN_IP:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}   # the first node: global rank 0
MAIN_PORT=${MAIN_PORT:-29500}
CHECK=${CHECK:-python -m tools.check_install --require-gpu}
SCRIPT=${SCRIPT:-examples/qwen2.5-math-7b-dapo-8gpu.sh}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

srun --ntasks-per-node=1 bash -c "$CHECK"   # every node: torch, CUDA, vLLM, GPUs (one error line if a piece is missing)

# One task per node; SLURM_NODEID is set per task, so it is expanded inside the task (single quotes).
export NUM_PROCESSES=$((NNODES * GPUS_PER_NODE)) NNODES MAIN_IP MAIN_PORT SCRIPT
srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '
  LAUNCH_ARGS="--config_file configs/multinode.yaml --num_machines $NNODES --machine_rank $SLURM_NODEID \
    --main_process_ip $MAIN_IP --main_process_port $MAIN_PORT ${LAUNCH_ARGS:-}" \
  exec bash "$SCRIPT" "$@"' bash "$@"
