#!/usr/bin/env bash
# The GPU suite: what to run on a machine with an NVIDIA GPU, CuPy and the CUDA toolkit.
# The op table, fusion, AD, loop and jit suites run their CUDA cases (the `device`
# fixture), then the GPU interop tests; prints one summary table per file and a total.
# Usage: tests/gpu/run.sh [pytest args...]   (a CPU-only machine skips every case)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" QTRACE_TEST_DEVICES=cuda PYTHONUNBUFFERED=1
export JAX_PLATFORMS=cpu   # references run on the CPU; the GPU is for qtrace
python3 tests/gpu/smoke.py
out="${OUT:-/tmp}/gpu-junit.xml"
python3 -m pytest -q -p no:cacheprovider -k cuda --junitxml="$out" "$@" \
    tests/ops/test_forward.py tests/ops/test_gradients.py tests/ops/test_chain.py \
    tests/system/test_fusion_rules.py tests/system/test_ad.py tests/system/test_loops.py \
    tests/system/test_jit.py tests/gpu
status=$?
python3 tests/gpu/summary.py "$out"
exit $status
