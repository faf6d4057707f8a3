#!/usr/bin/env python3
"""One client sending RATE requests per second for DURATION seconds, each on a
new connection, alternating between the routers at IPS (comma-separated: an
active-active pair's two addresses, or one), port 8080, Host HOST; prints one
line `served refused other` (200s, 429s, anything else). Used by the pair
tests (a rate limit counted once across the pair) and by hand to measure the
shared limit.

usage: pair_limit.py IPS RATE DURATION HOST"""
import os
import sys

# bench/http.py sits beside this file and would shadow the standard `http` package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import http.client  # noqa: E402
import time  # noqa: E402

ips, rate, duration, host = sys.argv[1].split(","), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
counts = {"served": 0, "refused": 0, "other": 0}
start = time.monotonic()
n = int(rate * duration)
for i in range(n):
    # On schedule: request i starts at i / rate seconds, whatever the last took.
    delay = start + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    try:
        c = http.client.HTTPConnection(ips[i % len(ips)], 8080, timeout=2.0)
        c.request("GET", "/", headers={"Host": host, "Connection": "close"})
        status = c.getresponse().status
        c.close()
    except OSError:
        status = 0
    counts["served" if status == 200 else "refused" if status == 429 else "other"] += 1
print(counts["served"], counts["refused"], counts["other"])
