#!/usr/bin/env bash
# TLS benchmark: CPU per full and resumed TLS 1.3 handshake and per HTTPS
# keep-alive request, router vs haproxy vs nginx with the same ECDSA P-256 certificate,
# then the router's handshake rate with 1 vs 100k alias certificates loaded.
# Not part of CI (minutes; wants a quiet box).
#   bash bench/tls.sh                     # 3 rounds, unpinned
#   bash bench/tls.sh --pin --rounds 4    # arguments go to bench/tls.py (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for pkg in nginx-light:nginx haproxy:haproxy wrk:wrk curl:curl python3:python3 nghttp2-client:h2load openssl:openssl; do
  command -v "${pkg#*:}" >/dev/null 2>&1 || need+=("${pkg%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -p router -p e2e --bin router --bin bench-certs
python3 bench/tls.py "$@"
