#!/usr/bin/env python3
"""Two router binaries side by side, same backend, alternating rounds: CPU per request
for h2 over TLS (h2load -t1 -c10 -m10) and HTTP/1.1 keep-alive (wrk -c64), routers
pinned to CPU 1, clients and backend to CPU 0. The way to tell a change's effect on
the h2 path from this machine's noise (bench/http.py --baseline does it for
HTTP/1.1 against the anchors).

usage: python3 bench/ab.py BEFORE_BINARY AFTER_BINARY [ROUNDS]"""
import sys, os, time, subprocess, re
BEFORE, AFTER = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
sys.argv = ["x"]
import importlib.util
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("shapes", os.path.join(ROOT, "bench", "shapes.py"))
S = importlib.util.module_from_spec(spec); spec.loader.exec_module(S)
H=S.H
d=H.workdir("router-ab-")
subprocess.run([f"{S.REL}/bench-clients","certs",d,S.HOST],check=True)
H.configs(d)
H.write(f"{d}/backend.conf", open(f"{d}/backend.conf").read().replace(f"127.0.0.1:{H.PORTS['backend']}", f"127.0.0.1:{S.P['backend']}"))
b=subprocess.Popen(["nginx","-c",f"{d}/backend.conf","-p",d,"-g","daemon off;"],stderr=subprocess.DEVNULL)
H.wait_port(S.P["backend"])
procs={}
for name,binary,base in (("before",BEFORE,18700),("after",AFTER,18710)):
    os.makedirs(f"{d}/{name}-spool",exist_ok=True)
    H.write(f"{d}/{name}-spool/00.yaml", S.event(S.P["backend"]))
    H.write(f"{d}/{name}.yaml", S.router_yaml(d, name, base, base + 1, base + 2, f"{d}/{name}-spool"))
    procs[name]=(subprocess.Popen([binary,"--config",f"{d}/{name}.yaml"],stderr=subprocess.DEVNULL),base)
try:
    for name,(p,base) in procs.items(): H.wait_port(base, S.HOST)
    for name,(p,base) in procs.items(): H.pin(p.pid, {1})
    H.pin(b.pid, {0}); os.sched_setaffinity(0, {0})
    res={n:{"h2":[],"h1":[]} for n in procs}
    for rnd in range(ROUNDS):
        for name,(p,base) in (list(procs.items()) if rnd%2==0 else list(procs.items())[::-1]):
            S.h2load(base+1, 20000)
            t=H.stat_ticks(p.pid); r=S.h2load(base+1, 100000); cpu=(H.stat_ticks(p.pid)-t)/H.HZ
            res[name]["h2"].append(cpu/r["ok"]*1e6)
            H.wrk(base,2,64)
            t=H.stat_ticks(p.pid); w=H.wrk(base,8,64); cpu=(H.stat_ticks(p.pid)-t)/H.HZ
            res[name]["h1"].append(cpu/w["requests"]*1e6)
            print(rnd,name,"h2 %.1f us/req"%res[name]["h2"][-1],"h1 %.1f us/req"%res[name]["h1"][-1],"errors",r["failed"],w["errors"],w["non2xx"],flush=True)
    import statistics
    for n in res: print(n,"median h2 %.1f h1 %.1f"%(statistics.median(res[n]["h2"]),statistics.median(res[n]["h1"])))
finally:
    for p,_ in procs.values(): S.stop(p)
    S.stop(b)
    import shutil
    shutil.rmtree(d, ignore_errors=True)
