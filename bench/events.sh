#!/usr/bin/env bash
# Event propagation benchmark: apply cost at 1k/10k/100k apps, and
# publish-to-routed latency through a real ActiveMQ with 100k apps loaded.
#   bash bench/events.sh            # full run (about a minute after the build)
#   bash bench/events.sh --quick    # 10k apps, 200 events/s, 3 s
#   bash bench/events.sh --only-propagation --rate 10000   # the 10k events/s target
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -f /usr/share/activemq/bin/activemq.jar ] || need+=(activemq)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -p router -p e2e --bins
./target/release/bench-events "$@"
