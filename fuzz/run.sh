#!/usr/bin/env bash
# cargo fuzz with the fuzz binaries' own build settings: the workspace's release
# profile (fat LTO, one codegen unit, full line tables: what the shipped router
# wants) made every fuzz binary take minutes of CPU to link, and a fuzz binary
# gains nothing from LTO (coverage instrumentation dominates its speed). Cargo
# reads profiles only from the workspace root, so they are set here, for these
# commands only.
#
#   fuzz/run.sh build TARGET
#   fuzz/run.sh run TARGET [-- LIBFUZZER FLAGS]
#   fuzz/run.sh cmin TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: fuzz/run.sh build|run|cmin|tmin TARGET [-- flags]" >&2; exit 2; }
sub=$1 target=$2
shift 2
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
exec cargo +nightly fuzz "$sub" "$target" --features libfuzzer "$@"
