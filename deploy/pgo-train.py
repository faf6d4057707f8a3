#!/usr/bin/env python3
"""The training load of the router's profile-guided build (`deploy/pgo.sh`).

usage: deploy/pgo-train.py ROUTER_BINARY RELEASE_DIR [--scale N]

--scale N: every count divided by N (the test suite runs it at 100 against the
debug build, so that the load stays in step with the router it trains).

Runs the instrumented ROUTER_BINARY three times in front of the echo backend (from
RELEASE_DIR, with bench-clients and h3-client), on 127.0.0.1 ports 18470-18479:
  1. access log off (what the benchmarks run): HTTP/1.1 keep-alive GETs, plain
     and over TLS; h2 over TLS; request bodies; streamed responses over both;
     TLS handshakes (a connection per request); HTTP/3; WebSocket tunnels;
     3 000 routing events from the spool (the table's build and publish);
  2. the packaged defaults (access log on, health checks on): a lighter mix;
  3. HTTP/1.1 and h2 at the second run's size with access lines to syslog
     only in the `httplog` preset (what a platform moving from haproxy sets),
     drained from a UDP socket here: untrained, the line was compiled as cold code and cost 6.6 %
     of a request where the light build's cost 4.9 % (bench/RESULTS.md).
Each run writes its counts where LLVM_PROFILE_FILE (set by pgo.sh) says when the
router exits (SIGTERM: a clean stop). What the load does not reach is compiled as
cold code: that is why every path the router serves is in it, not only the
benchmarks' one. Exits non-zero, naming the step, if any load fails: a profile
from a half-trained run would make a slower binary, not an error.

Needs h2load (Debian nghttp2-client) and openssl."""

import os
import sys

# bench/http.py (the bench's routing event, its wait for a 200) shadows the
# standard library's `http`; bench/shapes.py has the bench's router configuration.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import importlib.util  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_shapes", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "shapes.py"))
SHAPES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(SHAPES)
BENCH = SHAPES.H

HOST = "ha-train-train.example.com"
BACKEND, HTTP, HTTPS, ADMIN, SYSLOG = 18470, 18471, 18472, 18473, 18474


def event(app, n, port):
    """An SPI event routing `app` (namespace `train`, gear number `n`) to the backend."""
    return BENCH.route_event(port, gear=f"5464c9f6e0b8cd5a6e{n:06x}", app=app, ns="train")


def config(d, mode):
    """The bench's router configuration, HTTP/3 on, `ha-` names, two workers;
    `mode` "defaults": without its access log and health checks off, as
    packaged; "syslog": access lines to syslog only, in the `httplog` preset
    (what a platform moving from haproxy sets), to `SYSLOG`."""
    c = SHAPES.router_yaml(d, "train", HTTP, HTTPS, ADMIN, f"{d}/spool", threads=2, interval="200ms", http3=True)
    if mode == "defaults":
        c = c.replace("health:\n  checks: false\n", "").replace("access_log:\n  enabled: false\n", "")
    if mode == "syslog":
        c = c.replace("access_log:\n  enabled: false\n",
                      f"access_log:\n  stderr: false\n  template: httplog\n"
                      f"  syslog: {{address: \"udp://127.0.0.1:{SYSLOG}\", protocol: rfc5424}}\n")
    return c + 'ha_dns_prefix: "ha-"\n'


