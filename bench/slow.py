#!/usr/bin/env python3
"""Hostile clients from one address against the router, haproxy and nginx, one attack
at a time, on the same backend, while a probe from another address keeps asking for
a page (what other users of the same proxy still get).

For each proxy and attack: the proxy starts fresh, the attack runs SECONDS from
127.0.0.1, and a probe client on 127.0.0.2 (another address, as a real user would
be) sends GET / every 100 ms on a new connection with a 2 s limit. Prints per run
the share of probes answered 200 within 2 s, the slowest answer and what failed.

  H  slowhttptest -H, CONNS connections: heads that never end (slowloris)
  B  slowhttptest -B: POST, Content-Length 8192, a few bytes per 10 s (R-U-Dead-Yet)
  X  slowhttptest -X: GET of a 1 MiB answer, receive window 1-512 B, read 5 B/s
  Z  h2 with a zero receive window: 4 connections x 32 streams of a 4 MiB answer
     (bench-clients zero-window; nginx on its h2c port)
  S  one-source slot flood: 300 connections asking for an answer that takes 20 s,
     again as soon as answered (bench-clients slow-requests)

Every proxy limits what it sends one backend server to 100 requests at once, so
that the attacks have something to take: the router's default
(`upstream.max_connections_per_backend`), haproxy `server ... maxconn 100` with
`timeout queue 1s`, nginx `server ... max_conns=100` (open-source nginx has no
queue: past it, 502). Otherwise defaults, 2 threads or workers each.

usage: bench/slow.py [--seconds 60] [--conns 1000] [--modes H,B,X,Z,S]
                     [--proxies router,haproxy,nginx] [--router BIN]
                     [--max-connections N] [--verbose]

Needs: slowhttptest, nginx, haproxy (bench/run.sh installs the last two),
target/release/router, echo-backend and bench-clients (cargo build --release -p
router -p e2e). Every process started here is stopped by PID at the end."""

import os
import sys

# bench/http.py would shadow the standard library's http package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import http.client  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(ROOT, "bench", "http.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)
HOST = "ha-bench-bench.example.com"
PORTS = {"backend": 18280, "haproxy": 18281, "nginx": 18282, "nginx_h2": 18284,
         "router": 18283, "router_admin": 18293}
RELEASE = os.path.join(ROOT, "target/release")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


HAPROXY = """
global
    maxconn {maxconn}
    nbthread 2
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout queue 1s
    timeout http-request 10s
    timeout http-keep-alive 60s
    option http-keep-alive
frontend fe_http
    bind 127.0.0.1:{haproxy}
    default_backend be
backend be
    server s1 127.0.0.1:{backend} maxconn 100
"""

NGINX = """
worker_processes 2;
worker_rlimit_nofile 20000;
pid {d}/nginx.pid;
error_log {d}/nginx.err crit;
events {{ worker_connections {maxconn}; }}
http {{
  access_log off;
{temp}
  upstream be {{ server 127.0.0.1:{backend} max_conns=100; keepalive 100; }}
  server {{
    listen 127.0.0.1:{nginx} backlog=4096;
    listen 127.0.0.1:{nginx_h2} http2 backlog=4096;
    location / {{
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
    }}
  }}
}}
"""

ROUTE_EVENT = H.route_event(PORTS['backend'])


