#!/usr/bin/env python3
"""Slow-client attacks (slowhttptest -H / -B / -X) against the router and haproxy, one
at a time, on the same nginx backend, while a probe keeps asking for a page (issue 15).

For each proxy and attack: the proxy starts fresh, slowhttptest runs SECONDS with CONNS
connections from 127.0.0.1, and a probe client on 127.0.0.2 (another address, as a
real user would be) sends GET / every 100 ms on a new connection with a 3 s timeout.
Prints per run the probe's success rate, its slowest answer and what failed.

  -H  slow headers (slowloris): heads that never end
  -B  slow body (R-U-Dead-Yet): POST /post, Content-Length 8192, a few bytes per 10 s
  -X  slow read: GET /big (1 MiB) with a receive window of 1-512 bytes, read 5 B/s

usage: bench/slow.py [--seconds 60] [--conns 1000] [--modes H,B,X]
                     [--proxies router,haproxy] [--router BIN] [--max-connections N]
                     [--verbose]

Needs: slowhttptest, nginx, haproxy (bench/run.sh installs the last two) and
target/release/router. Every process started here is stopped by PID at the end."""

import os
import sys

# bench/http.py would shadow the standard library's http package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import http.client  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "ha-bench-bench.example.com"
PORTS = {"backend": 18280, "haproxy": 18281, "router": 18283, "router_admin": 18293}


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def backend_conf(d):
    temp = "\n".join(f"  {k}_temp_path {d}/tmp-{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(f"{d}/tmp-{k}", exist_ok=True)
    os.makedirs(f"{d}/www", exist_ok=True)
    with open(f"{d}/www/big", "wb") as f:
        f.write(b"x" * (1 << 20))
    write(f"{d}/backend.conf", f"""
worker_processes 1;
pid {d}/backend.pid;
error_log {d}/backend.err warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 100000;
{temp}
  server {{
    listen 127.0.0.1:{PORTS['backend']} backlog=4096;
    location = / {{ default_type text/plain; return 200 "ok\\n"; }}
    location = /big {{ root {d}/www; }}
    # Reads the whole body (as an application would) before answering.
    location = /post {{ proxy_pass http://127.0.0.1:{PORTS['backend']}/; }}
  }}
}}
""")


HAPROXY = """
global
    maxconn {maxconn}
    nbthread 2
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 60s
    option http-keep-alive
frontend fe_http
    bind 127.0.0.1:{haproxy}
    default_backend be
backend be
    server s1 127.0.0.1:{backend}
"""

ROUTE_EVENT = f"""---
:action: :add_public_endpoint
:app_name: bench
:namespace: bench
:gear_id: 5464c9f6e0b8cd5a6e000001
:public_port_name: haproxy-1.4
:public_address: 127.0.0.1
:public_port: {PORTS['backend']}
:protocols:
- http
:types:
- load_balancer
:mappings: []
"""


def start_proxy(d, name, binary, max_conns):
    if name == "haproxy":
        write(f"{d}/haproxy.cfg", HAPROXY.format(maxconn=max_conns, **PORTS))
        return subprocess.Popen(["haproxy", "-f", f"{d}/haproxy.cfg"], stderr=subprocess.DEVNULL), PORTS["haproxy"]
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
upstream:
  source_share: 50
limits:
  max_connections: {max_conns}
""")
    return subprocess.Popen([binary, "--config", f"{d}/router.yaml"], stderr=subprocess.DEVNULL), PORTS["router"]


def get(port, path="/", source="127.0.0.2", timeout=3.0):
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
    """GET / every 100 ms on a new connection from 127.0.0.2."""

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


ATTACKS = {
    "H": ["-H", "-i", "10", "-x", "24", "-t", "GET", "-u", f"http://{HOST}/"],
    "B": ["-B", "-i", "10", "-x", "10", "-s", "8192", "-u", f"http://{HOST}/post"],
    "X": ["-X", "-k", "3", "-w", "1", "-y", "512", "-n", "1", "-z", "5", "-u", f"http://{HOST}/big"],
}


def run(d, proxy, mode, seconds, conns, binary, max_conns, verbose=False):
    p, port = start_proxy(d, proxy, binary, max_conns)
    probe = None
    attack = None
    rounds = 0
    try:
        wait_ready(port)
        probe = Probe(port)
        probe.start()
        # slowhttptest takes its Host from the URL, and the router routes by Host
        # (an unknown one is a quick 404): the URL names the app and `-d` sends the
        # attack to the proxy under test, as an HTTP proxy (absolute-form requests).
        # slowhttptest ends when the server has closed all its connections (a head
        # or body deadline): it starts again until SECONDS have passed.
        deadline = time.time() + seconds
        while time.time() < deadline - 1:
            rounds += 1
            attack = subprocess.Popen(
                ["slowhttptest", *ATTACKS[mode], "-d", f"127.0.0.1:{port}", "-c", str(conns), "-r", "200",
                 "-l", str(int(deadline - time.time())), "-p", "3", "-v", "1"],
                stdout=None if verbose else subprocess.DEVNULL, stderr=None if verbose else subprocess.DEVNULL)
            attack.wait(timeout=seconds + 120)
    finally:
        if probe:
            probe.stop.set()
            probe.join()
        if attack and attack.poll() is None:
            attack.kill()
            attack.wait()
        p.terminate()
        p.wait()
    res = probe.results if probe else []
    ok = sum(1 for o, _ in res if o == 200)
    fails = {}
    for o, _ in res:
        if o != 200:
            fails[str(o)] = fails.get(str(o), 0) + 1
    slowest = max((t for _, t in res), default=0.0)
    return {"proxy": proxy, "mode": mode, "probes": len(res), "ok": ok,
            "rate": ok / len(res) if res else 0.0, "slowest_s": slowest, "fails": fails, "rounds": rounds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--modes", default="H,B,X")
    ap.add_argument("--proxies", default="router,haproxy")
    ap.add_argument("--router", default=os.path.join(ROOT, "target/release/router"), help="router binary")
    ap.add_argument("--max-connections", type=int, default=9000,
                    help="client connections the proxy accepts (router limits.max_connections, "
                         "haproxy global maxconn); below --conns the attack fills it")
    ap.add_argument("--verbose", action="store_true", help="show slowhttptest's own report")
    args = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    for tool in ("slowhttptest", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is missing (apt-get install slowhttptest nginx-light haproxy)")
    d = "/tmp/router-slow"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    backend_conf(d)
    nginx = subprocess.Popen(["nginx", "-c", f"{d}/backend.conf", "-g", "daemon off;"], stderr=subprocess.DEVNULL)
    rows = []
    try:
        time.sleep(0.5)
        for mode in args.modes.split(","):
            for proxy in args.proxies.split(","):
                r = run(d, proxy, mode, args.seconds, args.conns, args.router, args.max_connections, args.verbose)
                rows.append(r)
                print(f"-{mode} {proxy:8} probes {r['probes']:4} ok {r['rate'] * 100:6.2f} % "
                      f"slowest {r['slowest_s']:.2f} s fails {r['fails']} (slowhttptest started {r['rounds']}x)", flush=True)
    finally:
        nginx.terminate()
        nginx.wait()
        shutil.rmtree(d, ignore_errors=True)
    print()
    for r in rows:
        verdict = "met" if r["rate"] >= 0.99 else "not met"
        print(f"slowhttptest -{r['mode']} -c {args.conns}, {r['proxy']}: probe success {r['rate'] * 100:.2f} % "
              f"(target >= 99 %): {verdict}")


if __name__ == "__main__":
    main()
