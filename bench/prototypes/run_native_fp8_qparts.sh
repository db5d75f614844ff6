#!/usr/bin/env bash
# bench/prototypes/swapped_fp8_native.cu with Q in one e4m3 part against
# two (Q_PARTS), on case 10's and case 11's shapes: the time and accuracy of
# that trade (session 29).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
for cfg in "48 2 1" "48 2 2" "16 1 1" "16 1 2"; do
  set -- $cfg
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DHEADS=$1 -DITEMS=$2 -DQ_PARTS=$3 \
    swapped_fp8_native.cu -o "$out/native_$1_q$3" &
done
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in 1 2; do
  for b in 48_q1 48_q2; do echo "$b round $round: $("$out/native_$b" 64 16384 ${ITERS:-20} | tr '\n' ' ')"; done
  for b in 16_q1 16_q2; do echo "$b round $round: $("$out/native_$b" 128 8192 ${ITERS:-20} | tr '\n' ' ')"; done
done
rm -f "$out"/native_*
