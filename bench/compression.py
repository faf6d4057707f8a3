#!/usr/bin/env python3
"""Response compression's CPU: the router (an app with `compression: true`) against
nginx 1.22 with `gzip on` (gzip_comp_level 1, its default) in front of the same
backend, on the same bodies, same run.

Two bodies, both served by an nginx backend as files: an HTML page (the router's
own docs as HTML-escaped text in <pre>, about 300 KiB) and a JSON API answer
(8 000 records, about 1.3 MiB, generated from a fixed seed). For each proxy and
each coding (router: gzip, br, zstd, and none; nginx: gzip and none) one client
(h2load --h1, 4 connections) fetches the body N times with that Accept-Encoding;
the proxy's CPU (utime+stime from /proc) over the run, per MB of the body as the
backend sent it (uncompressed), is the figure. "none" is the proxying alone: the
compression's own cost is the difference. Also the bytes on the wire per body.

usage: bench/compression.py [--rounds 3] [--requests 200] [--pin] [--router BIN]
                            [--gzip-level N]

Everything listens on 127.0.0.1; every process started here is stopped by PID."""

import argparse
import html
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("bench_http", os.path.join(ROOT, "bench", "http.py"))
H = importlib.util.module_from_spec(spec)
spec.loader.exec_module(H)
spec = importlib.util.spec_from_file_location("bench_start", os.path.join(ROOT, "bench", "start.py"))
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)

P = {"backend": 18180, "nginx": 18182, "router": 18183, "router_admin": 18193}
HOST = H.HOST
CODINGS = {"router": ["none", "gzip", "br", "zstd"], "nginx": ["none", "gzip"]}


