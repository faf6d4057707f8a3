#!/usr/bin/env bash
# Benchmarks the router against haproxy 2.6 and nginx 1.22 on one nginx backend, in
# one run on this machine. Not part of CI (it takes minutes and wants a quiet box).
# It measures the router the packages ship: target/pgo/router (deploy/pgo.sh).
#   bash bench/run.sh                 # 3 rounds, unpinned
#   bash bench/run.sh --pin           # proxy on CPU 1, wrk + backend on CPU 0
# Extra arguments go to bench/http.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# Everything bench/*.py uses: h2load for shapes.py, valgrind for instructions.py.
for pkg in nginx-light:nginx haproxy:haproxy wrk:wrk curl:curl python3:python3 slowhttptest:slowhttptest nghttp2-client:h2load valgrind:valgrind; do
  command -v "${pkg#*:}" >/dev/null 2>&1 || need+=("${pkg%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -p router -p e2e --bin router --bin bench-h1-floor
# The binary measured is the one the packages ship: built profile-guided.
bash deploy/pgo.sh
python3 bench/http.py --router target/pgo/router "$@"
