#!/usr/bin/env bash
# Failover of the HA pair: real keepalived, ActiveMQ and two routers in network
# namespaces this script's program creates and removes. TRIALS (default 20) per fault:
# router process killed, graceful stop, link down. Needs root. Not part of CI.
#   bash bench/failover.sh [TRIALS [kill|graceful|linkdown ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v keepalived >/dev/null 2>&1 || [ -x /usr/sbin/keepalived ] || need+=(keepalived)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -f /usr/share/activemq/bin/activemq.jar ] || need+=(activemq)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build -p router -p e2e --bin router --bin echo-backend --bin bench-failover
target/debug/bench-failover "${@:-20}"
