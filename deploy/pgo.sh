#!/usr/bin/env bash
# Builds the router profile-guided: the binary the packages ship and the
# benchmarks measure. Output: target/pgo/router.
#   bash deploy/pgo.sh
#
# 1. An instrumented release build (target/pgo/gen) counts, branch by branch,
#    what the training load (deploy/pgo-train.py: every protocol the router
#    serves, routing events, both the benchmarks' settings and the packaged
#    defaults) makes it do.
# 2. llvm-profdata (rustup's llvm-tools, the toolchain's own LLVM) merges the
#    counts.
# 3. The release build again with them (target/pgo/use): hot code laid out
#    together and inlined where it runs, cold code out of the way.
# Why: the request path's cost here was instruction-cache misses more than
# instructions (twice nginx's misses at about its instruction count); the
# profile took 23 % of the user-space instructions of an HTTP/1.1 request and
# ~10 % of its CPU (bench/RESULTS.md, "the profile-guided build"). About three
# times a release build's time (12 minutes on 2 cores). `cargo build --release`
# without it still builds a correct, slower router.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  rustup component add llvm-tools
fi
for pkg in nghttp2-client:h2load openssl:openssl python3:python3; do
  command -v "${pkg#*:}" >/dev/null 2>&1 || need+=("${pkg%%:*}")
done
if [ -n "${need[*]:-}" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
out=target/pgo
raw="$PWD/$out/raw"
# The load's own tools, built as usual.
cargo build --release --locked -p e2e --bin echo-backend --bin bench-clients --bin h3-client
RUSTFLAGS="-Cprofile-generate=$raw" \
  cargo build --release --locked -p router --bin router --target-dir "$out/gen"
# Build scripts were instrumented too and wrote counts of their own: only the
# router's go into the profile.
rm -rf "$raw"
mkdir -p "$raw"
LLVM_PROFILE_FILE="$raw/router-%p-%m.profraw" \
  python3 deploy/pgo-train.py "$out/gen/release/router" target/release
"$profdata" merge -o "$out/router.profdata" "$raw"/*.profraw
RUSTFLAGS="-Cprofile-use=$PWD/$out/router.profdata" \
  cargo build --release --locked -p router --bin router --target-dir "$out/use"
cp "$out/use/release/router" "$out/router"
echo "profile-guided router: $out/router"
