#!/usr/bin/env bash
# The HA pair in one command: builds everything, creates network namespaces (nothing
# outside them is touched), starts ActiveMQ, an echo backend, two routers and
# keepalived, and shows a client's view of the VIP while the active router is killed,
# restarted and stopped gracefully. Cleans up after itself (also on Ctrl-C). Root.
#   bash deploy/pair-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "pair-demo needs root (network namespaces)" >&2; exit 1; }
need=()
command -v keepalived >/dev/null 2>&1 || [ -x /usr/sbin/keepalived ] || need+=(keepalived)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v python3 >/dev/null 2>&1 || need+=(python3)
[ -f /usr/share/activemq/bin/activemq.jar ] || need+=(activemq)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build -p router -p e2e --bin router --bin echo-backend --bin pair-demo
exec target/debug/pair-demo
