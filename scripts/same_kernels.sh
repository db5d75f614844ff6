#!/usr/bin/env bash
# Whether the CUDA kernels compile to the same machine code as at a git
# revision (default HEAD): for device-code refactors made without a GPU at
# hand, where identical code needs no new run. Needs nvcc only (no GPU, no
# cuobjdump). Compiles every .cu under src/cuda for sm_90a (the precompiled
# tensor-core kernels among them) and, through nvcc, a set of tensor-core
# instantiations only the JIT builds (fp16 Q, pages of 1 and 12 tokens,
# every row tile, engine and build), in a worktree at REV and in this tree, then
# compares them kernel by kernel (scripts/kernel_text.py). Exit 0 when all
# are identical.
#   scripts/same_kernels.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach --quiet "$work/base" "$rev"

# instantiations TREE: the JIT-only instantiations, written for TREE (a
# revision before the BLOCKS template parameter has no two-block build).
instantiations() {
  local tree=$1 params=helixmla_tc::Params
  # The kernel's text: one file until session 39, then the file and its parts.
  local kernel
  kernel=$(cat "$tree/src/cuda/tensorcore_kernel.cuh" "$tree"/src/cuda/tensorcore/*.cuh 2>/dev/null || true)
  # Since the TMA copies (session 27) every kernel takes the pool's tensor
  # map too; before, only an off-by-default knob's build did.
  if grep -q "KvTensorMap kv_map)" <<<"$kernel" &&
      ! grep -q "define HELIXMLA_TC_SEESAW_TMA 0" <<<"$kernel"; then
    params="helixmla_tc::Params, const __grid_constant__ helixmla_tc::KvTensorMap"
  fi
  echo '#include "cuda/tensorcore_kernel.cuh"'
  for page in 1 12; do
    for elem in kElemBf16 kElemFp16; do
      for kv in kKvSameAsQ kKvFp8; do
        for tile in "16 kEngineMmaSync" "32 kEngineMmaSync" "64 kEngineMmaSync" "64 kEngineWgmma"; do
          set -- $tile
          echo "template __global__ void helixmla_tc::mla_decode_kernel<$1, $page, helixmla_tc::$elem," \
               "helixmla_tc::$kv, helixmla_tc::$2>($params);"
        done
      done
      if grep -q "int BLOCKS" <<<"$kernel"; then
        # The 32-row fp8 two-block build (Config's BLOCKS).
        echo "template __global__ void helixmla_tc::mla_decode_kernel<32, $page, helixmla_tc::$elem," \
             "helixmla_tc::kKvFp8, helixmla_tc::kEngineMmaSync, 2>($params);"
      fi
      if grep -q "kEngineSeesaw" <<<"$kernel"; then
        # The seesaw engine (64-row tiles of 16-bit KV).
        echo "template __global__ void helixmla_tc::mla_decode_kernel<64, $page, helixmla_tc::$elem," \
             "helixmla_tc::kKvSameAsQ, helixmla_tc::kEngineSeesaw>($params);"
      fi
      if grep -q "kEngineFp8Steps" <<<"$kernel"; then
        # The fp8-steps engine (16-row tiles of fp8 KV).
        echo "template __global__ void helixmla_tc::mla_decode_kernel<16, $page, helixmla_tc::$elem," \
             "helixmla_tc::kKvFp8, helixmla_tc::kEngineFp8Steps>($params);"
      fi
      if grep -q "Fp8StepsSplitLatentsLayout" <<<"$kernel"; then
        # Its 48-row tiles (session 30).
        echo "template __global__ void helixmla_tc::mla_decode_kernel<48, $page, helixmla_tc::$elem," \
             "helixmla_tc::kKvFp8, helixmla_tc::kEngineFp8Steps>($params);"
      fi
    done
  done
}

# compile TREE OUTDIR: one cubin per translation unit.
compile() {
  local tree=$1 out=$2
  mkdir -p "$out"
  instantiations "$tree" >"$out/jit_instantiations.cu"
  for unit in "$tree"/src/cuda/*.cu "$tree"/src/cuda/sm90/*.cu "$out/jit_instantiations.cu"; do
    nvcc -std=c++20 -O3 -DNDEBUG -DHELIXMLA_WITH_CUDA=1 -I "$tree/include" -I "$tree/src" -arch=sm_90a \
      -cubin "$unit" -o "$out/$(basename "$unit" .cu).cubin"
  done
}
compile "$work/base" "$work/before" &
compile . "$work/after"
wait $!

status=0
for after in "$work"/after/*.cubin; do
  before="$work/before/$(basename "$after")"
  echo "== $(basename "$after" .cubin)"
  if [ -f "$before" ]; then
    python3 scripts/kernel_text.py "$before" "$after" || status=1
  else
    echo "new translation unit"; status=1
  fi
done
for before in "$work"/before/*.cubin; do
  [ -f "$work/after/$(basename "$before")" ] || { echo "== $(basename "$before" .cubin): translation unit gone"; status=1; }
done
exit $status
