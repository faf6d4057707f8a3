#!/usr/bin/env python3
"""RSS of the router after connection storms (freed heap must go back to the system).

Starts target/release/router (spool off, 2 worker threads) on 127.0.0.1:18183, then
ROUNDS times opens CONNS client connections that each send half a request head (held
open by the router), closes them all, and prints the router's RSS with them open and
after they closed; finally the RSS WAIT seconds after the last round (the router
returns freed heap to the system at most every 30 s after a storm, see
router/src/memory.rs). Usage: python3 bench/memory.py [--rounds 7] [--conns 5000]
[--wait 35] [ENV=VALUE ...] (e.g. MALLOC_ARENA_MAX=1 to compare allocator settings).
"""
import os, sys
# bench/http.py would shadow the standard library's `http` (urllib needs it).
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import argparse, resource, shutil, socket, subprocess, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--conns", type=int, default=5000)
ap.add_argument("--wait", type=int, default=35)
ap.add_argument("--router", help="the router binary (default: target/release/router)")
ap.add_argument("env", nargs="*")
args = ap.parse_args()
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = args.router or os.path.join(ROOT, "target/release/router")
if not os.path.exists(binary):
    sys.exit("build first: cargo build --release -p router")
env = dict(os.environ)
for kv in args.env:
    k, v = kv.split("=", 1)
    env[k] = v
d = tempfile.mkdtemp(prefix="router-memory-")
with open(f"{d}/r.yaml", "w") as f:
    f.write(f"cloud_domain: example.com\nstate_dir: {d}/state\nworker_threads: 2\n"
            "listen:\n  http: 127.0.0.1:18183\n  admin: 127.0.0.1:18193\nspi:\n  source: none\n")
p = subprocess.Popen([binary, "--config", f"{d}/r.yaml"], env=env, stderr=subprocess.DEVNULL)
try:
    time.sleep(1)

    def rss():
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    def open_now():
        m = urllib.request.urlopen("http://127.0.0.1:18193/metrics").read().decode()
        return next(l.split()[-1] for l in m.splitlines() if l.startswith('router_open_connections{listener="http"}'))

    print(f"idle: {rss()} MB")
    for rnd in range(args.rounds):
        socks = []
        for _ in range(args.conns):
            s = socket.create_connection(("127.0.0.1", 18183))
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(1)
        peak = rss()
        for s in socks:
            s.close()
        time.sleep(2)
        print(f"round {rnd}: {args.conns} open {peak} MB, all closed {rss()} MB (open connections {open_now()})", flush=True)
    time.sleep(args.wait)
    print(f"{args.wait} s after the last round: {rss()} MB")
finally:
    p.terminate()
    p.wait()
    shutil.rmtree(d, ignore_errors=True)
