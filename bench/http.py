#!/usr/bin/env python3
"""HTTP/1.1 keep-alive benchmark: our router vs haproxy 2.6 vs nginx 1.22, same backend,
same run. Method: paired ratios to the backend served directly (each round runs every
target once, order rotated), proxy CPU per request from /proc/PID/stat.

usage: bench/http.py [--rounds N] [--duration S] [--warmup S] [--connections C]
                     [--router-threads T] [--pin] [--router ROUTER_BINARY]
                     [--baseline ROUTER_BINARY]
                     [--router-extra YAML] [--baseline-extra YAML]

Needs: nginx, haproxy, wrk (bench/run.sh installs them) and a router binary (--router;
bench/run.sh builds and passes the shipped one, target/pgo/router). Everything listens on 127.0.0.1; every process started
here is stopped by PID at the end. Prints a table and writes JSON next to it."""

import argparse
import json
import importlib.util
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")
PORTS = {"backend": 18080, "haproxy": 18081, "nginx": 18082, "router": 18083, "router_admin": 18093,
         "baseline": 18084, "baseline_admin": 18094, "floor": 18085, "floor_hyper": 18086}
HOST = "ha-bench-bench.example.com"
BODY = "b" * 99 + "\n"  # 100 bytes


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
UPSTREAM = f"upstream backend {{ server 127.0.0.1:{PORTS['backend']}; keepalive 64; keepalive_requests 100000; }}"
PROXY_PASS = 'location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }'
HAPROXY_HEAD = """
global
    maxconn 9000
    nbthread 1
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
"""


def workdir(prefix):
    """A fresh directory with nginx's temp directories in it."""
    d = tempfile.mkdtemp(prefix=prefix)
    for k in TEMP_KINDS:
        os.makedirs(f"{d}/tmp-{k}", exist_ok=True)
    return d


def nginx_conf(d, name, body):
    """`d/name.conf`: one worker, no access log, long keep-alive, then `body` in http {}."""
    temp = "\n".join(f"  {k}_temp_path {d}/tmp-{k};" for k in TEMP_KINDS)
    write(f"{d}/{name}.conf", f"""
worker_processes 1;
pid {d}/{name}.pid;
error_log {d}/{name}.err warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 100000;
{temp}
{body}
}}
""")


def configs(d):
    nginx_conf(d, "backend", f"""
  server {{
    listen 127.0.0.1:{PORTS['backend']} backlog=4096;
    location / {{ default_type text/plain; return 200 "{BODY[:-1]}\\n"; }}
  }}""")
    nginx_conf(d, "nginx-proxy", f"""
  {UPSTREAM}
  server {{
    listen 127.0.0.1:{PORTS['nginx']} backlog=4096;
    {PROXY_PASS}
  }}""")
    write(f"{d}/haproxy.cfg", HAPROXY_HEAD + f"""
frontend fe_http
    bind 127.0.0.1:{PORTS['haproxy']}
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{PORTS['backend']}
""")
    for spool in ("router-spool", "baseline-spool"):
        os.makedirs(f"{d}/{spool}", exist_ok=True)
        write(f"{d}/{spool}/01-bench.yaml", ROUTE_EVENT)


def route_event(port, gear="5464c9f6e0b8cd5a6e000001", action="add_public_endpoint", app="bench", ns="bench"):
    """The routing event that routes `app` (the bench app by default) to a backend on `port`."""
    return f"""---
:action: :{action}
:app_name: {app}
:namespace: {ns}
:gear_id: {gear}
:public_port_name: haproxy-1.4
:public_address: 127.0.0.1
:public_port: {port}
:protocols:
- http
:types:
- load_balancer
:mappings: []
"""


ROUTE_EVENT = route_event(PORTS['backend'])


def router_config(d, threads, name="router", extra=""):
    write(f"{d}/{name}.yaml", f"""
cloud_domain: example.com
state_dir: {d}/{name}-state
worker_threads: {threads}
listen:
  http: 127.0.0.1:{PORTS[name]}
  admin: 127.0.0.1:{PORTS[name + '_admin']}
spi:
  source: spool
  spool:
    path: {d}/{name}-spool
access_log:
  enabled: false
{extra}""")


def stat_ticks(pid):
    """utime+stime of a process and its live children (all threads included)."""
    return sum(user_system_ticks(pid))


def user_system_ticks(pid):
    """(utime, stime) of a process and its live children (all threads included)."""
    user = system = 0
    for p in [pid] + children(pid):
        try:
            s = open(f"/proc/{p}/stat").read()
        except FileNotFoundError:
            continue
        f = s[s.rindex(")") + 2:].split()
        user, system = user + int(f[11]), system + int(f[12])
    return user, system


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = open(f"/proc/{d}/stat").read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(s[s.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d))
    return out


