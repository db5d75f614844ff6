#!/usr/bin/env bash
# One call on a GPU machine: build, run the gpu (and multigpu) tests,
# compute-sanitizer on a representative subset, the benchmark suite. Logs go
# to /tmp/helixmla-gpu-check and, packed as one archive, to $OUT when set (the
# device tool brings back only a few files); a short summary is printed last.
#   scripts/gpu-check.sh [tests] [sanitize] [bench] [multigpu] [helix] [tune]   (default: tests sanitize bench)
set -uo pipefail
cd "$(dirname "$0")/.."
out=/tmp/helixmla-gpu-check
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
steps=${*:-tests sanitize bench}
build=${HELIXMLA_BUILD_DIR:-build-gpu}
summary=()
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
summary+=("commit $commit$(git diff --quiet 2>/dev/null || echo '+dirty'); $(sed -n 2p "$out/gpu.txt")")

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="80-virtual;90-real" \
  -DHELIXMLA_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
if ! ninja -C "$build" -j "$(nproc)" >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  exit 1
fi
summary+=("build: $(( $(date +%s) - start )) s")

if has tests; then
  ctest --test-dir "$build" -L gpu --output-on-failure -j 1 --timeout 300 >"$out/gpu-tests.log" 2>&1
  summary+=("gpu tests: $(grep -E 'tests passed|tests failed' "$out/gpu-tests.log" | tail -1)")
  grep -E "\*\*\*Failed|Not Run|Exception" "$out/gpu-tests.log" | head -20
  ctest --test-dir "$build" -L cpu -j "$(nproc)" >"$out/cpu-tests.log" 2>&1
  summary+=("cpu tests: $(grep -E 'tests passed|tests failed' "$out/cpu-tests.log" | tail -1)")
fi
if has multigpu; then
  ctest --test-dir "$build" -L multigpu --output-on-failure -j 1 --timeout 300 >"$out/multigpu-tests.log" 2>&1
  summary+=("multigpu tests: $(grep -E 'tests passed|tests failed' "$out/multigpu-tests.log" | tail -1)")
  grep -E "\*\*\*Failed|Exception" "$out/multigpu-tests.log" | head -20
fi
if has sanitize; then
  filter=${HELIXMLA_SANITIZE_FILTER:-*Sanitize*:*GraphReplay*:*SplitKv*}
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/tests/helixmla_gpu_tests" \
      --gtest_filter="$filter" >"$out/sanitize-$tool.log" 2>&1
    rc=$?
    summary+=("compute-sanitizer $tool ($filter): exit $rc, $(grep -cE '^========= (Invalid|Race|Error)' "$out/sanitize-$tool.log") reports, $(grep -E '^\[  PASSED' "$out/sanitize-$tool.log" | head -1)")
  done
fi
if has bench; then
  "$build/helixmla" bench --json "$out/bench.json" --plot "$out/bench.svg" >"$out/bench.txt" 2>"$out/bench.err"
  summary+=("bench exit $?")
  [ -n "${OUT:-}" ] && cp "$out/bench.json" "$out/bench.svg" "$OUT/"
fi
if has helix; then
  gpus=$(nvidia-smi -L | wc -l)
  helix_run() {  # label, then `helixmla run` arguments
    local label=$1; shift
    "$build/helixmla" run --json --repeat 20 "$@" >"$out/helix-$label.json" 2>"$out/helix-$label.err"
    summary+=("helix $label: exit $? $(head -c 600 "$out/helix-$label.json")")
  }
  helix_run kimi-cp4-inproc --cp 4 --heads 48 --page-size 64 --batch 4 --kv-len 4096 --q-len 2 --kv-dtype fp8 --devices 0
  helix_run cp8-inproc --cp 8 --heads 128 --batch 4 --kv-len 4096 --devices 0
  if [ "$gpus" -ge 2 ]; then
    helix_run case7-cp2 --cp 2 --devices 0,1 --heads 16 --batch 8 --kv-len 131072 --page-size 64
    helix_run 1m-cp2 --cp 2 --devices 0,1 --heads 16 --batch 2 --kv-len 1048576 --page-size 64
    helix_run kimi-cp2-verify --cp 2 --devices 0,1 --heads 48 --page-size 64 --batch 4 --kv-len 4096 --q-len 4 --kv-dtype fp8
  fi
fi
if has tune; then
  "$build/helixmla" tune --out "$out/perf-sm90.json" --heads 16,48,64,128 --page-sizes 32,64 --batches 1,64 \
    --iterations 15 >"$out/tune.txt" 2>&1
  [ -n "${OUT:-}" ] && cp "$out/perf-sm90.json" "$OUT/"
  summary+=("tune exit $?: $(tail -1 "$out/tune.txt")")
fi

[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-check-logs.tgz" -C "$out" .
echo
echo "==== helixmla gpu-check summary ===="
printf '%s\n' "${summary[@]}"
[ -f "$out/bench.txt" ] && cat "$out/bench.txt"
exit 0
