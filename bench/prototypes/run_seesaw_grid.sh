#!/usr/bin/env bash
# Builds bench/prototypes/seesaw_wgmma.cu as it is and as committed at
# REV (default 280b68b, one item a block; or the file ONE_ITEM_SRC), then times both on case 1's
# shape and on the item-cost probe's 64-head shapes with one item a block
# and with GRID blocks walking several (session 40); checks the outputs
# first, and runs memcheck and racecheck on small batches walked by a
# short grid.
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp}
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lcuda"
nvcc $flags seesaw_wgmma.cu -o "$out/seesaw_grid" || exit 1
# ONE_ITEM_SRC: that file instead (a tree without git history).
if [ -n "${ONE_ITEM_SRC:-}" ]; then
  cp "$ONE_ITEM_SRC" "$out/seesaw_one.cu"
else
  git -C . show "${REV:-280b68b}:bench/prototypes/seesaw_wgmma.cu" >"$out/seesaw_one.cu" 2>/dev/null
fi
if [ -s "$out/seesaw_one.cu" ]; then
  nvcc $flags "$out/seesaw_one.cu" -o "$out/seesaw_one" || exit 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Correctness: one item a block, two and three a block (uneven), one block, splits.
for cfg in "4 1024 128 1 8" "4 1024 128 1 4" "6 1024 128 1 4" "4 1024 128 1 1" "4 2048 64 2 3" "8 1024 48 2 5"; do
  set -- $cfg
  "$out/seesaw_grid" "$1" "$2" "$3" "$4" 1 3 "$5" | grep -E "verify|us"
done
iters=${ITERS:-50}
for round in 1 2; do
  echo "round $round"
  # Case 1: 256 items; 256 blocks (the library's launch) against 128 walking two each.
  [ -x "$out/seesaw_one" ] && "$out/seesaw_one" 128 4096 128 1 0 "$iters" | sed 's/^/one-item build: /'
  "$out/seesaw_grid" 128 4096 128 1 0 "$iters" 256
  "$out/seesaw_grid" 128 4096 128 1 0 "$iters" 128
  # The probe's 64-head shapes: 128 KV tiles a slot in 1, 2, 4, 8 items.
  for n in 1 2 4 8; do
    b=$((132 * n)); kv=$((8192 / n))
    "$out/seesaw_grid" $b $kv 64 1 0 "$iters" $b
    [ $n -gt 1 ] && "$out/seesaw_grid" $b $kv 64 1 0 "$iters" 132
  done
done
if [ "${SANITIZE:-1}" = 1 ]; then
  for cfg in "4 512 64 1 3" "3 1024 128 2 5"; do
    set -- $cfg
    compute-sanitizer --tool memcheck "$out/seesaw_grid" "$1" "$2" "$3" "$4" 1 1 "$5" 2>&1 | grep -E "ERROR SUMMARY|verify"
    compute-sanitizer --tool racecheck "$out/seesaw_grid" "$1" "$2" "$3" "$4" 1 1 "$5" 2>&1 | grep -E "RACECHECK SUMMARY|verify|Race reported" | sort | uniq -c | head -8
  done
fi
