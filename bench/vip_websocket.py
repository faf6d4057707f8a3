#!/usr/bin/env python3
"""One WebSocket through the VIP (RFC 6455 by hand: the standard library has no
client): after the 101, a masked text frame every 20 ms for DURATION seconds,
each answered by the echo backend. Writes one JSON line to LOGFILE when it ends:
how many messages were echoed, the longest wait for an echo, and how the
connection ended: "open" (still answering at the end), "closed" (the server
ended it: a close frame or a clean end of stream) or "reset" (ECONNRESET or
another error: what a VIP move used to cost). LOGFILE.live gets "echoed N" lines
as they come (a caller waits there until the socket works).

usage: vip_websocket.py VIP DURATION LOGFILE HOST"""
import base64
import json
import os
import socket
import struct
import sys
import time

vip, duration, path, host = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
live = open(path + ".live", "a", buffering=1)


def read_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError("end of stream")
        out += chunk
    return out


def read_frame(s):
    b0, b1 = read_exact(s, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", read_exact(s, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", read_exact(s, 8))[0]
    return b0 & 0x0F, read_exact(s, n)


def send_text(s, text):
    data = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + masked)


s = socket.create_connection((vip, 8080), timeout=3)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(
    (
        f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
)
head = b""
while b"\r\n\r\n" not in head:
    head += read_exact(s, 1)
assert head.startswith(b"HTTP/1.1 101"), head
echoed, longest, ending, detail = 0, 0.0, "open", ""
start = time.time()
i = 0
while time.time() < start + duration:
    due = start + i * 0.02
    time.sleep(max(0, due - time.time()))
    sent = time.time()
    try:
        send_text(s, f"m{i}")
        while True:
            op, payload = read_frame(s)
            if op == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                ending, detail = "closed", f"close frame {code}"
                break
            if op == 1 and payload == f"m{i}".encode():
                break
        if ending != "open":
            break
    except EOFError as e:
        ending, detail = "closed", str(e)
        break
    except OSError as e:
        ending, detail = "reset", f"{type(e).__name__}: {e}"
        break
    echoed += 1
    longest = max(longest, time.time() - sent)
    live.write(f"echoed {echoed}\n")
    i += 1
with open(path, "w") as out:
    out.write(json.dumps({"echoed": echoed, "longest_wait_s": round(longest, 3), "ending": ending, "detail": detail}) + "\n")
