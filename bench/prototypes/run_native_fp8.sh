#!/usr/bin/env bash
# Builds and runs bench/prototypes/swapped_fp8_native.cu on case 10's and
# case 11's shapes (PROMOTE off and on), then memcheck and racecheck on a
# small batch. Prints what it measured (session 28).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
for cfg in "48 2 0" "48 2 1" "16 1 0" "16 1 1"; do
  set -- $cfg
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DHEADS=$1 -DITEMS=$2 -DPROMOTE=$3 \
    swapped_fp8_native.cu -o "$out/native_$1_$3" || exit 1
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for promote in 0 1; do
  "$out/native_48_$promote" 64 16384 ${ITERS:-20}
  "$out/native_16_$promote" 128 8192 ${ITERS:-20}
done
if [ "${SANITIZE:-1}" = 1 ]; then
  for h in 48 16; do
    compute-sanitizer --tool memcheck "$out/native_${h}_0" 2 1024 1 2>&1 | grep -E "ERROR SUMMARY|rel L2"
    compute-sanitizer --tool racecheck "$out/native_${h}_0" 2 1024 1 2>&1 | grep -E "RACECHECK SUMMARY|rel L2|Race reported" | sort | uniq -c | head -8
  done
fi
