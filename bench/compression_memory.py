#!/usr/bin/env python3
"""What `compression.max_streams` costs in memory: the router's RSS with that many
slow clients, each holding one response being compressed (issue 60, item 3).

The router (release, one app with `compression: true`, the test suite's echo
backend as its member) gets N requests for a long streamed text body (64 KiB of a
page's text every 500 ms, `/stream?chunks=100000&gap_ms=500`) with one
`Accept-Encoding`; each client reads the head and nothing more, so every stream
stays in flight with its encoder and its window (filled after the first few
hundred KiB: the figure waits 8 s, 1 MiB a stream; 64 MB/s in all). Clients come from 127.0.0.1,
127.0.0.2, ... (`--per-source` each, within `compression.max_streams_per_client`).
The figure: RSS growth over the idle router, per stream, for each coding and for
none (the same requests passed through uncompressed: what any proxied response
in flight holds anyway).

usage: bench/compression_memory.py [--streams 256] [--per-source 32] [--router BIN]

Needs release builds: cargo build --release -p router -p e2e --bin router --bin echo-backend.
Everything listens on 127.0.0.1; every process started here is stopped by PID."""

import os
import sys

# bench/http.py is not the standard library's http.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(ROOT, "bench", "http.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)
_spec = importlib.util.spec_from_file_location("bench_start", os.path.join(ROOT, "bench", "start.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)
RELEASE = os.path.join(ROOT, "target/release")
HOST = "ha-bench-bench.example.com"
BACKEND, ROUTER, ADMIN = H.PORTS["backend"], H.PORTS["router"], H.PORTS["router_admin"]


def start_router(d, binary, streams, per_source):
    os.makedirs(f"{d}/router-spool", exist_ok=True)
    H.write(f"{d}/router-spool/01.yaml", H.route_event(BACKEND))
    H.router_config(d, 2, extra=f"""health:
  checks: false
upstream:
  max_connections_per_backend: {streams + 16}
  source_reserve: 0
limits:
  max_connections_per_source: {per_source + 16}
compression:
  max_streams: {streams}
  max_streams_per_client: {per_source}
app_defaults:
  compression: true
""")
    p = subprocess.Popen([binary, "--config", f"{d}/router.yaml"], stderr=subprocess.DEVNULL)
    H.wait_port(ROUTER, HOST)
    return p


def hold(n, per_source, coding):
    """n streams held open, unread past the head; how many came compressed."""
    held, compressed, statuses = [], 0, {}
    for i in range(n):
        src = f"127.0.0.{1 + i // per_source}"
        s = socket.create_connection(("127.0.0.1", ROUTER), source_address=(src, 0))
        accept = f"Accept-Encoding: {coding}\r\n" if coding != "none" else ""
        s.sendall(f"GET /stream?chunks=100000&gap_ms=500&type=text%2Fplain HTTP/1.1\r\nHost: {HOST}\r\n{accept}\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = s.recv(4096)
            if not c:
                sys.exit(f"stream {i} closed before its head")
            buf += c
        compressed += b"content-encoding:" in buf.split(b"\r\n\r\n")[0].lower()
        status = buf.split(b" ", 2)[1].decode(errors="replace")
        statuses[status] = statuses.get(status, 0) + 1
        held.append(s)
    if set(statuses) != {"200"}:
        print(f"  answers by status: {statuses}", flush=True)
    return held, compressed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--per-source", type=int, default=32)
    ap.add_argument("--router", default=os.path.join(RELEASE, "router"))
    args = ap.parse_args()
    backend = subprocess.Popen([os.path.join(RELEASE, "echo-backend"), f"127.0.0.1:{BACKEND}"],
                               stderr=subprocess.DEVNULL)
    try:
        for coding in ("none", "gzip", "br", "zstd"):
            with tempfile.TemporaryDirectory() as d:
                router = start_router(d, args.router, args.streams, args.per_source)
                try:
                    time.sleep(0.5)
                    idle = S.rss_kb(router.pid)
                    held, compressed = hold(args.streams, args.per_source, coding)
                    time.sleep(8)  # 16 chunks (1 MiB) a stream: every encoder's window full
                    full = S.rss_kb(router.pid)
                    metrics = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/metrics").read().decode()
                    over = {l.split()[0]: l.split()[1] for l in metrics.splitlines()
                            if l.startswith("router_compression_over")}
                    print(f"{coding:>5}: {args.streams} streams ({compressed} compressed): RSS {idle} -> "
                          f"{full} KiB, {(full - idle) / args.streams:.0f} KiB a stream, "
                          f"{(full - idle) / 1024:.0f} MiB in all; {over}", flush=True)
                    for s in held:
                        s.close()
                finally:
                    router.terminate()
                    router.wait(timeout=30)
    finally:
        backend.terminate()
        backend.wait()


if __name__ == "__main__":
    main()
