#!/usr/bin/env python3
"""Keep-alive HTTP/1.1 clients through the VIP: CLIENTS threads, each on one
connection for as long as the router keeps it (a `Connection: close` answer makes
it open a new one, as browsers and HTTP libraries do), a GET every 20 ms for
DURATION seconds. Each request's outcome is one line of LOGFILE:
`start_ts client status`, where status is the HTTP code or
ERR:<exception type>:<its text>; no retry, so every ERR is a first-try failure.
LOGFILE.live gets each line as it comes (a caller waits there until requests are
being served). Runs in the client namespace of the HA tests.

usage: vip_keepalive.py VIP DURATION LOGFILE HOST CLIENTS"""
import os
import sys
import threading

# bench/http.py sits beside this file and would shadow the standard `http` package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import http.client  # noqa: E402
import time  # noqa: E402

vip, duration, path, host, clients = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
lock = threading.Lock()
rows = []
live = open(path + ".live", "a", buffering=1)


def client(n, start):
    conn = None
    i = 0
    while True:
        due = start + i * 0.02
        if due > start + duration:
            break
        time.sleep(max(0, due - time.time()))
        t = time.time()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(vip, 8080, timeout=2.0)
            conn.request("GET", "/", headers={"Host": host})
            r = conn.getresponse()
            r.read()
            status = str(r.status)
            if r.will_close:
                conn.close()
                conn = None
        except Exception as e:  # every failure is a data point, never a crash
            status = "ERR:" + type(e).__name__ + ":" + "_".join(str(e).split())
            if conn is not None and conn.sock is not None:
                status += ":port=" + str(conn.sock.getsockname()[1])
            if conn is not None:
                conn.close()
            conn = None
        with lock:
            rows.append((t, n, status))
            live.write(f"{t:.3f} {n} {status}\n")
        i += 1
    if conn is not None:
        conn.close()


start = time.time()
threads = [threading.Thread(target=client, args=(n, start)) for n in range(clients)]
for th in threads:
    th.start()
for th in threads:
    th.join()
with open(path, "w") as out:
    for t, n, s in sorted(rows):
        out.write(f"{t:.3f} {n} {s}\n")
