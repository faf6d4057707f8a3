#!/usr/bin/env bash
# The HA pair under steady mixed load with a fault every two minutes, for MINUTES
# (20): see tests/src/bin/bench-soak.rs. Real keepalived, ActiveMQ and two routers
# in network namespaces the program creates and removes. Needs root. Not part of CI.
# Built in release without fat LTO (minutes less to build; the soak measures what
# stays flat, not the last per cent of speed).
#
#   bash bench/soak.sh [MINUTES [FAULT_EVERY_SECONDS]]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/soak.sh needs root (network namespaces)" >&2; exit 2; }
need=()
command -v keepalived >/dev/null 2>&1 || [ -x /usr/sbin/keepalived ] || need+=(keepalived)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
[ -f /usr/share/activemq/bin/activemq.jar ] || need+=(activemq)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
cargo build --release -p router -p e2e --bin router --bin echo-backend --bin bench-soak \
    --bin h2-client --bin h3-client
exec target/release/bench-soak "$@"
