#!/usr/bin/env bash
# One call on a GPU machine: build, then the named steps in this order, each
# skipped (and said so) once the time budget is spent. Logs go to
# /tmp/helixmla-gpu-check and, packed as one archive, to $OUT when set (the
# device tool brings back only a few files); a short summary is printed last.
#   scripts/gpu-check.sh [run] [tests] [multigpu] [helix] [bench] [probes] [variants] [tune] [sanitize] [ncu] [execute]
#   (default: tests sanitize bench; HELIXMLA_CHECK_BUDGET seconds, default 540;
#   HELIXMLA_CHECK_KNOBS tensor-core knobs for the build, below)
set -uo pipefail
cd "$(dirname "$0")/.."
out=/tmp/helixmla-gpu-check
# Fresh each call: a machine kept warm between calls still holds the last
# call's logs, which the summary and the archive would otherwise repeat.
rm -rf "$out"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
steps=${*:-tests sanitize bench}
build=${HELIXMLA_BUILD_DIR:-build-gpu}
budget=${HELIXMLA_CHECK_BUDGET:-540}
began=$(date +%s)
summary=()
elapsed() { echo $(( $(date +%s) - began )); }
# A step's timeout: at most $1 seconds and no further past the budget than
# 30 s, so the summary and the log archive are written within the device's
# limit for one call.
within() { local t=$(( budget - $(elapsed) + 30 )); [ "$t" -gt "$1" ] && t=$1; [ "$t" -lt 30 ] && t=30; echo "$t"; }
# True when the step was asked for and time is left; records skipped steps.
step() {
  [[ " $steps " == *" $1 "* ]] || return 1
  if [ "$(elapsed)" -ge "$budget" ]; then summary+=("$1: skipped, time budget of $budget s spent"); return 1; fi
}
ctest_line() { grep -E 'tests passed|tests failed' "$1" | tail -1; }
gtest_line() { grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$1" | tr -s ' ' | tr '\n' ' '; }

nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
gpus=$(nvidia-smi -L | wc -l)
# Tests that need at most this many GPUs fail, not skip, when they find fewer:
# a driver the CUDA runtime cannot use must not pass as a run of skips.
export HELIXMLA_REQUIRE_GPUS=$gpus
# The device copy of the tree has no .git: the caller may name the commit.
commit=${HELIXMLA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
summary+=("commit $commit; $gpus x $(sed -n 2p "$out/gpu.txt")")

# configure DIR [cmake arguments]: the release configuration every build here uses.
configure() {
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="80-virtual;90-real" \
    -DHELIXMLA_BUILD_BENCH=OFF "$@"
}
# HELIXMLA_CHECK_KNOBS: tensor-core knobs (CMake's HELIXMLA_TC_KNOBS) for the
# build every step uses, so tests and sanitizers run a knob's code path too
# (the variants step only times knob builds).
configure "$build" -DHELIXMLA_TC_KNOBS="${HELIXMLA_CHECK_KNOBS:-}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
[ -n "${HELIXMLA_CHECK_KNOBS:-}" ] && summary+=("knobs: $HELIXMLA_CHECK_KNOBS")
if ! ninja -C "$build" -j "$(nproc)" >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  exit 1
fi
summary+=("build: $(elapsed) s")

if step run; then
  "$build/helixmla" run >"$out/run.txt" 2>"$out/run.err"
  summary+=("helixmla run (default problem): exit $?: $(sed -n 3p "$out/run.txt")")
  # The engine's flow: one prepared run, four layers, a mixed batch with statistics.
  "$build/helixmla" run --layers 4 --contexts 1 --stats --heads 48 --kv-dtype fp8 >"$out/run-layers.txt" 2>"$out/run-layers.err"
  summary+=("helixmla run --layers 4 (mixed, fp8, stats): exit $?: $(sed -n 3p "$out/run-layers.txt")")
  # Decode steps through one run refreshed as under a captured graph, on
  # both CUDA backends: how often a step needs a new prepare, and the GPU
  # time of a refreshed run against each step's own plan.
  for backend in cuda_tensorcore cuda_generic; do
    timeout "$(within 120)" "$build/helixmla" trace --backend "$backend" >"$out/trace-$backend.txt" 2>"$out/trace-$backend.err"
    summary+=("helixmla trace --backend $backend: exit $?: $(grep -E 'refreshed [0-9]|GPU time|rel L2' "$out/trace-$backend.txt" | tr -s ' ' | tr '\n' ' ')")
  done
fi
# The gtest binaries run directly: one process instead of one per test (CUDA
# start-up in each of ~400 processes costs minutes of device time). CTest runs
# the same tests, with the same labels, in CI.
if step tests; then
  # HELIXMLA_GPU_TEST_FILTER: a gtest filter for a shorter call (default every test).
  timeout "$(within 300)" "$build/tests/helixmla_gpu_tests" --gtest_brief=1 \
    --gtest_filter="${HELIXMLA_GPU_TEST_FILTER:-*}" >"$out/gpu-tests.log" 2>&1
  summary+=("gpu tests (helixmla_gpu_tests): exit $?: $(gtest_line "$out/gpu-tests.log") [$(elapsed) s]")
  grep -E "^\[  FAILED" "$out/gpu-tests.log" | head -20
  ctest --test-dir "$build" -L cpu -j "$(nproc)" >"$out/cpu-tests.log" 2>&1
  summary+=("cpu tests: $(ctest_line "$out/cpu-tests.log")")
fi
if step multigpu; then
  timeout "$(within 400)" "$build/tests/helixmla_multigpu_tests" --gtest_brief=1 >"$out/multigpu-tests.log" 2>&1
  summary+=("multigpu tests ($gpus GPUs, helixmla_multigpu_tests): exit $?: $(gtest_line "$out/multigpu-tests.log") [$(elapsed) s]")
  grep -E "^\[  FAILED" "$out/multigpu-tests.log" | head -20
fi
if step helix; then
  helix_run() {  # label, then `helixmla run` arguments
    local label=$1; shift
    [ "$(elapsed)" -ge "$budget" ] && { summary+=("helix $label: skipped, time budget spent"); return; }
    timeout "$(within 120)" "$build/helixmla" run --json --repeat 20 "$@" >"$out/helix-$label.json" 2>"$out/helix-$label.err"
    summary+=("helix $label: exit $? $(head -c 1100 "$out/helix-$label.json")")
  }
  helix_run kimi-cp4-inproc --cp 4 --heads 48 --page-size 64 --batch 4 --kv-len 4096 --q-len 2 --kv-dtype fp8 --devices 0
  helix_run cp8-inproc --cp 8 --heads 128 --batch 4 --kv-len 4096 --devices 0
  if [ "$gpus" -ge 2 ]; then
    helix_run kimi-cp2-verify --cp 2 --devices 0,1 --heads 48 --page-size 64 --batch 4 --kv-len 4096 --q-len 4 --kv-dtype fp8
    # The scaling runs of issue 6: cp = 2, and 4 and 8 where the machine has
    # them, over each exchange of HELIXMLA_HELIX_EXCHANGES (default "peer nccl").
    for cp in 2 4 8; do
      [ "$gpus" -ge "$cp" ] || continue
      devices=$(seq -s, 0 $((cp - 1)))
      for exchange in ${HELIXMLA_HELIX_EXCHANGES:-peer nccl}; do
        helix_run case7-cp$cp-$exchange --cp $cp --devices "$devices" --exchange "$exchange" --heads 16 --batch 8 --kv-len 131072 --page-size 64
        helix_run 1m-cp$cp-$exchange --cp $cp --devices "$devices" --exchange "$exchange" --heads 16 --batch 2 --kv-len 1048576 --page-size 64
      done
    done
    if [ "$gpus" -ge 4 ]; then
      helix_run kimi-cp4-verify4 --cp 4 --devices 0,1,2,3 --heads 48 --page-size 64 --batch 4 --kv-len 4096 --q-len 4 --kv-dtype fp8
    fi
  fi
  summary+=("[helix done at $(elapsed) s]")
fi
if step bench; then
  # With the SM clock, power and clock-event reasons sampled per case
  # (bench-clocks.txt), so a case whose time moved can be told apart from a
  # clock that fell.
  python3 scripts/bench_clocks.py "$out" -- "$build/helixmla" bench --host --json "$out/bench.json" \
    --plot "$out/bench.svg" >"$out/bench.txt" 2>"$out/bench-clocks.err"
  summary+=("bench exit $? [$(elapsed) s]")
  [ -n "${OUT:-}" ] && cp "$out/bench.json" "$out/bench.svg" "$OUT/"
fi
if step probes; then
  # The probe suites under bench/ (fixed cost against tiles; page sizes;
  # 32-row shapes on a 32-row tile against a 64-row one; one long request
  # among short ones; a block slot's KV in 1-8 items; 128 heads at 1-32
  # requests, where the seesaw engine takes over), each case with its
  # gather ceiling: a plain read of its KV rows through its page tables.
  # HELIXMLA_PROBES names a subset (file names under bench/).
  for suite in ${HELIXMLA_PROBES:-fixed-cost-probe.csv page-size-probe.csv row-tile-probe.csv \
    mixed-length-probe.csv item-cost-probe.csv seesaw-batch-probe.csv}; do
    suite=bench/$suite
    name=$(basename "$suite" .csv)
    timeout "$(within 150)" "$build/helixmla" bench --suite "$suite" --no-verify --gather >"$out/$name.txt" 2>&1
    summary+=("$name exit $? [$(elapsed) s]")
  done
fi
if step variants; then
  # A/B of compile-time kernel choices: the binary rebuilt once per entry of
  # HELIXMLA_VARIANT_FLAGS (';'-separated entries of space-separated
  # tensor-core knobs, e.g. "HELIXMLA_TC_Q_REG_STEPS_16BIT=8;HELIXMLA_TC_Q_REG_STEPS_16BIT=16";
  # a leading -D is accepted), which reach precompiled and NVRTC-compiled
  # kernels alike (CMake's HELIXMLA_TC_KNOBS), each timed on
  # HELIXMLA_VARIANT_CASES of HELIXMLA_VARIANT_SUITE in the same session
  # as the default build. Each build keeps its own JIT cache. The builds
  # run in parallel; then HELIXMLA_VARIANT_ROUNDS rounds (default 1) time
  # every variant and the default in turn, so clock drift touches all alike.
  # HELIXMLA_VARIANT_BASE names a tar of another tree (`git archive REV`,
  # carried as an untracked file): built and timed as variant "base", for
  # A/B runs of changes that are not knobs.
  IFS=';' read -r -a variant_flags <<<"${HELIXMLA_VARIANT_FLAGS:-}"
  cases=${HELIXMLA_VARIANT_CASES:-1,3,4,10,13}
  suite=${HELIXMLA_VARIANT_SUITE:-bench/mla-decode-v1.csv}
  rounds=${HELIXMLA_VARIANT_ROUNDS:-1}
  for i in "${!variant_flags[@]}"; do
    knobs=$(sed -E 's/(^| )-D/\1/g' <<<"${variant_flags[$i]}")
    ( configure "$build-variant$i" -DHELIXMLA_BUILD_TESTS=OFF -DHELIXMLA_TC_KNOBS="$knobs" &&
        ninja -C "$build-variant$i" -j "$(nproc)" helixmla ) >"$out/variant$i.log" 2>&1 &
  done
  base=()
  if [ -n "${HELIXMLA_VARIANT_BASE:-}" ]; then
    base=(base)
    base_build=$(realpath -m "$build-variantbase")
    rm -rf "$build-base-src" && mkdir -p "$build-base-src" && tar xf "$HELIXMLA_VARIANT_BASE" -C "$build-base-src"
    ( cd "$build-base-src" && configure "$base_build" -DHELIXMLA_BUILD_TESTS=OFF &&
        ninja -C "$base_build" -j "$(nproc)" helixmla ) >"$out/variantbase.log" 2>&1 &
  fi
  wait
  builds=("${!variant_flags[@]}" "${base[@]}")  # every variant but the default
  variant_flags_of() { if [ "$1" = base ]; then echo "tree $HELIXMLA_VARIANT_BASE"; else echo "${variant_flags[$1]}"; fi; }
  variant_dir() { if [ "$1" = default ]; then echo "$build"; elif [ "$1" = base ]; then echo "$base_build"; else echo "$build-variant$1"; fi; }
  for i in "${builds[@]}"; do
    [ -x "$(variant_dir "$i")/helixmla" ] || summary+=("variant $i ($(variant_flags_of "$i")): build failed: $(grep -m1 -E 'error' "$out/variant$i.log")")
  done
  # The SASS instructions in each build's KV loop (one pass, one tile) of
  # the precompiled page-64 kernels, "M/page/elem/kv/engine:instructions";
  # the listings stay in the log archive for reading the loops side by side.
  for i in "${builds[@]}" default; do
    vb=$(variant_dir "$i")
    [ -f "$vb/libhelixmla.so" ] || continue
    cuobjdump -sass "$vb/libhelixmla.so" >"$out/variant$i.sass" 2>/dev/null
    loops=$(python3 scripts/sass_loops.py "$out/variant$i.sass" | grep mla_decode_kernel | grep -E 'ILi(16|64)ELi64E' |
      sed -E 's/.*kernelILi([0-9]+)ELi([0-9]+)ELi([0-9])ELi([0-9])ELi([0-9])E.*\(([0-9]+) instructions\).*/\1\/\2\/\3\/\4\/\5:\6/' | tr '\n' ' ')
    summary+=("variant $i loop instructions: $loops")
  done
  for r in $(seq 1 "$rounds"); do
    for i in "${builds[@]}" default; do
      [ "$(elapsed)" -ge "$budget" ] && { summary+=("variant $i round $r: skipped, time budget spent"); continue; }
      vb=$(variant_dir "$i")
      if [ "$i" = default ]; then label=default; else label="$i ($(variant_flags_of "$i"))"; fi
      [ -x "$vb/helixmla" ] || continue
      HELIXMLA_JIT_CACHE="$vb/jit" timeout "$(within 120)" "$vb/helixmla" bench --suite "$suite" --cases "$cases" \
        >"$out/variant$i-r$r.txt" 2>&1
      summary+=("variant $label round $r: exit $? [$(elapsed) s]")
    done
  done
fi
if step tune; then
  "$build/helixmla" tune --out "$out/perf-sm90.json" --heads 16,48,64,128 --page-sizes 32,64 --batches 1,64 \
    --iterations 15 >"$out/tune.txt" 2>&1
  summary+=("tune exit $?: $(tail -1 "$out/tune.txt") [$(elapsed) s]")
  [ -n "${OUT:-}" ] && cp "$out/perf-sm90.json" "$OUT/"
fi
if step sanitize; then
  filter=${HELIXMLA_SANITIZE_FILTER:-*Sanitize*:*GraphReplay*:*SplitKv*:HelixGpu.*:TensorcoreEngines.Fp8Steps*}
  # HELIXMLA_SANITIZE_TOOLS: compute-sanitizer tools to run (default memcheck
  # racecheck synccheck; initcheck is the fourth, clean in session 44).
  for tool in ${HELIXMLA_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    timeout "$(within 150)" compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/tests/helixmla_gpu_tests" \
      --gtest_filter="$filter" >"$out/sanitize-$tool.log" 2>&1
    rc=$?
    summary+=("compute-sanitizer $tool ($filter): exit $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool.log" | tail -1), $(grep -E '^\[  (PASSED|FAILED)' "$out/sanitize-$tool.log" | head -2 | tr '\n' ' ') [$(elapsed) s]")
  done
  if [ "$gpus" -ge 2 ]; then
    # The peer exchange kernel stores into the other GPU's memory.
    timeout "$(within 150)" compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/helixmla_multigpu_tests" \
      --gtest_filter='HelixPeer.*:*HelixPeerStep*decode_bf16' >"$out/sanitize-peer.log" 2>&1
    summary+=("compute-sanitizer memcheck (peer exchange): exit $?, $(grep -E 'ERROR SUMMARY' "$out/sanitize-peer.log" | tail -1) [$(elapsed) s]")
  fi
fi
if step ncu; then
  # Nsight Compute on the kernels the open performance bars hinge on: the
  # cases HELIXMLA_NCU_CASES (default case 4) of HELIXMLA_NCU_SUITE (default
  # the benchmark suite; JIT-compiled page sizes match too) and the attention plus split combine of the 2 x
  # 1M-token Helix baseline (how evenly the blocks finish). Clocks are
  # locked to base by ncu: compare ratios only.
  metrics=gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.avg.per_cycle_active
  for c in ${HELIXMLA_NCU_CASES:-4}; do
    timeout "$(within 150)" ncu --kernel-name 'regex:mla_decode|tc_jit' --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section SourceCounters -o "$out/ncu-case$c" -f \
      --metrics "$metrics,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_[a-z0-9_]+_cycles_active\.avg\.pct_of_peak_sustained_active" \
      "$build/helixmla" bench --suite "${HELIXMLA_NCU_SUITE:-bench/mla-decode-v1.csv}" --cases "$c" --iterations 2 \
      --no-graphs --no-verify >"$out/ncu-case$c.log" 2>&1
    summary+=("ncu case $c: exit $? [$(elapsed) s]")
    ncu --import "$out/ncu-case$c.ncu-rep" --page details >"$out/ncu-case$c.txt" 2>&1
    ncu --import "$out/ncu-case$c.ncu-rep" --page source --print-source sass --csv >"$out/ncu-case$c-sass.csv" 2>&1
    python3 scripts/ncu_top_stalls.py "$out/ncu-case$c-sass.csv" 45 >"$out/ncu-case$c-stalls.txt" 2>&1
  done
  timeout "$(within 150)" ncu --kernel-name regex:'mla_decode|split_combine' --launch-skip 2 --launch-count 2 \
    --metrics "$metrics" "$build/helixmla" bench --suite bench/helix-bars.csv --cases 2 --iterations 2 \
    --no-graphs --no-verify >"$out/ncu-1m.txt" 2>&1
  summary+=("ncu 1M: exit $? [$(elapsed) s]")
  for f in "$out"/ncu-case*-stalls.txt; do echo "== $f"; cut -c1-140 "$f"; done
  for f in "$out"/ncu-case?.txt "$out"/ncu-case??.txt "$out"/ncu-1m.txt; do
    [ -f "$f" ] || continue
    echo "== $f"
    # Kernel names, the metrics above, and the stall reasons worth > 0.05 cycles per issue.
    grep -E '^  [a-z_]+.*\(|gpu__time|sm__cycles_active|mem_shared|dram__thr|inst_executed|Duration|Throughput' "$f" | cut -c1-150 | head -40
    awk '/issue_stalled/ && $NF + 0 > 0.05 {sub(/smsp__average_warps_issue_stalled_/, ""); print "   stall", $1, $NF}' "$f" | head -20
    # Which pipes are busy (% of peak while the SM is active), those above 5%:
    # a saturated one (math pipe throttle) shows here.
    awk '/sm__(inst_executed_pipe_|pipe_)/ && $NF + 0 > 5 {print "   pipe", $1, $NF}' "$f" | head -20
  done
fi
if step execute; then
  left=$(( budget - $(elapsed) - 30 ))
  [ "$left" -lt 30 ] && left=30
  "$build/helixmla" sweep --execute --max-seconds "$left" >"$out/sweep-execute.txt" 2>"$out/sweep-execute.err"
  summary+=("sweep --execute exit $?: $(tail -1 "$out/sweep-execute.txt") [$(elapsed) s]")
fi
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-check-logs.tgz" -C "$out" .
echo
echo "==== helixmla gpu-check summary ===="
printf '%s\n' "${summary[@]}"
[ -f "$out/bench.txt" ] && cat "$out/bench.txt"
[ -s "$out/bench-clocks.txt" ] && cat "$out/bench-clocks.txt"
for f in "$out"/variant*-r*.txt "$out"/*-probe.txt; do [ -f "$f" ] && { echo "== $f"; grep -v '^case [0-9]' "$f"; }; done
exit 0
