#!/usr/bin/env python3
"""The port proxy against haproxy's `mode tcp` on the axes that do not move
between hosts: user-space instructions (callgrind) and system calls (strace -c)
per short relayed connection, as bench/instructions.py does for the router.

Each proxy relays to one `bench-tcp serve` backend; `bench-tcp short` makes
short connections through it, 32 at once (connect, 100 bytes out, 100 back,
closed with a reset by the client), as `bench/portproxy.py` does for CPU. Each
proxy runs twice under the counter, the load lasting S1 then S2 seconds, from
its start to its exit; per connection = (count 2 - count 1) / (connections 2 -
connections 1), so start-up and shut-down cancel out.

usage: python3 bench/portproxy_calls.py [--s1 2] [--s2 6] [--syscalls] [--portproxy BIN]"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")
PORTS = {"backend": 19180, "portproxy": 19181, "haproxy": 19182}

_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)
C = NEEDS.sibling("counted")


def short(port, secs):
    """`bench-tcp short` through `port` for `secs`: the connections it made."""
    out = subprocess.run([f"{REL}/bench-tcp", "short", f"127.0.0.1:{port}", str(secs), "32"],
                         capture_output=True, text=True, check=True).stdout
    said = {k: float(v) for k, v in (l.split() for l in out.splitlines() if len(l.split()) == 2)}
    return int(said["conns"])


def counted(cmd, port, secs, out, syscalls):
    """The count of `cmd` relaying short connections on `port` for `secs`,
    start to exit, and how many connections it relayed."""
    p = subprocess.Popen(C.wrapped(out, syscalls) + cmd, stdout=subprocess.DEVNULL, stderr=open(f"{out}.stderr", "w"))
    try:
        C.wait_tcp(port, 120)
        conns = short(port, secs)
    finally:
        C.stop(p, syscalls)
    counted = C.total(out, syscalls)
    if counted is None:
        sys.exit(f"no totals in {out}")
    return counted, conns


def configs(tmp, portproxy):
    """The two proxies' command lines (the portproxy's port mapping saved first)."""
    cfg = os.path.join(tmp, "pp.yaml")
    with open(cfg, "w") as f:
        f.write(f"state_dir: {tmp}/state\nadmin_socket: {tmp}/admin.sock\n"
                f"limits:\n  unlimited_sources: [127.0.0.1/32]\n"
                f"gear:\n  bind: 127.0.0.1\n  ports: 1024-65535\n")
    first = subprocess.Popen([portproxy, "-c", cfg], stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while not os.path.exists(f"{tmp}/admin.sock") and time.time() < deadline:
        time.sleep(0.1)
    subprocess.run([portproxy, "-c", cfg, "add", str(PORTS["portproxy"]), f"127.0.0.1:{PORTS['backend']}"],
                   check=True, stdout=subprocess.DEVNULL)
    first.terminate()
    first.wait(timeout=30)
    hcfg = os.path.join(tmp, "haproxy.cfg")
    with open(hcfg, "w") as f:
        f.write(f"global\n  maxconn 9000\n  nbthread 1\ndefaults\n  mode tcp\n  timeout connect 5s\n"
                f"  timeout client 60s\n  timeout server 60s\nlisten l\n  bind 127.0.0.1:{PORTS['haproxy']}\n"
                f"  server s 127.0.0.1:{PORTS['backend']}\n")
    return {"portproxy": [portproxy, "-c", cfg], "haproxy": ["haproxy", "-db", "-f", hcfg]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--s1", type=int, default=2)
    ap.add_argument("--s2", type=int, default=6)
    ap.add_argument("--syscalls", action="store_true", help="count system calls (strace -c) instead")
    ap.add_argument("--portproxy", default=os.path.join(REL, "portproxy"))
    ap.add_argument("--keep", help="copy each run's callgrind or strace output into this directory")
    a = ap.parse_args()
    NEEDS.tools("haproxy", "valgrind", "strace")
    NEEDS.built("bench-tcp")
    NEEDS.router(a.portproxy, "portproxy")
    tmp = tempfile.mkdtemp(prefix="pp-calls-")
    backend = subprocess.Popen([f"{REL}/bench-tcp", "serve", f"127.0.0.1:{PORTS['backend']}"],
                               stderr=subprocess.DEVNULL)
    try:
        C.wait_tcp(PORTS["backend"])
        per = {}
        what = "system calls" if a.syscalls else "instructions"
        for name, cmd in configs(tmp, a.portproxy).items():
            c1, n1 = counted(cmd, PORTS[name], a.s1, f"{tmp}/{name}-1.out", a.syscalls)
            c2, n2 = counted(cmd, PORTS[name], a.s2, f"{tmp}/{name}-2.out", a.syscalls)
            per[name] = (c2 - c1) / (n2 - n1)
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                for i in (1, 2):
                    shutil.copy(f"{tmp}/{name}-{i}.out", a.keep)
            line = f"{name}: {per[name]:,.1f} {what} per connection (total {c1:,} at {n1}, {c2:,} at {n2})"
            if a.syscalls:
                names1, names2 = C.by_name(f"{tmp}/{name}-1.out"), C.by_name(f"{tmp}/{name}-2.out")
                diff = {k: (names2.get(k, 0) - names1.get(k, 0)) / (n2 - n1) for k in names2}
                line += "\n  " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(diff.items(), key=lambda kv: -kv[1])
                                           if v >= 0.01)
            print(line, flush=True)
        ratio = per["portproxy"] / per["haproxy"]
        print(f"portproxy / haproxy: {ratio:.3f}x ({'met' if ratio <= 1.0 else 'not met'}: <= 1.0x asked)")
    finally:
        backend.terminate()
        backend.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
