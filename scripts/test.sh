#!/usr/bin/env bash
# Fresh machine to a test verdict: install what is missing, build everything
# (the CUDA backends too when nvcc is present), run every test. Tests labelled
# gpu or multigpu skip themselves on machines without enough GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=${HELIXMLA_BUILD_DIR:-build}
jobs=$(nproc)
# Tests and benchmarks on explicitly: scripts/run.sh turns them off in the
# same build directory, and a cached OFF would leave nothing to run.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHELIXMLA_BUILD_TESTS=ON -DHELIXMLA_BUILD_BENCH=ON >/dev/null
ninja -C "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" "$@"
