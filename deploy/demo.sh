#!/usr/bin/env bash
# Runs the router on deploy/examples/demo.yaml with the spool source (no broker):
# starts a local echo backend, drops one routing event for it into the spool, and
# runs the router in the foreground. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl; }
cargo build --release -p router -p e2e --bins
mkdir -p /tmp/router-demo/spool
./target/release/echo-backend 127.0.0.1:38032 &
backend=$!
trap 'kill "$backend" 2>/dev/null || true' EXIT
# The broker's add_public_endpoint for app "myapp" in domain "demo", as fixture 03,
# with the member moved to the local echo backend.
sed -e 's/:public_address: 10.0.0.11/:public_address: 127.0.0.1/' \
  fixtures/spi-events/03-add_public_endpoint-load_balancer.yaml > /tmp/router-demo/spool/.03.yaml
mv /tmp/router-demo/spool/.03.yaml /tmp/router-demo/spool/03-add_public_endpoint.yaml
cat <<'TXT'

In another terminal:
  curl -H 'Host: ha-myapp-demo.example.com' http://127.0.0.1:8080/hello   # routed: JSON echo
  curl -H 'Host: nobody.example.com' http://127.0.0.1:8080/               # 404
  curl http://127.0.0.1:9090/routes                                       # the route table
  curl http://127.0.0.1:9090/metrics                                      # Prometheus metrics
Drop more event files (fixtures/spi-events/) into /tmp/router-demo/spool/.

TXT
./target/release/router --config deploy/examples/demo.yaml