def bodies(d):
    docs = "".join(open(os.path.join(ROOT, "docs", f)).read()
                   for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md"))
    page = f"<!doctype html><html><body><pre>{html.escape(docs)}</pre></body></html>\n"
    H.write(f"{d}/www/page.html", page)
    rnd = random.Random(1)
    rows = [{"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "active": rnd.random() < 0.5,
             "score": round(rnd.random() * 100, 2), "tags": rnd.sample("abcdef", 3),
             "address": {"city": rnd.choice(["Paris", "Berlin", "Oslo", "Rome"]), "zip": f"{rnd.randint(0, 99999):05d}"}}
            for i in range(8000)]
    H.write(f"{d}/www/api.json", json.dumps(rows))
    # nginx's worker runs as another user when started as root: let it read them.
    for path in (d, f"{d}/www", f"{d}/www/page.html", f"{d}/www/api.json"):
        os.chmod(path, 0o755)
    return {"page.html": len(page.encode()), "api.json": os.path.getsize(f"{d}/www/api.json")}


def configs(d, gzip_level):
    os.makedirs(f"{d}/www", exist_ok=True)
    H.nginx_conf(d, "backend", f"""
  types {{ text/html html; application/json json; }}
  server {{
    listen 127.0.0.1:{P['backend']} backlog=4096;
    root {d}/www;
  }}""")
    H.nginx_conf(d, "nginx-gzip", f"""
  upstream backend {{ server 127.0.0.1:{P['backend']}; keepalive 64; }}
  gzip on;
  gzip_comp_level 1;
  gzip_proxied any;
  gzip_vary on;
  gzip_types application/json;
  server {{
    listen 127.0.0.1:{P['nginx']} backlog=4096;
    {H.PROXY_PASS}
  }}""")
    os.makedirs(f"{d}/router-spool", exist_ok=True)
    H.write(f"{d}/router-spool/01-bench.yaml", H.route_event(P["backend"]))
    H.write(f"{d}/router.yaml", f"""
cloud_domain: example.com
state_dir: {d}/router-state
worker_threads: 1
listen:
  http: 127.0.0.1:{P['router']}
  admin: 127.0.0.1:{P['router_admin']}
spi:
  source: spool
  spool:
    path: {d}/router-spool
health:
  checks: false
access_log:
  enabled: false
app_defaults:
  compression: true
compression:
  gzip_level: {gzip_level}
""")


def fetch(port, path, coding, n):
    """h2load --h1: n GETs of path over 4 connections; bytes of body data received."""
    args = ["h2load", "--h1", "-t1", f"-c{min(4, n)}", f"-n{n}", "-H", f":authority: {HOST}"]
    if coding != "none":
        args += ["-H", f"accept-encoding: {coding}"]
    out = subprocess.run(args + [f"http://127.0.0.1:{port}/{path}"], capture_output=True, text=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
    data = re.search(r"traffic: .*?\((\d+)\) total, .*?\((\d+)\) headers .*?, .*?\((\d+)\) data", out)
    if not done or not data:
        return {"ok": 0, "failed": n, "data": 0, "raw": out}
    return {"ok": int(done.group(1)), "failed": int(done.group(2)), "data": int(data.group(3))}


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--pin", action="store_true", help="proxy on CPU 1; client and backend on CPU 0")
    ap.add_argument("--router", default=os.path.join(ROOT, "target/release/router"))
    ap.add_argument("--gzip-level", type=int, default=2, help="the router's compression.gzip_level")
    args = ap.parse_args()
    NEEDS.tools('nginx', 'h2load')
    NEEDS.router(args.router)
    d = H.workdir("router-compression-bench-")
    configs(d, args.gzip_level)
    sizes = bodies(d)
    procs = {}
    results = {}
    try:
        procs["backend"] = subprocess.Popen(["nginx", "-c", f"{d}/backend.conf", "-p", d, "-g", "daemon off;"],
                                            stderr=subprocess.DEVNULL)
        procs["nginx"] = subprocess.Popen(["nginx", "-c", f"{d}/nginx-gzip.conf", "-p", d, "-g", "daemon off;"],
                                          stderr=subprocess.DEVNULL)
        procs["router"] = subprocess.Popen([args.router, "--config", f"{d}/router.yaml"],
                                           stdout=subprocess.DEVNULL, stderr=open(f"{d}/router.log", "w"))
        for name in ("nginx", "router"):
            deadline = time.time() + 20
            while fetch(P[name], "page.html", "none", 1)["ok"] != 1:
                if time.time() > deadline:
                    sys.exit(f"{name} never answered")
                time.sleep(0.2)
        if args.pin:
            H.pin(procs["backend"].pid, {0})
            for name in ("nginx", "router"):
                H.pin(procs[name].pid, {1})
            os.sched_setaffinity(0, {0})
        for rnd in range(args.rounds):
            for name in ("router", "nginx") if rnd % 2 == 0 else ("nginx", "router"):
                for body, size in sizes.items():
                    for coding in CODINGS[name]:
                        fetch(P[name], body, coding, 20)
                        before = H.stat_ticks(procs[name].pid)
                        r = fetch(P[name], body, coding, args.requests)
                        if r["ok"] == 0:
                            sys.exit(f"{name} {body} {coding}: nothing answered:\n{r.get('raw')}")
                        cpu = (H.stat_ticks(procs[name].pid) - before) / H.HZ
                        mb = r["ok"] * size / 1e6
                        row = {"ms_per_mb": cpu * 1000 / mb, "ratio": r["data"] / (r["ok"] * size),
                               "failed": r["failed"]}
                        results.setdefault((name, body, coding), []).append(row)
                        print(f"round {rnd} {name:6} {body:9} {coding:5} {row['ms_per_mb']:6.2f} ms CPU/MB  "
                              f"wire/plain {row['ratio']:.3f}  failed {r['failed']}", flush=True)
    finally:
        for p in procs.values():
            S.stop(p)
    med = statistics.median
    print()
    mode = "pinned (proxy CPU1; client+backend CPU0)" if args.pin else "unpinned"
    print(f"{args.rounds} rounds, {args.requests} requests of each body per coding, {mode}; "
          f"bodies: {', '.join(f'{b} {s / 1e3:.0f} kB' for b, s in sizes.items())}")
    print()
    print("| proxy | body | coding | proxy CPU ms per MB (median [range]) | compression alone (minus none) | wire / plain |")
    print("|---|---|---|---|---|---|")
    for (name, body, coding), rows in results.items():
        ms = [r["ms_per_mb"] for r in rows]
        base = med([r["ms_per_mb"] for r in results[(name, body, "none")]])
        alone = "" if coding == "none" else f"{med(ms) - base:.2f}"
        print(f"| {name} | {body} | {coding} | {med(ms):.2f} [{min(ms):.2f}–{max(ms):.2f}] | {alone} | "
              f"{med([r['ratio'] for r in rows]):.3f} |")
    print()
    for body in sizes:
        ours = med([r["ms_per_mb"] for r in results[("router", body, "gzip")]])
        theirs = med([r["ms_per_mb"] for r in results[("nginx", body, "gzip")]])
        print(f"{body}: router gzip / nginx gzip CPU per MB {ours / theirs:.2f}x")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
