"""An HTTP/3 client for the router's tests, on aioquic (PyPI).

  client.py get ADDR SNI CA REQUESTS_JSON
      One QUIC connection to ADDR (host:port) with SNI, trusting CA; sends each
      request of the JSON list ({"method", "authority", "path", "body"?} and, to
      send what a careful client would not: "headers" (more [name, value] pairs,
      sent as given), "content_length" (declared instead of the body's length),
      "pieces" (the body in that many DATA frames), "trailers" ([name, value]
      pairs)) in turn and prints a JSON list of {"status", "headers", "body"}
      (body as text), or {"reset": CODE} for a stream the server reset.
      A failed connection prints {"error": ...} and exits 2.

  client.py loop ADDR SNI CA AUTHORITY PATH INTERVAL_MS SECONDS
      A request every INTERVAL_MS for SECONDS, on one connection as long as it
      lives, a new one when it ends (a stateless reset, a timeout). Prints one
      JSON line per request ({"t", "ok", "status", "connection", "error"?}),
      then {"summary": {...}} with the longest gap between two successes.
"""

import asyncio
import json
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.terminated = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = f"terminated: code {event.error_code} {event.reason_phrase!r}"
            for fut, _ in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(self.terminated))
        if isinstance(event, StreamReset):
            entry = self.waiting.get(event.stream_id)
            if entry is not None and not entry[0].done():
                entry[0].set_result({"reset": event.error_code})
        for ev in self.h3.handle_event(event):
            entry = self.waiting.get(getattr(ev, "stream_id", None))
            if entry is None:
                continue
            fut, resp = entry
            if isinstance(ev, HeadersReceived):
                for name, value in ev.headers:
                    if name == b":status":
                        resp["status"] = int(value)
                    else:
                        resp["headers"].setdefault(name.decode(), []).append(value.decode())
            elif isinstance(ev, DataReceived):
                resp["body"] += ev.data
            if ev.stream_ended and not fut.done():
                fut.set_result(resp)

    async def request(self, method, authority, path, body=b"", timeout=10.0, extra=(), length=None,
                      pieces=1, trailers=()):
        if self.terminated:
            raise ConnectionError(self.terminated)
        sid = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic-test"),
        ]
        headers += [(n.encode(), v.encode()) for n, v in extra]
        if body or length is not None:
            headers.append((b"content-length", str(len(body) if length is None else length).encode()))
        ends = not body and not trailers
        self.h3.send_headers(sid, headers, end_stream=ends)
        step = max(1, -(-len(body) // max(1, pieces)))
        for at in range(0, len(body), step):
            last = at + step >= len(body) and not trailers
            self.h3.send_data(sid, body[at:at + step], end_stream=last)
        if trailers:
            self.h3.send_headers(sid, [(n.encode(), v.encode()) for n, v in trailers], end_stream=True)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[sid] = (fut, {"status": None, "headers": {}, "body": b""})
        self.transmit()
        try:
            resp = await asyncio.wait_for(fut, timeout)
        finally:
            self.waiting.pop(sid, None)
        return resp


def configuration(sni, ca):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni)
    config.load_verify_locations(ca)
    config.idle_timeout = 30.0
    return config


def host_port(addr):
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


async def get(addr, sni, ca, requests):
    host, port = host_port(addr)
    out = []
    try:
        async with connect(host, port, configuration=configuration(sni, ca),
                           create_protocol=Client, wait_connected=True) as client:
            for r in requests:
                resp = await client.request(r.get("method", "GET"), r["authority"], r["path"],
                                            r.get("body", "").encode(), extra=r.get("headers", ()),
                                            length=r.get("content_length"), pieces=r.get("pieces", 1),
                                            trailers=r.get("trailers", ()))
                if "body" in resp:
                    resp["body"] = resp["body"].decode(errors="replace")
                out.append(resp)
    except Exception as e:  # the test reads the reason
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "done": out}))
        sys.exit(2)
    print(json.dumps(out))


async def loop(addr, sni, ca, authority, path, interval_ms, seconds):
    host, port = host_port(addr)
    interval = interval_ms / 1000.0
    start = time.monotonic()
    end = start + seconds
    last_ok = None
    longest_gap = 0.0
    oks = fails = 0
    connections = 0
    while time.monotonic() < end:
        connections += 1
        try:
            async with connect(host, port, configuration=configuration(sni, ca),
                               create_protocol=Client, wait_connected=True) as client:
                while time.monotonic() < end:
                    t = time.monotonic()
                    resp = await client.request("GET", authority, path, timeout=2.0)
                    ok = resp["status"] == 200
                    now = time.monotonic()
                    if ok:
                        oks += 1
                        if last_ok is not None:
                            longest_gap = max(longest_gap, now - last_ok)
                        last_ok = now
                    else:
                        fails += 1
                    print(json.dumps({"t": round(t - start, 4), "ok": ok, "status": resp["status"],
                                      "connection": connections}), flush=True)
                    await asyncio.sleep(max(0.0, interval - (time.monotonic() - t)))
        except Exception as e:
            fails += 1
            print(json.dumps({"t": round(time.monotonic() - start, 4), "ok": False, "status": None,
                              "connection": connections, "error": f"{type(e).__name__}: {e}"}),
                  flush=True)
            await asyncio.sleep(interval)
    print(json.dumps({"summary": {"ok": oks, "failed": fails, "connections": connections,
                                  "longest_gap_s": round(longest_gap, 4)}}), flush=True)


def main():
    mode = sys.argv[1]
    if mode == "get":
        addr, sni, ca, reqs = sys.argv[2:6]
        asyncio.run(get(addr, sni, ca, json.loads(reqs)))
    elif mode == "loop":
        addr, sni, ca, authority, path, interval_ms, seconds = sys.argv[2:9]
        asyncio.run(loop(addr, sni, ca, authority, path, int(interval_ms), float(seconds)))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
