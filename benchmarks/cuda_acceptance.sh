#!/usr/bin/env bash
# The CUDA acceptance of every lab, in one run on a machine with a GPU:
# each lab's untouched exercise and reference fix checked on cuda (verdicts,
# speed-ups against the cuda thresholds, the evidence from the traces), the
# alternative fixes of labs 3, 5 and 6 (lab 5: peak device memory read by nvidia-smi; lab 6: a torchrun
# job of two ranks, nccl with a GPU each, gloo on one GPU), the profiler's overhead, and lab 0's (the
# learner's own profile, its window against profiling everything), lab 7's reference settings and untouched
# exercise, and the gate on lab 1's fix undone. Writes the table to
# benchmarks/results/<date>-cuda.md (and the raw figures beside it), or under PROFLAB_ACCEPTANCE_OUT
# when set. The labs run in order of what the CUDA rules rest on (the thresholds of labs 1, 2, 4; lab 5's
# device peak; lab 6's job), so that a run cut short still answers the most.
#
#   bash benchmarks/cuda_acceptance.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-1}"
out="${PROFLAB_ACCEPTANCE_OUT:-benchmarks/results}/$(date -u +%Y-%m-%d)-cuda"
gate_traces="$(mktemp -d)"
failed() { echo "(the $1 step failed: exit $?; the steps after it go on)"; }
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: nothing to accept')"
{
  python benchmarks/bench_checks.py --labs 1 2 4 --repeats "$repeats" --device cuda --json-out "$out-labs.json" || failed "labs 1 2 4"
  python benchmarks/bench_checks.py --labs 5 --repeats "$repeats" --device cuda --json-out "$out-lab5.json" \
    --also tests/learner_files/lab5_inference_mode.py tests/learner_files/lab5_detach.py || failed "lab 5"
  python benchmarks/bench_checks.py --labs 6 --repeats "$repeats" --device cuda --json-out "$out-lab6.json" \
    --also tests/learner_files/lab6_no_sync_small_buckets.py tests/learner_files/lab6_by_hand.py || failed "lab 6"
  python benchmarks/bench_checks.py --labs 3 --repeats "$repeats" --device cuda --json-out "$out-lab3.json" \
    --also tests/learner_files/lab3_compile.py tests/learner_files/lab3_mix.py || failed "lab 3"
  python benchmarks/bench_lab0.py --rounds 3 --device cuda || failed "lab 0"
  echo; echo "## Lab 7 and the gate on cuda"; echo '```text'
  # (their exit codes are the verdicts: 1 for the exercise and the regression is the expected answer)
  python -m proflab check 7 --file labs/07_gate/solution.toml --device cuda || true
  python -m proflab check 7 --device cuda || true
  python -m proflab gate labs/01_dataloader/original.py --baseline labs/01_dataloader/solution.py --lab 1 \
    --device cuda --trace-dir "$gate_traces" || true
  echo '```'
} | tee "$out.md"
