#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU, under 9 minutes of GPU time (shares from the 2026-12-04 H200 run). Exactness on CUDA
# (scripts/gpu_exact.py: logits equal transformers, speculative == plain for every k and rollback, eager,
# compiled, and built ahead of time as on ZeroGPU), then the embedded race through the app's code (scripts/gpu_race.py), the 0.8B shape's benchmarks in bfloat16 with random
# weights, eager and compiled. Everything it prints goes to $OUT/gpu-check.txt (OUT: this folder by default), the benchmarks' rows also to JSON files there.
#   bash scripts/gpu-check.sh          (PY=path/to/python to choose the interpreter)
set -u
cd "$(dirname "$0")/.."
PY=${PY:-python}
OUT=${OUT:-.}
mkdir -p "$OUT"
LOG="$OUT/gpu-check.txt"
: > "$LOG"
run() {   # run [seconds] command...: its output into the log, cut off after its share of the 8 minutes
  local limit=$1; shift
  echo "== $* (at most ${limit} s)" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tail -60 | tee -a "$LOG"
  echo "== exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}
run 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run 20 "$PY" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(), torch.backends.cpu.get_cpu_capability())"
run 230 "$PY" scripts/gpu_exact.py
run 40 "$PY" scripts/gpu_race.py 3
run 50 "$PY" -m qwen.bench engine --dtype bfloat16 --new-tokens 32 --no-reference --json "$OUT/engine-eager.json"
run 90 "$PY" -m qwen.bench engine --dtype bfloat16 --new-tokens 64 --compile --ks 1,2,3 --no-reference --json "$OUT/engine-compiled.json"
run 35 "$PY" -m qwen.bench spec --scripted --ks 1,2,3 --rates 0.5,0.9 --dtype bfloat16 --new-tokens 64 --json "$OUT/spec-eager.json"
run 60 "$PY" -m qwen.bench spec --scripted --ks 2 --rates 0.5,0.9 --dtype bfloat16 --new-tokens 64 --compile --json "$OUT/spec-compiled.json"
echo "done: $LOG"
