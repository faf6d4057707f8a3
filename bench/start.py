#!/usr/bin/env python3
"""Start-up with a large saved state: exec to the first HTTPS 200 for an alias whose
own certificate is in the state, and RSS then, for one or two router binaries side by
side (alternating, so the host's drift hits both alike).

usage: bench/start.py [--apps N] [--rounds R] [--no-certs] ROUTER [ROUTER2]

The state comes from `target/release/bench-certs` (each app with one member, one
alias and, unless --no-certs, its own ECDSA P-256 certificate), generated once and
copied afresh before every start. The router runs with `worker_threads: 1` and no
event source. The member is a Python HTTP server in this process. The client is a Python TLS socket retried every 5 ms, so the figure
is within about 10 ms of the first moment the router can answer.

Everything listens on 127.0.0.1; every process started here is stopped by PID."""

import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import socketserver
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"http": 18185, "https": 18186, "admin": 18187}


class Ok(socketserver.BaseRequestHandler):
    """The member every app shares: 200 with a short body to each request head, kept
    alive. (bench/http.py shadows the standard http package here.)"""

    def handle(self):
        buf = b""
        while True:
            data = self.request.recv(4096)
            if not data:
                return
            buf += data
            while b"\r\n\r\n" in buf:
                _, buf = buf.split(b"\r\n\r\n", 1)
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def first_200(port, name, deadline):
    """Retries a TLS GET with SNI and Host = name until a 200 or the deadline."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname=name) as s:
                    s.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
                    head = s.recv(64)
                    if head.startswith(b"HTTP/1.1 200"):
                        return True
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.005)
    return False


def router_yaml(state, d, ports):
    """A router on `state` with no event source, one worker thread, resumption off
    and the default certificate in `d` (tls.crt, tls.key): also bench/tls.py's."""
    return f"""cloud_domain: example.com
state_dir: {state}
worker_threads: 1
listen:
  http: 127.0.0.1:{ports['http']}
  https: 127.0.0.1:{ports['https']}
  admin: 127.0.0.1:{ports['admin']}
tls:
  default_cert: {d}/tls.crt
  default_key: {d}/tls.key
  resumption: false
spi:
  source: none
health:
  checks: false
access_log:
  enabled: false
"""


def rss_kb(pid):
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))


def stop(proc):
    """SIGTERM, then SIGKILL after 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_once(router, d, state_src, alias):
    state = f"{d}/state"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(state_src, state)
    conf = f"{d}/router.yaml"
    with open(conf, "w") as f:
        f.write(router_yaml(state, d, PORTS))
    # Drop the copy from the page cache's dirty list so the start reads, not writes.
    os.sync()
    t = time.time()
    proc = subprocess.Popen([router, "--config", conf], stdout=subprocess.DEVNULL,
                            stderr=open(f"{d}/router.log", "w"))
    try:
        ok = first_200(PORTS["https"], alias, t + 120)
        took = time.time() - t
        if not ok:
            sys.exit(f"{router}: no HTTPS 200 for {alias}: "
                     + open(f"{d}/router.log").read()[-2000:])
        return took, rss_kb(proc.pid)
    finally:
        stop(proc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apps", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-certs", action="store_true")
    ap.add_argument("routers", nargs="+")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-start-")
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{d}/tls.key",
                        "-out", f"{d}/tls.crt", "-days", "2", "-subj", "/CN=*.example.com"],
                       check=True, capture_output=True)
        member = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Ok)
        member.daemon_threads = True
        threading.Thread(target=member.serve_forever, daemon=True).start()
        src = f"{d}/state-src"
        subprocess.run([os.path.join(ROOT, "target/release/bench-certs"), src, str(a.apps),
                        f"127.0.0.1:{member.server_address[1]}"] + (["--no-certs"] if a.no_certs else []),
                       check=True, stderr=subprocess.DEVNULL)
        size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
        alias = f"alias{a.apps // 2}.bench.test"
        print(f"{a.apps} apps, {'no certificates' if a.no_certs else 'one certificate each'}, "
              f"state {size / 1e6:.0f} MB; first HTTPS 200 for {alias}", flush=True)
        times = {r: [] for r in a.routers}
        rss = {r: [] for r in a.routers}
        for i in range(a.rounds):
            order = a.routers if i % 2 == 0 else list(reversed(a.routers))
            for r in order:
                took, kb = start_once(r, d, src, alias)
                times[r].append(took)
                rss[r].append(kb)
                print(f"round {i} {r}: {took:.3f} s, RSS {kb / 1024:.0f} MiB", flush=True)
        for r in a.routers:
            print(f"{r}: start median {statistics.median(times[r]):.3f} s "
                  f"[{min(times[r]):.3f}-{max(times[r]):.3f}], RSS median "
                  f"{statistics.median(rss[r]) / 1024:.0f} MiB, "
                  f"{statistics.median(rss[r]) / a.apps:.2f} KiB per app")
        best = min(statistics.median(times[r]) for r in a.routers)
        verdict = "met" if best <= 1.0 else "not met"
        print(f"target: start to first HTTPS 200 <= 1 s with {a.apps} apps: {verdict} ({best:.3f} s)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
