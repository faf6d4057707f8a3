#!/usr/bin/env python3
"""Health-check cost: a router with N members (one app each, default 10000), each a
real HTTP listener on 127.0.0.1 (one asyncio process holds them all and answers
`200`), active checks at the default 5 s interval. Measures the router's CPU over a
window after the start-up spread, against the same router with checks off, and
counts the checks from the router's own metrics.

usage: bench/health.py [--members N] [--seconds S]   (bench/health.sh builds first)"""

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")
BASE = 30000


def ticks(pid):
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])


def metric(admin, name):
    # curl, not urllib: bench/http.py next to this file shadows the stdlib's http.
    r = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{admin}/metrics"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ConnectionError("admin not answering")
    text = r.stdout
    m = re.search(rf"^{re.escape(name)} ([\d.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def serve(n):
    """The members: n listeners answering every request with a small 200."""
    async def handle(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
        except Exception:
            pass
        writer.close()

    async def main():
        servers = [await asyncio.start_server(handle, "127.0.0.1", BASE + i, backlog=64) for i in range(n)]
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.gather(*(s.serve_forever() for s in servers))
    asyncio.run(main())


def run_router(d, n, checks, seconds, settle):
    state = f"{d}/state-{checks}"
    subprocess.run([os.path.join(ROOT, "target/release/bench-members"), state, str(n), str(BASE)],
                   check=True, stderr=subprocess.DEVNULL)
    admin = 18096
    with open(f"{d}/router-{checks}.yaml", "w") as f:
        f.write(f"""
cloud_domain: example.com
state_dir: {state}
worker_threads: 1
listen:
  http: 127.0.0.1:18086
  admin: 127.0.0.1:{admin}
spi:
  source: none
health:
  checks: {str(checks).lower()}
access_log:
  enabled: false
""")
    p = subprocess.Popen([os.path.join(ROOT, "target/release/router"), "--config", f"{d}/router-{checks}.yaml"],
                         stdout=subprocess.DEVNULL, stderr=open(f"{d}/router-{checks}.log", "w"))
    try:
        deadline = time.time() + 60
        while True:
            try:
                metric(admin, "router_apps")
                break
            except Exception:
                if time.time() > deadline:
                    sys.exit("router did not start")
                time.sleep(0.2)
        time.sleep(settle)
        c0, t0 = ticks(p.pid), time.time()
        k0 = metric(admin, 'router_health_checks_total{result="pass"}') + \
            metric(admin, 'router_health_checks_total{result="fail"}')
        time.sleep(seconds)
        cpu = (ticks(p.pid) - c0) / HZ
        wall = time.time() - t0
        k1 = metric(admin, 'router_health_checks_total{result="pass"}')
        fails = metric(admin, 'router_health_checks_total{result="fail"}')
        up = metric(admin, "router_backend_recoveries_total")
        rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{p.pid}/status").read()).group(1))
        return {"cpu_share": cpu / wall, "checks": (k1 + fails - k0), "fails": fails, "wall": wall,
                "rss_mib": rss / 1024, "recoveries": up}
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args()
    if args.members > 20000:
        sys.exit("at most 20000 members (one port each)")
    d = tempfile.mkdtemp(prefix="router-health-bench-")
    backend = subprocess.Popen([sys.executable, __file__, "--serve", str(args.members)], stdout=subprocess.PIPE)
    try:
        if backend.stdout.readline().strip() != b"ready":
            sys.exit("members did not start")
        res = {}
        for checks in (False, True):
            res[checks] = run_router(d, args.members, checks, args.seconds, settle=8)
            r = res[checks]
            print(f"checks={checks!s:5}  router CPU {r['cpu_share']:.1%} of a core  checks {r['checks']:.0f} "
                  f"({r['checks'] / r['wall']:.0f}/s, failed {r['fails']:.0f})  RSS {r['rss_mib']:.0f} MiB", flush=True)
        on, off = res[True], res[False]
        per = (on["cpu_share"] - off["cpu_share"]) * on["wall"] / max(on["checks"], 1) * 1e6
        print()
        print(f"| members | checks/s | router CPU, checks on | checks off | CPU per check | failed | RSS on / off |")
        print(f"|---|---|---|---|---|---|---|")
        print(f"| {args.members} | {on['checks'] / on['wall']:.0f} | {on['cpu_share']:.1%} | {off['cpu_share']:.1%} | "
              f"{per:.0f} µs | {on['fails']:.0f} | {on['rss_mib']:.0f} / {off['rss_mib']:.0f} MiB |")
    finally:
        backend.send_signal(signal.SIGTERM)
        backend.wait(timeout=10)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        main()
