#!/usr/bin/env bash
# Any toolformer command with N processes: the annotation stages split their shards across them, fine-tuning is
# data-parallel, the other stages run in the first process while the rest wait.
#   bash scripts/accelerate_run.sh N run --config configs/X.yaml [key=value ...]
#   bash scripts/accelerate_run.sh N filter --config configs/X.yaml
# One GPU per process (NCCL); on a machine without CUDA, N CPU processes (gloo). Several machines: run
# `accelerate config` once per machine, then `accelerate launch --config_file FILE -m toolformer.cli run ...`
# (the README shows the command; with the venv active, `accelerate` is on PATH).
set -euo pipefail
n="${1:?usage: scripts/accelerate_run.sh NUM_PROCESSES COMMAND --config FILE [key=value ...]}"
shift
# The repository's virtualenv (.venv, made by scripts/setup.sh) when there is one, else `python` on PATH;
# PYTHON=... chooses another interpreter. The working directory is kept: config paths stay relative to it.
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python}"
[ -x "$root/.venv/bin/python" ] && [ -z "${PYTHON:-}" ] && python="$root/.venv/bin/python"
if [ "$n" -le 1 ]; then
    exec "$python" -m toolformer.cli "$@"
fi
# --multi_gpu starts N processes through torchrun, also without CUDA (toolformer then joins them with gloo);
# `--cpu --num_processes N` would start only one unless MPI is set up.
# MAIN_PROCESS_PORT chooses the rendezvous port (torchrun's default, 29500, is shared by every launch).
port=()
if [ -n "${MAIN_PROCESS_PORT:-}" ]; then port=(--main_process_port "$MAIN_PROCESS_PORT"); fi
exec "$python" -m accelerate.commands.launch --multi_gpu --num_processes "$n" --num_machines 1 "${port[@]}" \
    --mixed_precision no --dynamo_backend no -m toolformer.cli "$@"
