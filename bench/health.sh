#!/usr/bin/env bash
# Health-check cost at 10k members: router CPU with active checks on vs off.
#   bash bench/health.sh [--members N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3; }
cargo build --release -p router -p e2e --bin router --bin bench-members
ulimit -n 65536 2>/dev/null || true
python3 bench/health.py "$@"
