#!/usr/bin/env bash
# bench/prototypes/swapped_fp8_native.cu at 48 heads on case 10's shape:
# lockstep warpgroups (DECOUPLE=0) against decoupled ones (DECOUPLE=1), the
# latter also with a slack of 0.25 so that maxima are raised often (a test
# of the raise protocol: its rel L2 must stay like the others'); then
# memcheck and racecheck of the decoupled builds (session 29).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
for cfg in "0 8.0f" "1 8.0f" "1 0.25f"; do
  set -- $cfg
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DHEADS=48 -DITEMS=2 -DDECOUPLE=$1 -DSLACK=$2 \
    swapped_fp8_native.cu -o "$out/native_48_d$1_s$2" &
done
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in 1 2; do
  for b in d0_s8.0f d1_s8.0f d1_s0.25f; do
    echo "$b round $round: $("$out/native_48_$b" 64 16384 ${ITERS:-20} | tr '\n' ' ')"
  done
done
for b in d1_s8.0f d1_s0.25f; do
  echo "$b memcheck: $(compute-sanitizer --tool memcheck "$out/native_48_$b" 2 1024 1 2>&1 | grep -E "ERROR SUMMARY|rel L2" | tr '\n' ' ')"
  echo "$b racecheck: $(compute-sanitizer --tool racecheck "$out/native_48_$b" 2 1024 1 2>&1 | grep -E "RACECHECK SUMMARY|rel L2" | tr '\n' ' ')"
done
