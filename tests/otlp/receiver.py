"""An OTLP/HTTP trace receiver for the tests, built on the reference protobuf
definitions (the `opentelemetry-proto` package): it decodes each
`ExportTraceServiceRequest` the router POSTs to /v1/traces and prints every
span as one JSON line on stdout.

    receiver.py MODE      MODE: ok (answers 200), hang (reads the request,
                          never answers), refuse (answers 503)

The first line printed is {"port": N}: the port it listens on (127.0.0.1).
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def emit(obj):
    with LOCK:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        emit({"request": self.path, "content_type": self.headers.get("Content-Type"),
              "bytes": len(body)})
        if MODE == "hang":
            time.sleep(3600)
            return
        if MODE == "refuse":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    emit({"span": {
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "flags": s.flags,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "status": s.status.code,
                        "attributes": attributes(s.attributes),
                        "events": [e.name for e in s.events],
                        "resource": resource,
                        "scope": ss.scope.name,
                    }})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
emit({"port": server.server_address[1]})
server.serve_forever()
