#!/usr/bin/env bash
# ncu of bench/prototypes/swapped_fp8_native.cu at 48 heads (case 10's
# shape): the full build and the one without softmax or coupling
# (ABLATE=2): pipe utilisation, issue, and the SASS lines with the most
# stall samples (session 29, when it also profiled 0beecda's decoupled
# build).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
for cfg in "d0 -DABLATE=0" "a2 -DABLATE=2"; do
  set -- $cfg
  nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -DHEADS=48 -DITEMS=2 $2 \
    swapped_fp8_native.cu -o "$out/native_48_$1" &
done
wait
for b in d0 a2; do
  ncu --kernel-name native_fp8_decode --launch-skip 1 --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SourceCounters \
    --metrics sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed \
    -o "$out/ncu-$b" -f "$out/native_48_$b" 64 16384 3 >"$out/ncu-$b.log" 2>&1
  ncu --import "$out/ncu-$b.ncu-rep" --page details >"$out/ncu-$b.txt" 2>&1
  ncu --import "$out/ncu-$b.ncu-rep" --page source --print-source sass --csv >"$out/ncu-$b-sass.csv" 2>&1
  python3 ../../scripts/ncu_top_stalls.py "$out/ncu-$b-sass.csv" 25 >"$out/ncu-$b-stalls.txt" 2>&1
  echo "== $b"
  grep -E "highest-utilized|Duration|Issue Slots Busy|Executed Ipc Active|SM Busy|Memory Throughput|lsu|mem_shared|Warp Cycles Per Issued|No Eligible|Compute \(SM\) Throughput" "$out/ncu-$b.txt" | head -20
done
rm -f "$out"/native_48_* "$out"/*-sass.csv
