#!/usr/bin/env bash
# Times bench/prototypes/swapped_fp8_native.cu's 48-head build on case 10's
# shape with parts of each tile's work left out (ABLATE 0-4; outputs wrong
# for 1-5): how far overlapping the two warpgroups could take it
# (session 29).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
for a in 0 1 2 3 4 5; do
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DHEADS=48 -DITEMS=2 -DABLATE=$a \
    swapped_fp8_native.cu -o "$out/native_48_ablate$a" &
done
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in 1 2; do
  for a in 0 1 2 3 4 5; do
    echo "ABLATE=$a round $round: $("$out/native_48_ablate$a" 64 16384 ${ITERS:-20} | tail -1)"
  done
done
