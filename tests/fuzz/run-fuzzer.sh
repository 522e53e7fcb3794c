#!/usr/bin/env bash
# Runs one libFuzzer target over a fresh seed corpus (tests/fuzz/meson.build).
#   run-fuzzer.sh FUZZER CORPUS_GEN CODEC ARTIFACT_DIR [libFuzzer options...]
# The corpus lives in a temporary folder; inputs that crash are kept in
# ARTIFACT_DIR (rerun one with: FUZZER ARTIFACT_DIR/crash-...).
set -euo pipefail
fuzzer=$1 gen=$2 codec=$3 artifacts=$4
shift 4

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/seed" "$work/corpus" "$artifacts"
"$gen" "$codec" "$work/seed"
# new inputs go to corpus/ (the first folder); seed/ is only read
"$fuzzer" -artifact_prefix="$artifacts/$codec-" "$@" "$work/corpus" "$work/seed"
