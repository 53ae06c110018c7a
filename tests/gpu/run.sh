#!/usr/bin/env bash
# The GPU suite: what to run on a machine with an NVIDIA GPU, CuPy and the CUDA toolkit.
# The op table, NumPy-function, fusion, AD, loop and jit suites run their CUDA cases (the `device`
# fixture; NumPy/JAX references on the CPU), then the GPU-specific tests (JAX may use the
# GPU there, for the DLPack checks); prints one summary table per file and a total.
# Usage: tests/gpu/run.sh [pytest args...]   (a CPU-only machine skips every case)
# A selection of your own goes in GPU_K (it is added to the suites' `-k cuda`: a `-k` among
# the arguments would replace it), e.g. GPU_K="not optree" tests/gpu/run.sh -n 16
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" QTRACE_TEST_DEVICES=cuda PYTHONUNBUFFERED=1
dir="${OUT:-/tmp}"
python3 tests/gpu/smoke.py
JAX_PLATFORMS=cpu python3 -m pytest -q -p no:cacheprovider -k "cuda${GPU_K:+ and ($GPU_K)}" \
    --junitxml="$dir/gpu-suite.xml" "$@" \
    tests/ops/test_forward.py tests/ops/test_gradients.py tests/ops/test_chain.py \
    tests/ops/test_composites.py tests/ops/test_ufuncs_extra.py tests/ops/test_statistics.py \
    tests/ops/test_selecting.py tests/ops/test_numerical.py tests/ops/test_rearrange.py \
    tests/ops/test_grids.py tests/ops/test_functional.py tests/ops/test_matvec.py \
    tests/ops/test_array_kinds.py tests/ops/test_tensor_methods.py tests/ops/test_linalg_ext.py \
    tests/ops/test_fft.py tests/ops/test_random.py tests/ops/test_random_legacy.py \
    tests/ops/test_linalg_numpy.py tests/ops/test_linalg_numpy_signatures.py \
    tests/system/test_fusion_rules.py tests/system/test_ad.py tests/system/test_loops.py \
    tests/system/test_jit.py tests/system/test_loop_residuals.py tests/system/test_flat_and_out.py \
    tests/system/test_kernel_bodies.py tests/ops/test_repeated_indices.py
suite=$?
XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -q -p no:cacheprovider \
    ${GPU_K:+-k "$GPU_K"} --junitxml="$dir/gpu-device.xml" tests/gpu
device=$?
python3 tests/gpu/summary.py "$dir/gpu-suite.xml" "$dir/gpu-device.xml"
exit $((suite || device))