def wait_port(port, host_header=None, limit=20):
    deadline = time.time() + limit
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Host: {host_header or 'x'}",
                            f"http://127.0.0.1:{port}/"], capture_output=True, text=True)
        if r.stdout == "200":
            return
        time.sleep(0.1)
    sys.exit(f"port {port} never answered 200")


def wrk(port, seconds, conns, threads=1):
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency", "-H", f"Host: {HOST}",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True).stdout
    req = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    p50 = re.search(r"50%\s+([\d.]+)(\w+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(\w+)", out)

    def ms(m):
        v, unit = float(m.group(1)), m.group(2)
        return v * {"us": 0.001, "ms": 1, "s": 1000}[unit]
    return {"requests": req, "rps": rps, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": sum(map(int, errors.groups())) if errors else 0, "p50_ms": ms(p50), "p99_ms": ms(p99)}


def perf_record(pid, out_dir, target, rnd):
    """`perf record` of `pid` while it is measured, or None without --perf. Its own
    cost lands on the measured process's CPU figure too: compare figures of runs with
    --perf only with each other."""
    if not out_dir:
        return None
    os.makedirs(out_dir, exist_ok=True)
    return subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-p", ",".join(map(str, [pid] + children(pid))),
                             "-o", f"{out_dir}/{target}-{rnd}.data"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pin(pid, cpus):
    for p in [pid] + children(pid):
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                os.sched_setaffinity(int(t), cpus)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--router-threads", type=int, default=1)
    ap.add_argument("--router-extra", default="", metavar="YAML",
                    help="more router configuration (top-level keys; \\n for newlines), e.g. "
                         "'upstream:\\n  source_share: 50'")
    ap.add_argument("--baseline-extra", default="", metavar="YAML",
                    help="the same for the baseline (e.g. the same binary without --router-extra's setting)")
    ap.add_argument("--pin", action="store_true", help="proxy on CPU 1; wrk and backend on CPU 0")
    ap.add_argument("--perf", metavar="DIR",
                    help="also record each measured run with `perf record -e cpu-clock -g` into "
                         "DIR/TARGET-ROUND.data (read with `perf report -i ... --no-children --sort sym`)")
    ap.add_argument("--router", metavar="ROUTER_BINARY", default=os.path.join(ROOT, "target/release/router"),
                    help="the router binary to measure (bench/run.sh passes the shipped, profile-guided "
                         "one: target/pgo/router from deploy/pgo.sh)")
    ap.add_argument("--baseline", metavar="ROUTER_BINARY",
                    help="also run this router binary (e.g. built from an older commit) as target 'baseline', "
                         "to tell a regression from this machine's noise")
    ap.add_argument("--floor", action="store_true",
                    help="also run target/release/bench-h1-floor (a bare httparse proxy: what a native "
                         "HTTP/1 path could reach here) as target 'floor'")
    ap.add_argument("--floor-hyper", action="store_true",
                    help="also run bench-h1-floor --hyper (the same with hyper's HTTP/1 server in front: "
                         "what hyper's server costs per request) as target 'floor_hyper'")
    args = ap.parse_args()
    NEEDS.tools('nginx', 'haproxy', 'wrk', 'curl')
    NEEDS.router(args.router)
    if args.floor or args.floor_hyper:
        NEEDS.built('bench-h1-floor')

    router_bin = args.router
    if not os.path.exists(router_bin):
        sys.exit(f"build first: {router_bin} is missing (bash deploy/pgo.sh, or cargo build --release -p router)")
    d = workdir("router-bench-")
    configs(d)
    router_config(d, args.router_threads, extra=args.router_extra.replace("\\n", "\n"))
    if args.baseline:
        router_config(d, args.router_threads, "baseline", extra=args.baseline_extra.replace("\\n", "\n"))
    procs = {}
    try:
        procs["backend"] = subprocess.Popen(["nginx", "-c", f"{d}/backend.conf", "-p", d, "-g", "daemon off;"],
                                            stderr=subprocess.DEVNULL)
        procs["nginx"] = subprocess.Popen(["nginx", "-c", f"{d}/nginx-proxy.conf", "-p", d, "-g", "daemon off;"],
                                          stderr=subprocess.DEVNULL)
        procs["haproxy"] = subprocess.Popen(["haproxy", "-W", "-db", "-f", f"{d}/haproxy.cfg"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs["router"] = subprocess.Popen([router_bin, "--config", f"{d}/router.yaml"],
                                           stdout=subprocess.DEVNULL, stderr=open(f"{d}/router.log", "w"))
        if args.baseline:
            procs["baseline"] = subprocess.Popen([args.baseline, "--config", f"{d}/baseline.yaml"],
                                                 stdout=subprocess.DEVNULL, stderr=open(f"{d}/baseline.log", "w"))
            wait_port(PORTS["baseline"], HOST)
        if args.floor:
            procs["floor"] = subprocess.Popen([os.path.join(ROOT, "target/release/bench-h1-floor"),
                                               f"127.0.0.1:{PORTS['floor']}", f"127.0.0.1:{PORTS['backend']}"],
                                              stdout=subprocess.DEVNULL, stderr=open(f"{d}/floor.log", "w"))
            wait_port(PORTS["floor"], HOST)
        if args.floor_hyper:
            procs["floor_hyper"] = subprocess.Popen([os.path.join(ROOT, "target/release/bench-h1-floor"),
                                                     f"127.0.0.1:{PORTS['floor_hyper']}",
                                                     f"127.0.0.1:{PORTS['backend']}", "--hyper"],
                                                    stdout=subprocess.DEVNULL, stderr=open(f"{d}/floor_hyper.log", "w"))
            wait_port(PORTS["floor_hyper"], HOST)
        wait_port(PORTS["backend"])
        wait_port(PORTS["nginx"])
        wait_port(PORTS["haproxy"])
        wait_port(PORTS["router"], HOST)
        if args.pin:
            pin(procs["backend"].pid, {0})
            for name in ("nginx", "haproxy", "router", "baseline", "floor", "floor_hyper"):
                if name in procs:
                    pin(procs[name].pid, {1})
            os.sched_setaffinity(0, {0})

        targets = ["direct", "router", "haproxy", "nginx"] + (["baseline"] if args.baseline else []) \
            + (["floor"] if args.floor else []) + (["floor_hyper"] if args.floor_hyper else [])
        results = {t: [] for t in targets}
        for rnd in range(args.rounds):
            order = targets[rnd % len(targets):] + targets[:rnd % len(targets)]
            for t in order:
                port = PORTS["backend"] if t == "direct" else PORTS[t]
                wrk(port, args.warmup, args.connections)
                pid = procs["backend"].pid if t == "direct" else procs[t].pid
                (u0, s0), tb = user_system_ticks(pid), time.time()
                perf = perf_record(pid, args.perf, t, rnd)
                r = wrk(port, args.duration, args.connections)
                if perf:
                    perf.send_signal(signal.SIGINT)
                    perf.wait()
                u1, s1 = user_system_ticks(pid)
                cpu_s = (u1 - u0 + s1 - s0) / HZ
                r["cpu_us_per_req"] = cpu_s / r["requests"] * 1e6
                r["user_us_per_req"] = (u1 - u0) / HZ / r["requests"] * 1e6
                r["core_busy"] = cpu_s / (time.time() - tb)
                r["round"] = rnd
                results[t].append(r)
                print(f"round {rnd} {t:8} {r['rps']:>10.0f} req/s  cpu {r['cpu_us_per_req']:5.1f} us/req  "
                      f"(user {r['user_us_per_req']:4.1f})  busy {r['core_busy']:.0%}  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
                      f"errors {r['errors']} non2xx {r['non2xx']}", flush=True)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)

    def med(xs):
        return statistics.median(xs)

    print()
    mode = "pinned (proxy CPU1; wrk+backend CPU0)" if args.pin else "unpinned (all share 2 cores)"
    print(f"HTTP/1.1 keep-alive, 100 B body, wrk -t1 -c{args.connections} -d{args.duration}s after {args.warmup}s "
          f"warm-up, {args.rounds} rounds, {mode}; router worker_threads={args.router_threads}")
    print()
    print("| target | req/s median [min-max] | ratio to direct (paired, median) | proxy CPU us/req median [min-max] | of it user | core busy | p50 / p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for t in targets:
        rs = results[t]
        rps = [r["rps"] for r in rs]
        ratios = [r["rps"] / results["direct"][i]["rps"] for i, r in enumerate(rs)]
        cpu = [r["cpu_us_per_req"] for r in rs]
        summary[t] = {"rps": med(rps), "ratio": med(ratios), "cpu_us_per_req": med(cpu)}
        label = "backend" if t == "direct" else "proxy"
        print(f"| {t} | {med(rps):.0f} [{min(rps):.0f}-{max(rps):.0f}] | {med(ratios):.2f} | "
              f"{med(cpu):.1f} [{min(cpu):.1f}-{max(cpu):.1f}] ({label}) | {med([r['user_us_per_req'] for r in rs]):.1f} | {med([r['core_busy'] for r in rs]):.0%} | "
              f"{med([r['p50_ms'] for r in rs]):.2f} / {med([r['p99_ms'] for r in rs]):.2f} | "
              f"{sum(r['errors'] + r['non2xx'] for r in rs)} |")
    print()
    for p in ("haproxy", "nginx") + (("baseline",) if args.baseline else ()) + (("floor",) if args.floor else ()) \
            + (("floor_hyper",) if args.floor_hyper else ()):
        print(f"router vs {p}: throughput ratio {summary['router']['ratio'] / summary[p]['ratio']:.2f}x, "
              f"CPU per request {summary['router']['cpu_us_per_req'] / summary[p]['cpu_us_per_req']:.2f}x")
    out = os.path.join(ROOT, "bench", "last-http.json")
    with open(out, "w") as f:
        json.dump({"args": vars(args), "results": results, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