def start_proxy(d, name, binary, max_conns):
    """Starts `name` fresh; returns (process, HTTP/1.1 port, h2 prior-knowledge port)."""
    if name == "haproxy":
        write(f"{d}/haproxy.cfg", HAPROXY.format(maxconn=max_conns, **PORTS))
        p = subprocess.Popen(["haproxy", "-f", f"{d}/haproxy.cfg"], stderr=subprocess.DEVNULL)
        return p, PORTS["haproxy"], PORTS["haproxy"]
    if name == "nginx":
        temp = "\n".join(f"  {k}_temp_path {d}/tmp-{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(f"{d}/tmp-{k}", exist_ok=True)
        write(f"{d}/nginx.conf", NGINX.format(d=d, temp=temp, maxconn=max_conns, **PORTS))
        p = subprocess.Popen(["nginx", "-c", f"{d}/nginx.conf", "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        return p, PORTS["nginx"], PORTS["nginx_h2"]
    os.makedirs(f"{d}/spool", exist_ok=True)
    write(f"{d}/spool/01-bench.yaml", ROUTE_EVENT)
    shutil.rmtree(f"{d}/state", ignore_errors=True)
    write(f"{d}/router.yaml", f"""
cloud_domain: example.com
state_dir: {d}/state
worker_threads: 2
listen:
  http: 127.0.0.1:{PORTS['router']}
  admin: 127.0.0.1:{PORTS['router_admin']}
spi:
  source: spool
  spool:
    path: {d}/spool
access_log:
  enabled: false
limits:
  max_connections: {max_conns}
""")
    p = subprocess.Popen([binary, "--config", f"{d}/router.yaml"], stderr=subprocess.DEVNULL)
    return p, PORTS["router"], PORTS["router"]


def get(port, path="/", source="127.0.0.2", timeout=2.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        c.request("GET", path, headers={"Host": HOST})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def wait_ready(port, limit=20):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            if get(port, timeout=1) == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"port {port} never answered 200")


class Probe(threading.Thread):
    """GET / every 100 ms on a new connection from 127.0.0.2, 2 s to answer."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.results = port, threading.Event(), []

    def run(self):
        while not self.stop.is_set():
            t = time.time()
            try:
                outcome = get(self.port)
            except OSError as e:
                outcome = type(e).__name__
            self.results.append((outcome, time.time() - t))
            self.stop.wait(max(0.0, 0.1 - (time.time() - t)))


SLOWHTTPTEST = {
    "H": ["-H", "-i", "10", "-x", "24", "-t", "GET", "-u", f"http://{HOST}/"],
    "B": ["-B", "-i", "10", "-x", "10", "-s", "8192", "-u", f"http://{HOST}/post"],
    "X": ["-X", "-k", "3", "-w", "1", "-y", "512", "-n", "1", "-z", "5", "-u", f"http://{HOST}/stream?chunks=16"],
}


def attack(mode, port, h2_port, seconds, conns, verbose):
    """Runs one attack until `seconds` have passed; returns how often it was started."""
    out = None if verbose else subprocess.DEVNULL
    clients = os.path.join(RELEASE, "bench-clients")
    if mode == "Z":
        subprocess.run([clients, "zero-window", f"127.0.0.1:{h2_port}", HOST, "/stream?chunks=64",
                        "4", "32", str(seconds)], stdout=out, stderr=out, timeout=seconds + 60)
        return 1
    if mode == "S":
        subprocess.run([clients, "slow-requests", f"127.0.0.1:{port}", HOST, "/slow?ms=20000",
                        "300", str(seconds)], stdout=out, stderr=out, timeout=seconds + 60)
        return 1
    # slowhttptest takes its Host from the URL, and the router routes by Host: the
    # URL names the app and `-d` sends the attack to the proxy under test, as an
    # HTTP proxy (absolute-form requests). It ends when the server has closed all
    # its connections (a head or body deadline): started again until the end.
    rounds, deadline = 0, time.time() + seconds
    while time.time() < deadline - 1:
        rounds += 1
        subprocess.run(["slowhttptest", *SLOWHTTPTEST[mode], "-d", f"127.0.0.1:{port}", "-c", str(conns),
                        "-r", "200", "-l", str(int(deadline - time.time())), "-p", "3", "-v", "1"],
                       stdout=out, stderr=out, timeout=seconds + 120)
    return rounds


def run(d, proxy, mode, seconds, conns, binary, max_conns, verbose=False):
    p, port, h2_port = start_proxy(d, proxy, binary, max_conns)
    probe = None
    rounds = 0
    try:
        wait_ready(port)
        probe = Probe(port)
        probe.start()
        rounds = attack(mode, port, h2_port, seconds, conns, verbose)
    finally:
        if probe:
            probe.stop.set()
            probe.join()
        p.terminate()
        p.wait()
    res = probe.results if probe else []
    ok = sum(1 for o, t in res if o == 200 and t <= 2.0)
    fails = {}
    for o, _ in res:
        if o != 200:
            fails[str(o)] = fails.get(str(o), 0) + 1
    slowest = max((t for _, t in res), default=0.0)
    return {"proxy": proxy, "mode": mode, "probes": len(res), "ok": ok,
            "rate": ok / len(res) if res else 0.0, "slowest_s": slowest, "fails": fails, "rounds": rounds}


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--modes", default="H,B,X,Z,S")
    ap.add_argument("--proxies", default="router,haproxy,nginx")
    ap.add_argument("--router", default=os.path.join(RELEASE, "router"), help="router binary")
    ap.add_argument("--max-connections", type=int, default=9000,
                    help="client connections the proxy accepts (router limits.max_connections, "
                         "haproxy global maxconn, nginx worker_connections)")
    ap.add_argument("--verbose", action="store_true", help="show the attack tools' own reports")
    args = ap.parse_args()
    NEEDS.tools('nginx', 'haproxy', 'slowhttptest')
    NEEDS.built('echo-backend', 'bench-clients')
    NEEDS.router(args.router)
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    for tool in ("slowhttptest", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is missing (apt-get install slowhttptest nginx-light haproxy)")
    for tool in ("echo-backend", "bench-clients"):
        if not os.path.exists(os.path.join(RELEASE, tool)):
            sys.exit(f"target/release/{tool} is missing (cargo build --release -p e2e --bins)")
    d = "/tmp/router-slow"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    backend = subprocess.Popen([os.path.join(RELEASE, "echo-backend"), f"127.0.0.1:{PORTS['backend']}"],
                               stderr=subprocess.DEVNULL)
    rows = []
    try:
        time.sleep(0.5)
        for mode in args.modes.split(","):
            for proxy in args.proxies.split(","):
                r = run(d, proxy, mode, args.seconds, args.conns, args.router, args.max_connections, args.verbose)
                rows.append(r)
                print(f"{mode} {proxy:8} probes {r['probes']:4} ok {r['rate'] * 100:6.2f} % "
                      f"slowest {r['slowest_s']:.2f} s fails {r['fails']} (attack started {r['rounds']}x)", flush=True)
    finally:
        backend.terminate()
        backend.wait()
        shutil.rmtree(d, ignore_errors=True)
    print()
    print("| attack | " + " | ".join(args.proxies.split(",")) + " |")
    print("|---|" + "---|" * len(args.proxies.split(",")))
    for mode in args.modes.split(","):
        cells = [f"{r['rate'] * 100:.2f} %" for r in rows if r["mode"] == mode]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print()
    for r in rows:
        verdict = "met" if r["rate"] >= 0.95 else "not met"
        print(f"{r['mode']} {r['proxy']}: probes answered 200 within 2 s {r['rate'] * 100:.2f} % "
              f"(target >= 95 %): {verdict}")


if __name__ == "__main__":
    main()
