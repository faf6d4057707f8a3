#!/usr/bin/env python3
"""Spans over OTLP (`traces.*`): what they cost a request, and what a collector in
trouble costs.

1. Instructions per request (callgrind, bench/instructions.py) with spans off, on at
   a 1 % sample ratio and on at 100 %, the collector (tests/otlp/receiver.py, the
   reference protobufs) taking every batch.
2. Latency (bench-clients open-loop: 5000 req/s over 50 keep-alive connections)
   with spans off, on at 100 % with a collector that answers, and on at 100 % with
   one that hangs (takes the request, never answers): p50/p99/p99.9 and what the
   router counted as exported and dropped.

usage: bench/traces.py [--seconds 10] [--rounds 3] [--skip-instructions]
Needs target/release/{router,echo-backend,bench-clients}, valgrind, and the
virtualenv tests/run.sh makes (target/h3-venv with opentelemetry-proto).
Everything listens on 127.0.0.1; every process started here is stopped by PID."""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")
PY = os.path.join(ROOT, "target", "h3-venv", "bin", "python3")
HOST = "ha-bench-bench.example.com"
spec = importlib.util.spec_from_file_location("bench_start", os.path.join(ROOT, "bench", "start.py"))
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)
stop = S.stop
P = {"backend": 18280, "router": 18283, "admin": 18293}


def receiver(mode):
    """tests/otlp/receiver.py MODE; the process and its port."""
    proc = subprocess.Popen([PY, os.path.join(ROOT, "tests", "otlp", "receiver.py"), mode],
                            stdout=subprocess.PIPE, text=True)
    port = json.loads(proc.stdout.readline())["port"]
    # Its span lines are not read: let them go nowhere.
    subprocess.Popen(["cat"], stdin=proc.stdout, stdout=subprocess.DEVNULL)
    return proc, port


def traces_yaml(port, ratio):
    return (f"traces:\n  endpoint: http://127.0.0.1:{port}/v1/traces\n  sample_ratio: {ratio}\n"
            "  timeout: 2s\n")


def instructions(port):
    """bench/instructions.py with spans off, 1 %, 100 %: its output."""
    variants = ["", traces_yaml(port, 0.01), traces_yaml(port, 1.0)]
    args = [sys.executable, os.path.join(ROOT, "bench", "instructions.py")]
    for v in variants:
        args += ["--config", v]
    return subprocess.run(args, capture_output=True, text=True).stdout


def router_up(d, extra):
    os.makedirs(f"{d}/spool", exist_ok=True)
    with open(f"{d}/spool/01-bench.yaml", "w") as f:
        f.write(f"""---
:action: :add_public_endpoint
:app_name: bench
:namespace: bench
:gear_id: 5464c9f6e0b8cd5a6e000001
:public_port_name: haproxy-1.4
:public_address: 127.0.0.1
:public_port: {P['backend']}
:protocols:
- http
:types:
- load_balancer
:mappings: []
""")
    shutil.rmtree(f"{d}/state", ignore_errors=True)
    with open(f"{d}/router.yaml", "w") as f:
        f.write(f"""cloud_domain: example.com
state_dir: {d}/state
worker_threads: 1
listen:
  http: 127.0.0.1:{P['router']}
  admin: 127.0.0.1:{P['admin']}
spi:
  source: spool
  spool:
    path: {d}/spool
health:
  checks: false
access_log:
  enabled: false
{extra}""")
    proc = subprocess.Popen([os.path.join(REL, "router"), "--config", f"{d}/router.yaml"],
                            stdout=subprocess.DEVNULL, stderr=open(f"{d}/router.log", "a"))
    deadline = time.time() + 20
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Host: {HOST}",
                            f"http://127.0.0.1:{P['router']}/"], capture_output=True, text=True)
        if r.stdout == "200":
            return proc
        time.sleep(0.1)
    sys.exit("the router never answered 200")


def counted(name):
    m = subprocess.run(["curl", "-s", f"http://127.0.0.1:{P['admin']}/metrics"], capture_output=True,
                       text=True).stdout
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", m, re.M))


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-instructions", action="store_true")
    args = ap.parse_args()
    NEEDS.tools('valgrind', 'curl')
    NEEDS.built('echo-backend', 'bench-clients')
    NEEDS.built('router')
    d = tempfile.mkdtemp(prefix="router-traces-bench-")
    ok, ok_port = receiver("ok")
    hang, hang_port = receiver("hang")
    backend = subprocess.Popen([os.path.join(REL, "echo-backend"), f"127.0.0.1:{P['backend']}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not args.skip_instructions:
            print(instructions(ok_port), flush=True)
        variants = (("off", ""), ("100 %, collector answers", traces_yaml(ok_port, 1.0)),
                    ("100 %, collector hangs", traces_yaml(hang_port, 1.0)))
        res = {name: [] for name, _ in variants}
        for rnd in range(args.rounds):
            for name, extra in variants:
                router = router_up(d, extra)
                try:
                    out = subprocess.run([os.path.join(REL, "bench-clients"), "open-loop",
                                          f"127.0.0.1:{P['router']}", HOST, "5000", "50", str(args.seconds)],
                                         capture_output=True, text=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    time.sleep(2.5)  # the last batch's export (or its timeout) settles
                    r["exported"] = counted("router_trace_spans_exported_total")
                    r["dropped"] = counted("router_trace_spans_dropped_total")
                finally:
                    stop(router)
                res[name].append(r)
                print(f"round {rnd} {name:26} p50 {r['p50_us']:5d} us  p99 {r['p99_us']:5d} us  "
                      f"p99.9 {r['p999_us']:5d} us  ok {r['ok']} errors {r['errors']}  "
                      f"spans exported {r['exported']:.0f} dropped {r['dropped']:.0f}", flush=True)
    finally:
        for p in (backend, ok, hang):
            stop(p)
        shutil.rmtree(d, ignore_errors=True)
    med = statistics.median
    print()
    print(f"open loop 5000 req/s, 50 connections, {args.seconds} s, {args.rounds} rounds (median [range]):")
    print()
    print("| spans | p50 µs | p99 µs | p99.9 µs | errors | spans exported | spans dropped |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in res.items():
        col = lambda k: f"{med([r[k] for r in rows]):.0f} [{min(r[k] for r in rows):.0f}–{max(r[k] for r in rows):.0f}]"
        print(f"| {name} | {col('p50_us')} | {col('p99_us')} | {col('p999_us')} | "
              f"{sum(r['errors'] for r in rows)} | {col('exported')} | {col('dropped')} |")


if __name__ == "__main__":
    main()
