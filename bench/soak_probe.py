#!/usr/bin/env python3
"""A latency probe through the VIP: one keep-alive HTTP/1.1 connection (a new one
after any failure), a GET every 50 ms for DURATION seconds; each request one line
of LOGFILE, `start_ts latency_ms status` (status the HTTP code or ERR:<type>).
Runs in the client namespace of the HA soak.

usage: soak_probe.py VIP DURATION LOGFILE HOST"""
import os
import sys

sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import http.client  # noqa: E402
import time  # noqa: E402

vip, duration, path, host = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
out = open(path, "a", buffering=1)
conn = None
start = time.time()
while time.time() - start < duration:
    t = time.time()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(vip, 8080, timeout=2)
        conn.request("GET", "/", headers={"Host": host})
        r = conn.getresponse()
        r.read()
        status = str(r.status)
        if r.getheader("connection", "").lower() == "close":
            conn.close()
            conn = None
    except Exception as e:  # noqa: BLE001 - every failure is a line
        status = f"ERR:{type(e).__name__}"
        conn = None
    out.write(f"{t:.3f} {(time.time() - t) * 1000:.2f} {status}\n")
    time.sleep(max(0.0, 0.05 - (time.time() - t)))
