#!/usr/bin/env bash
# Data-parallel fine-tuning: N processes, one per GPU, or N CPU processes (gloo) on a machine without CUDA.
#   bash scripts/accelerate_finetune.sh N --config configs/X.yaml [key=value ...]
# Precision comes from finetune.dtype; the effective batch stays finetune.batch_size (accumulation shrinks).
# Note: `accelerate launch --cpu --num_processes N` starts ONE process unless MPI is set up; on a machine
# without CUDA, `--multi_gpu` (torchrun) is what starts N processes, and toolformer joins them on the CPU.
set -euo pipefail
n="${1:?usage: scripts/accelerate_finetune.sh NUM_PROCESSES --config FILE [key=value ...]}"
shift
# The repository's virtualenv (.venv, made by scripts/setup.sh) when there is one, else `python` on PATH;
# PYTHON=... chooses another interpreter. The working directory is kept: config paths stay relative to it.
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python}"
[ -x "$root/.venv/bin/python" ] && [ -z "${PYTHON:-}" ] && python="$root/.venv/bin/python"
if [ "$n" -le 1 ]; then
    exec "$python" -m toolformer.cli finetune "$@"
fi
# MAIN_PROCESS_PORT chooses the rendezvous port (torchrun's default, 29500, is shared by every launch).
port=()
if [ -n "${MAIN_PROCESS_PORT:-}" ]; then port=(--main_process_port "$MAIN_PROCESS_PORT"); fi
exec "$python" -m accelerate.commands.launch --multi_gpu --num_processes "$n" --num_machines 1 "${port[@]}" \
    --mixed_precision no --dynamo_backend no -m toolformer.cli finetune "$@"
