#!/usr/bin/python3
"""A real gRPC server and client (Debian's python3-grpcio) for tests/tests/grpc.rs.

No generated code: the methods carry raw bytes (identity serializers), which is all
gRPC framing needs.

  echo.py serve [CERT KEY]       serves on 127.0.0.1:0 (TLS with CERT and KEY), prints
                                 "port N", runs until killed
  echo.py call ADDR AUTHORITY [CA_FILE]
                                 calls every method through ADDR (h2c, or TLS with
                                 CA_FILE) naming AUTHORITY, prints one JSON object of
                                 what came back
"""
import json
import sys
import time
from concurrent import futures

import grpc

ident = lambda b: b  # noqa: E731


def unary(request, context):
    context.set_trailing_metadata((("x-served-by", "echo"),))
    return request[::-1]


def server_stream(request, context):
    for i in range(int(request)):
        yield b"part-%d" % i


def client_stream(request_iterator, context):
    return b"|".join(request_iterator)


def bidi(request_iterator, context):
    for r in request_iterator:
        yield r.upper()


def fail(request, context):
    context.set_trailing_metadata((("x-why", "no-such-thing"),))
    context.abort(grpc.StatusCode.NOT_FOUND, "nothing called " + request.decode())


def slow(request, context):
    time.sleep(float(request))
    return b"late"


HANDLERS = {
    "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
    "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
    "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
    "Bidi": grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
    "Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
    "Slow": grpc.unary_unary_rpc_method_handler(slow, ident, ident),
}


def serve(cert=None, key=None):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", HANDLERS),))
    if cert:
        creds = grpc.ssl_server_credentials(((open(key, "rb").read(), open(cert, "rb").read()),))
        port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print("port", port, flush=True)
    server.wait_for_termination()


def call(addr, authority, ca=None):
    options = [("grpc.default_authority", authority)]
    if ca:
        creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
        options.append(("grpc.ssl_target_name_override", authority))
        channel = grpc.secure_channel(addr, creds, options=options)
    else:
        channel = grpc.insecure_channel(addr, options=options)
    m = lambda kind, name: getattr(channel, kind)("/test.Echo/" + name, ident, ident)  # noqa: E731
    out = {}
    reply, rpc = m("unary_unary", "Unary").with_call(b"hello", timeout=10)
    out["unary"] = reply.decode()
    out["unary_trailer"] = dict(rpc.trailing_metadata()).get("x-served-by")
    out["server_stream"] = [r.decode() for r in m("unary_stream", "ServerStream")(b"5", timeout=10)]
    out["client_stream"] = m("stream_unary", "ClientStream")(iter([b"a", b"b", b"c"]), timeout=10).decode()
    out["bidi"] = [r.decode() for r in m("stream_stream", "Bidi")(iter([b"x", b"y"]), timeout=10)]
    try:
        m("unary_unary", "Fail")(b"gizmo", timeout=10)
        out["fail"] = "no error"
    except grpc.RpcError as e:
        out["fail"] = [e.code().name, e.details(), dict(e.trailing_metadata() or ()).get("x-why")]
    try:
        m("unary_unary", "Slow")(b"3", timeout=0.5)
        out["deadline"] = "no error"
    except grpc.RpcError as e:
        out["deadline"] = e.code().name
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(*sys.argv[2:])
    else:
        call(*sys.argv[2:])
