#!/usr/bin/env python3
"""Routing events at RATE a second for DURATION seconds over one STOMP connection
to the broker (persistent, to the topic the routers' queues copy): each an
`add_alias` or `remove_alias` of `soak-K.example.com` (K cycling over ALIASES) on
the app APP in NS, alternating per alias, so the state they leave is known. At
the end LOGFILE gets one JSON object: events sent, and the aliases that should be
there. A failed send is retried on a new connection (the broker may be
restarting: that is one of the soak's faults); an event is counted sent once the
broker's receipt came. Runs in the broker's namespace of the HA soak.

usage: soak_events.py BROKER_IP DURATION RATE LOGFILE APP NS [ALIASES]"""
import json
import socket
import sys
import time

broker, duration, rate, path, app, ns = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
aliases = int(sys.argv[7]) if len(sys.argv) > 7 else 200


def connect():
    while True:
        try:
            s = socket.create_connection((broker, 61613), 5)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            if s.recv(4096).startswith(b"CONNECTED"):
                return s
        except OSError:
            pass
        time.sleep(0.5)


def send(s, body, n):
    frame = (f"SEND\ndestination:/topic/routinginfo\npersistent:true\nreceipt:{n}\n"
             f"content-length:{len(body)}\n\n").encode() + body + b"\x00"
    s.sendall(frame)
    got = b""
    while b"\x00" not in got:
        c = s.recv(4096)
        if not c:
            raise OSError("closed")
        got += c
    if not got.startswith(b"RECEIPT"):
        raise OSError(got[:200])


present = set()
sent = 0
retries = 0
s = connect()
start = time.time()
while time.time() - start < duration:
    k = sent % aliases
    alias = f"soak-{k}.example.com"
    action = "remove_alias" if alias in present else "add_alias"
    body = f"---\n:action: :{action}\n:app_name: {app}\n:namespace: {ns}\n:alias: {alias}\n".encode()
    while True:
        try:
            send(s, body, sent)
            break
        except OSError:
            retries += 1
            try:
                s.close()
            except OSError:
                pass
            s = connect()
    present.symmetric_difference_update({alias})
    sent += 1
    pause = start + sent / rate - time.time()
    if pause > 0:
        time.sleep(pause)
with open(path, "w") as f:
    json.dump({"sent": sent, "retries": retries, "present": sorted(present)}, f)