def run(step, cmd, expect=None, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if out.returncode != 0 or (expect and expect not in out.stdout):
        sys.exit(f"pgo-train: {step} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    print(f"pgo-train: {step}: ok", flush=True)
    return out.stdout


def wait_routed(router, host):
    if router.poll() is not None:
        sys.exit("pgo-train: the router exited")
    BENCH.wait_port(HTTP, host, limit=30)


def h2load(n, url, *extra):
    return ["h2load", "-t1", *extra, f"-n{n}", "-H", f":authority: {HOST}", url]


def loads(rel, d, k, mode):
    """The requests of one run, each count divided by `k` (of the syslog
    run only the two plainest: the line's code is what it adds, and the
    rest of the mix keeps its weight)."""
    plain, tls = f"http://127.0.0.1:{HTTP}", f"https://127.0.0.1:{HTTPS}"
    ok = "succeeded, 0 failed"
    run("HTTP/1.1 keep-alive", h2load(200000 // k, f"{plain}/", "--h1", "-c8"), ok)
    run("h2 over TLS", h2load(100000 // k, f"{tls}/", "-c4", "-m10"), ok)
    if mode == "syslog":
        return
    run("HTTP/1.1 over TLS", h2load(30000 // k, f"{tls}/", "--h1", "-c4"), ok)
    run("request bodies", h2load(20000 // k, f"{plain}/post", "--h1", "-c2", "-d", f"{d}/body"), ok)
    run("h2 request bodies", h2load(10000 // k, f"{tls}/post", "-c2", "-m4", "-d", f"{d}/body"), ok)
    run("streamed responses", h2load(4000 // k, f"{plain}/stream?chunks=2", "--h1", "-c2"), ok)
    run("h2 streamed responses", h2load(2000 // k, f"{tls}/stream?chunks=2", "-c1", "-m4"), ok)
    # Few of the heavy ones: a handshake's counts are thousands of a request's,
    # and the compiler ranks code hot by its share of all the counts.
    shakes = max(300 // k, 2)
    run("TLS handshakes", h2load(shakes, f"{tls}/", "--h1", f"-c{shakes}"), ok)
    run("HTTP/3", [f"{rel}/h3-client", "count", f"127.0.0.1:{HTTPS}", HOST, f"{d}/ca.pem", "/",
                   str(5000 // k), "4", "10"], '"failed":0')
    ws = subprocess.Popen([f"{rel}/bench-clients", "hold", f"127.0.0.1:{HTTP}", HOST, "ws", str(max(50 // k, 2))],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if not ws.stdout.readline().startswith("ready"):
        sys.exit("pgo-train: WebSocket clients never ready")
    time.sleep(3)  # each tunnel echoes a message a second
    out, _ = ws.communicate(timeout=60)
    if '"echo_errors":0' not in out.replace(" ", ""):
        sys.exit(f"pgo-train: WebSocket echoes failed: {out}")
    print("pgo-train: WebSocket tunnels: ok", flush=True)


def drain(sock, state):
    """Reads the syslog lines the router sends, counting them in `state`,
    until `state["stop"]`."""
    sock.settimeout(0.5)
    while not state["stop"]:
        try:
            sock.recv(65536)
            state["lines"] += 1
        except OSError:
            pass


def train(router_bin, rel, mode, scale):
    d = tempfile.mkdtemp(prefix="router-pgo-")
    try:
        os.makedirs(f"{d}/spool")
        run("certificates", [f"{rel}/bench-clients", "certs", d, HOST])
        with open(f"{d}/body", "wb") as f:
            f.write(b"x" * 4096)
        with open(f"{d}/spool/0000.yaml", "w") as f:
            f.write(event("train", 0, BACKEND))
        with open(f"{d}/router.yaml", "w") as f:
            f.write(config(d, mode))
        backend = subprocess.Popen([f"{rel}/echo-backend", f"127.0.0.1:{BACKEND}"], stderr=subprocess.DEVNULL)
        router = subprocess.Popen([router_bin, "--config", f"{d}/router.yaml"],
                                  stdout=subprocess.DEVNULL, stderr=open(f"{d}/router.err", "w"))
        try:
            wait_routed(router, HOST)
            # Routing events: 3 000 apps through the spool, as a batch.
            k = (1 if mode == "bench" else 10) * scale
            apps = max(3000 // k, 1)
            for i in range(apps):
                with open(f"{d}/spool/.{i:05d}.tmp", "w") as f:
                    f.write(event(f"app{i}", i + 1, BACKEND))
                os.rename(f"{d}/spool/.{i:05d}.tmp", f"{d}/spool/1{i:05d}.yaml")
            loads(rel, d, k, mode)
            wait_routed(router, f"ha-app{apps - 1}-train.example.com")
            print("pgo-train: routing events: ok", flush=True)
        finally:
            router.terminate()
            code = router.wait(timeout=60)
            backend.terminate()
            backend.wait(timeout=10)
        if code != 0:
            sys.exit(f"pgo-train: the router exited with {code}: {open(f'{d}/router.err').read()[-2000:]}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    argv = sys.argv[1:]
    scale = 1
    if len(argv) == 4 and argv[2] == "--scale" and argv[3].isdigit() and int(argv[3]) > 0:
        scale = int(argv[3])
        argv = argv[:2]
    if len(argv) != 2:
        sys.exit(__doc__)
    router_bin, rel = argv
    for tool in ("h2load", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"pgo-train: {tool} is missing (apt-get install nghttp2-client openssl)")
    train(router_bin, rel, "bench", scale)
    train(router_bin, rel, "defaults", scale)
    # Access lines to syslog: the receiver only drains them.
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", SYSLOG))
    state = {"lines": 0, "stop": False}
    reader = threading.Thread(target=drain, args=(sink, state), daemon=True)
    reader.start()
    train(router_bin, rel, "syslog", scale)
    state["stop"] = True
    reader.join(timeout=5)
    sink.close()
    if state["lines"] == 0:
        sys.exit("pgo-train: no syslog line arrived")
    print(f"pgo-train: syslog lines: {state['lines']}", flush=True)

if __name__ == "__main__":
    main()
