#!/usr/bin/env bash
# Fresh machine to a first result: install what is missing, build the
# `helixmla` program, run it on its default problem (on the GPU when there is
# one, else on the CPU). Extra arguments go to `helixmla run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=${HELIXMLA_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHELIXMLA_BUILD_TESTS=OFF -DHELIXMLA_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" helixmla_cli
exec "$build/helixmla" run "$@"
