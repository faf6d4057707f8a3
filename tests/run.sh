#!/usr/bin/env bash
# Installs what the tests need (idempotently) and runs every test of the workspace.
# This is README's second command and exactly what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages the tests use: curl is a real client in the data-path tests; the
# broker tests start a real ActiveMQ (Debian's package brings Java and its keytool)
# and a real RabbitMQ;
# TLS tests make PKCS12 stores with openssl; haproxy is a PROXY-protocol peer.
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# kill(1) (signals to the router and brokers by PID) and mount(8) (the full-disk test).
[ -x /usr/bin/kill ] || [ -x /bin/kill ] || need+=(procps)
command -v mount >/dev/null 2>&1 || need+=(mount)
[ -f /usr/share/activemq/bin/activemq.jar ] || need+=(activemq)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
# keepalived and iproute2 run the HA-pair tests in network namespaces they create.
command -v keepalived >/dev/null 2>&1 || [ -x /usr/sbin/keepalived ] || need+=(keepalived)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
# nftables: the pair's handover forwards the old holder's connections (keepalived/router-handover).
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
# promtool checks the alert rules; systemd-analyze the units (tests/tests/deploy.rs).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# strip and readelf: the package script and its test.
command -v readelf >/dev/null 2>&1 || need+=(binutils)
# slowhttptest: the slow-client attacks of tests/tests/slow.rs.
command -v slowhttptest >/dev/null 2>&1 || need+=(slowhttptest)
# haproxy is the PROXY-protocol peer (send-proxy / accept-proxy) of the portproxy tests.
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
# chromium renders the admin status page (tests/tests/status_page.rs); wrk loads the
# router during a binary upgrade (tests/tests/upgrade.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
# debootstrap and systemd-nspawn: the package installed and run under systemd as
# PID 1 (tests/tests/systemd_unit.rs).
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || need+=(systemd-container)
# Let's Encrypt's test ACME CA and its DNS (pebble-challtestsrv) for the ACME tests.
command -v pebble >/dev/null 2>&1 || need+=(pebble)
# h2load drives the profile-guided build's training load (deploy/pgo-train.py,
# run small by tests/tests/deploy.rs); nghttp (same package) is the h2 client
# that reads a 413's RST_STREAM (tests/tests/routes.rs).
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
# testssl.sh reads the HSTS header as a browser would (tests/tests/routes.rs).
command -v testssl >/dev/null 2>&1 || need+=(testssl.sh)
# rsyslog receives the access lines over UDP, TCP and a unix socket (tests/tests/edge.rs).
command -v rsyslogd >/dev/null 2>&1 || [ -x /usr/sbin/rsyslogd ] || need+=(rsyslog)
# A real gRPC server and client (tests/grpc/echo.py, tests/tests/grpc.rs), run by
# Debian's own interpreter.
/usr/bin/python3 -c 'import grpc' >/dev/null 2>&1 || need+=(python3-grpcio)
# A real HTTP/3 client (aioquic, tests/h3/client.py, tests/tests/http3.rs): not
# packaged in Debian 12, so from PyPI into a virtualenv under target/.
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "need root to apt-get install ${need[*]}" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install the Rust toolchain (1.89 or newer) first" >&2
  exit 1
fi

# And an OTLP receiver built on the reference protobuf definitions
# (opentelemetry-proto, tests/otlp/receiver.py, tests/tests/traces.rs), same virtualenv.
if ! target/h3-venv/bin/python3 -c 'import aioquic, opentelemetry.proto' >/dev/null 2>&1; then
  rm -rf target/h3-venv
  /usr/bin/python3 -m venv target/h3-venv
  target/h3-venv/bin/pip install -q 'aioquic>=1.2,<2' 'opentelemetry-proto>=1.27,<2'
fi

cargo fmt --all -- --check
# One build of everything (binaries included: the CLI tests run target/debug/router).
cargo build --workspace --all-targets --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
