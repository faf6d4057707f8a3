#!/usr/bin/env python3
"""Starts GET http://VIP:8080/ every 20 ms for DURATION seconds, each on a new
connection in its own thread (a request that hangs does not delay the next one), and
writes one `start_ts status` line per request once all are done (status = HTTP code,
or ERR:<exception type>:<its text>; timeout 1 s). While it runs, each result is also appended to
LOGFILE.live as it comes, so that a caller can wait until requests are being served. Runs in the client namespace of the HA tests and of
bench/failover.py (the gap in the log is the failover's outage).

usage: vip_poller.py VIP DURATION LOGFILE [HOST]"""
import os
import sys
import threading

# bench/http.py sits beside this file and would shadow the standard `http` package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import http.client  # noqa: E402
import time  # noqa: E402

vip, duration, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
host = sys.argv[4] if len(sys.argv) > 4 else vip
results = []
lock = threading.Lock()
live = open(path + ".live", "a", buffering=1)


def one(t):
    try:
        c = http.client.HTTPConnection(vip, 8080, timeout=1.0)
        c.request("GET", "/", headers={"Host": host})
        r = c.getresponse()
        r.read()
        status = str(r.status)
        c.close()
    except Exception as e:  # every failure is a data point, never a crash
        # One token (the log is `start_ts status`): the error's type and text.
        status = "ERR:" + type(e).__name__ + ":" + "_".join(str(e).split())
    with lock:
        results.append((t, status))
        live.write(f"{t:.3f} {status}\n")


threads = []
start = time.time()
n = 0
while True:
    due = start + n * 0.02
    if due > start + duration:
        break
    time.sleep(max(0, due - time.time()))
    th = threading.Thread(target=one, args=(time.time(),))
    th.start()
    threads.append(th)
    n += 1
for th in threads:
    th.join()
with open(path, "w") as out:
    for t, s in sorted(results):
        out.write(f"{t:.3f} {s}\n")
