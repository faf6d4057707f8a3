#!/usr/bin/env bash
# Benchmarks the portproxy against haproxy 2.6 `mode tcp` and the backend served
# directly, in one run (bulk throughput, short-connection CPU, memory per idle
# connection, 30 000 cluster-port listeners). Not part of CI.
#   bash bench/portproxy.sh [--pin] [--rounds N] [--duration S]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v haproxy >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; }
# 30 000 listeners plus connections need more descriptors than the usual 20 000.
ulimit -Hn 262144 2>/dev/null || echo "note: open-files hard limit stays $(ulimit -Hn)" >&2
ulimit -n "$(ulimit -Hn)"
cargo build --release -p portproxy -p e2e --bin portproxy --bin bench-tcp
python3 bench/portproxy.py "$@"
