#!/usr/bin/env python3
"""User-space instructions per request of the router, counted by callgrind: the
repeatable axis for telling two versions (or two settings) of our code apart,
whatever else the machine is doing (wall-clock CPU here moves +-25 % between rounds).

The router runs under `valgrind --tool=callgrind` with one worker thread and the
access log off (unless a --config variant sets `access_log:`), in front of the
release echo-backend; one keep-alive client sends
N1, then (in a second run) N2 sequential GETs. Instructions per request is
(Ir(N2) - Ir(N1)) / (N2 - N1): start-up, the route load and shutdown cancel out.

usage: bench/instructions.py [--router BIN] [--n1 2000] [--n2 12000]
                             [--config 'YAML lines' ...] [--handoff] [--cookies] [--peers]
                             [--h2] [--syscalls] [--keep DIR] [--admin 'METHOD PATH JSON' ...]
Each --config is one variant (extra top-level YAML), measured in turn; the default
compares `upstream.source_reserve` 0 and 10 (what the member reserve costs per request).
--handoff: the connection's first request is in absolute form, which the router's
own HTTP/1 path does not take, so hyper serves it and every request after it: the
cost of serving every request with hyper rather than the own path.
--cookies: the client keeps the cookies it is sent and sends them back, as a
browser does (an affinity cookie then names its member: the sticky path).
--peers: also haproxy 2.6 (one thread) and nginx 1.22 (no master, one worker) under
callgrind, proxying the same client's requests to the same backend: the anchors on
the same repeatable axis. Kernel time is in none of the figures.
--peers-syslog: with --peers, haproxy (`option httplog`, RFC 5424) and nginx
(`combined`) log each request to syslog over UDP on 127.0.0.1:5514, which the
script receives on (as it does for a variant naming `udp://127.0.0.1:5514`): what
a syslog line costs each of them, beside the router's `access_log.syslog`.
--h2: the client is h2load over TLS (one connection, 10 streams at once, ALPN h2,
TLS 1.3 with AES-128-GCM) instead of the HTTP/1.1 keep-alive client, for the router
and, with --peers, haproxy and nginx (the h2 axis).
--syscalls: count system calls per request (`strace -f -c`) instead, with the
calls by name: the kernel's side of the same requests (Debian `strace`).
--admin 'METHOD PATH JSON': an admin call made (with a token) once the router
answers, before the counted requests: per-app settings and path tables that the
config file does not hold (e.g. `POST /aliases/ha-bench-bench.example.com/paths`).
--handshakes PRESET,...: full TLS 1.3 handshakes instead of requests (resumption
off; each handshake carries one GET with `Connection: close`; the client is
`bench-clients handshakes`, rustls, X25519, one at a time), for each preset:
`plain`; `client-optional` (`tls.client_certificates` optional, the client
presents none); `client-required` (required, the client presents one, verified
against the CA); `staple` (`tls.ocsp.stapling` with a saved answer read back at
start: every handshake carries it). The chain, the client certificate and the
OCSP answer come from an openssl CA made here.
--keep DIR: keep each run's callgrind output in DIR (named by variant, proxy and N)
and print the functions whose instructions per request differ most between
two --router binaries measured into the same DIR (`--diff A B` compares two kept
runs without measuring).

Needs valgrind (Debian package) and target/release/{router,echo-backend}."""

import os
import sys

sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import http.client  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_http", os.path.join(ROOT, "bench", "http.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)
RELEASE = os.path.join(ROOT, "target/release")
HOST = "ha-bench-bench.example.com"
BACKEND, ROUTER, ADMIN = 18380, 18381, 18382
HAPROXY, NGINX = 18383, 18384
TLS_OFFSET = 10  # each proxy's HTTPS port is its plain port + 10 (--h2)
CERT_DIR = "/tmp/router-instructions-cert"
RUNS = "/tmp/router-instructions-runs"
KEEP = None  # --keep, for the peers' runs too  # each run's output, by label (or proxy) and N
SYSCALLS, UNIT = False, "instructions"  # --syscalls
ADMIN_CALLS = []  # --admin: (method, path, body) made before the counted requests
TOKEN = "bench-instructions-token"

EVENT = H.route_event(BACKEND)


HANDSHAKES = None  # --handshakes: the preset measured now
PRESETS = {
    "plain": "",
    "client-optional": f"  client_certificates:\n    mode: optional\n    ca_file: {CERT_DIR}/ca.pem\n",
    "client-required": f"  client_certificates:\n    mode: required\n    ca_file: {CERT_DIR}/ca.pem\n",
    "staple": "  ocsp:\n    stapling: true\n",
}


def handshake_pki():
    """An openssl CA (CERT_DIR/ca.pem), the server chain it signs for HOST
    (tls.crt: leaf then CA), a client certificate (client.crt) and an OCSP
    answer for the leaf (ocsp.der, by `openssl ocsp`, valid two days)."""
    shutil.rmtree(CERT_DIR, ignore_errors=True)
    os.makedirs(CERT_DIR)
    H.write(f"{CERT_DIR}/ca.cnf", f"""[ca]
default_ca = bench
[bench]
dir = {CERT_DIR}
database = {CERT_DIR}/index.txt
new_certs_dir = {CERT_DIR}
certificate = {CERT_DIR}/ca.pem
private_key = {CERT_DIR}/ca.key
serial = {CERT_DIR}/serial
default_md = sha256
default_days = 2
policy = any
copy_extensions = copy
[any]
commonName = supplied
[server]
basicConstraints = CA:FALSE
extendedKeyUsage = serverAuth
subjectAltName = DNS:{HOST}
authorityInfoAccess = OCSP;URI:http://127.0.0.1:9/
[client]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
""")
    H.write(f"{CERT_DIR}/index.txt", "")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=CERT_DIR)
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench CA", "-keyout", "ca.key", "-out", "ca.pem")
    for name, section in (("leaf", "server"), ("client", "client")):
        run("req", *ec, "-subj", f"/CN={name}.bench", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("ca", "-batch", "-config", "ca.cnf", "-create_serial", "-extensions", section,
            "-in", f"{name}.csr", "-out", f"{name}.crt", "-notext")
    H.write(f"{CERT_DIR}/tls.crt", open(f"{CERT_DIR}/leaf.crt").read() + open(f"{CERT_DIR}/ca.pem").read())
    shutil.copy(f"{CERT_DIR}/leaf.key", f"{CERT_DIR}/tls.key")
    run("ocsp", "-issuer", "ca.pem", "-cert", "leaf.crt", "-reqout", "ocsp.req", "-no_nonce")
    run("ocsp", "-index", "index.txt", "-rsigner", "ca.pem", "-rkey", "ca.key", "-CA", "ca.pem",
        "-reqin", "ocsp.req", "-respout", "ocsp.der", "-ndays", "2")
    run("x509", "-in", "leaf.crt", "-outform", "DER", "-out", "leaf.der")


def saved_staple(state_dir):
    """The OCSP answer saved as the router saves it (`state_dir/ocsp/`), so that
    it is stapled from the first handshake (the stapler reads it back at start)."""
    import base64
    import hashlib
    import json
    leaf = open(f"{CERT_DIR}/leaf.der", "rb").read()
    answer = open(f"{CERT_DIR}/ocsp.der", "rb").read()
    now = int(time.time())
    os.makedirs(f"{state_dir}/ocsp", exist_ok=True)
    H.write(f"{state_dir}/ocsp/{hashlib.sha256(leaf).hexdigest()[:32]}.ocsp", json.dumps({
        "leaf": base64.b64encode(leaf).decode(), "answer": base64.b64encode(answer).decode(),
        "this_update": now - 60, "next_update": now + 86400}))


def certificate():
    """A self-signed P-256 certificate for HOST (--h2); for --h3 a CA and a leaf
    (bench-clients certs: rustls refuses a self-signed leaf as its own CA)."""
    os.makedirs(CERT_DIR, exist_ok=True)
    if H3:
        subprocess.run([os.path.join(RELEASE, "bench-clients"), "certs", CERT_DIR, HOST], check=True)
        return
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", f"{CERT_DIR}/tls.key", "-out", f"{CERT_DIR}/tls.crt", "-days", "2",
                    "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"],
                   check=True, capture_output=True)
    with open(f"{CERT_DIR}/tls.pem", "w") as f:
        f.write(open(f"{CERT_DIR}/tls.crt").read() + open(f"{CERT_DIR}/tls.key").read())


# --peers-syslog: haproxy (`option httplog`, RFC 5424) and nginx (`combined`)
# log each request to a UDP syslog receiver on this port, which the script
# runs (a variant of the router's own names `udp://127.0.0.1:5514`).
SYSLOG_PORT = 5514
PEERS_SYSLOG = False


def syslog_receiver():
    """A UDP receiver on SYSLOG_PORT, reading and counting lines (a thread)."""
    import socket
    import threading
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("127.0.0.1", SYSLOG_PORT))
    count = [0]

    def run():
        while True:
            s.recv(65536)
            count[0] += 1
    threading.Thread(target=run, daemon=True).start()
    return count


H2 = False  # set by --h2
H3 = False  # set by --h3 (which sets H2 too: the same TLS listener, and h2 for the first answer)
# aws-lc picks AES-GCM, ECDSA and SHA code by CPU feature; valgrind does not
# emulate some of them (VAES and VPCLMULQDQ, ADX and BMI2 big-number code, SHA-NI)
# and a QUIC handshake under it then fails (BadSignature). Masked (leaf 7's EBX
# and ECX bits) for --h3, and with --mask for --h2 so that the two compare.
CPU_MASK = "~0x0:~0x0000060020080100"
MASK = False


def config(d, extra):
    token = f"\nadmin:\n  token_file: {d}/admin.token" if ADMIN_CALLS else ""
    # Off unless the variant sets it (what logging costs a request).
    access = "" if "access_log:" in extra else "access_log:\n  enabled: false\n"
    http3 = f"\n  http3: 127.0.0.1:{ROUTER + TLS_OFFSET}" if H3 else ""
    tls = (f"\n  https: 127.0.0.1:{ROUTER + TLS_OFFSET}{http3}\ntls:\n  default_cert: {CERT_DIR}/tls.crt\n"
           f"  default_key: {CERT_DIR}/tls.key") if H2 or HTTPS else ""
    if HANDSHAKES is not None:
        tls += "\n  resumption: false\n" + PRESETS[HANDSHAKES].rstrip("\n")
    elif CLIENT_CERT:
        tls += "\n" + PRESETS["client-required"].rstrip("\n")
    return f"""cloud_domain: example.com
state_dir: {d}/state
worker_threads: 1
listen:
  http: 127.0.0.1:{ROUTER}
  admin: 127.0.0.1:{ADMIN}{tls}
spi:
  source: spool
  spool:
    path: {d}/spool
{access}health:
  checks: false{token}
{extra}
"""


# --https, --client-cert, --fresh, --proxy-v2: the HTTP/1.1 client's
# connection (see raw_requests).
HTTPS = False
CLIENT_CERT = False
# What raw_requests asks for: the echo backend answers `/` with what it got (a
# head that grows grows the answer too), `/page?bytes=N` with N bytes whatever
# came (--path).
RAW_PATH = "/"
FRESH = False
PROXY_V2 = False


def proxy_v2_header(sock):
    """A PROXY v2 header for `sock`'s connection as a load balancer sends it:
    the client 192.0.2.7:40000 (TCP over IPv4) to the socket's peer."""
    import ipaddress
    import struct
    dst, dport = sock.getpeername()
    body = (ipaddress.IPv4Address("192.0.2.7").packed + ipaddress.IPv4Address(dst).packed
            + struct.pack("!HH", 40000, dport))
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


def raw_requests(n, port):
    """`n` GETs over HTTP/1.1, on one kept connection or (--fresh) one
    connection each; over TLS (--https; with --client-cert the client presents
    CERT_DIR/client.crt), after a PROXY v2 header (--proxy-v2)."""
    import socket
    import ssl
    ctx = None
    if HTTPS:
        ctx = ssl.create_default_context(cafile=f"{CERT_DIR}/ca.pem")
        if CLIENT_CERT:
            ctx.load_cert_chain(f"{CERT_DIR}/client.crt", f"{CERT_DIR}/client.key")
    close = "Connection: close\r\n" if FRESH else ""
    request = f"GET {RAW_PATH} HTTP/1.1\r\nHost: {HOST}\r\n{close}\r\n".encode()
    sock = None
    for _ in range(n):
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port + (TLS_OFFSET if HTTPS else 0)))
            if PROXY_V2:
                sock.sendall(proxy_v2_header(sock))
            if ctx:
                sock = ctx.wrap_socket(sock, server_hostname=HOST)
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                sys.exit(f"the connection ended before a response head: {data!r}")
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            sys.exit(f"not 200: {head!r}")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += sock.recv(65536)
        if FRESH:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def requests(n, handoff, cookies, port=ROUTER):
    if HTTPS or FRESH or PROXY_V2:
        return raw_requests(n, port)
    if HANDSHAKES is not None:
        env = dict(os.environ)
        if HANDSHAKES == "client-required":
            env.update(CLIENT_CERT=f"{CERT_DIR}/client.crt", CLIENT_KEY=f"{CERT_DIR}/client.key")
        out = subprocess.run([os.path.join(RELEASE, "bench-clients"), "handshakes", f"127.0.0.1:{port + TLS_OFFSET}",
                              HOST, f"{CERT_DIR}/ca.pem", "x25519", str(n), "1"],
                             capture_output=True, text=True, env=env)
        if f'"ok":{n}' not in out.stdout.replace(" ", ""):
            sys.exit(f"bench-clients handshakes:\n{out.stdout}{out.stderr}")
        return
    if H3:
        out = subprocess.run([os.path.join(RELEASE, "h3-client"), "count", f"127.0.0.1:{port + TLS_OFFSET}", HOST,
                              f"{CERT_DIR}/ca.pem", "/", str(n), "1", "10"], capture_output=True, text=True)
        if f'"ok":{n}' not in out.stdout.replace(" ", ""):
            sys.exit(f"h3-client:\n{out.stdout}{out.stderr}")
        return
    if H2:
        out = subprocess.run(["h2load", "-t1", "-c1", "-m10", f"-n{n}", "--tls13-ciphers=TLS_AES_128_GCM_SHA256",
                              "-H", f":authority: {HOST}", f"https://127.0.0.1:{port + TLS_OFFSET}/"],
                             capture_output=True, text=True).stdout
        if f"{n} succeeded" not in out or "Application protocol: h2" not in out:
            sys.exit(f"h2load:\n{out}")
        return
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    jar = {}
    for i in range(n):
        headers = {"Host": HOST}
        if jar:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        c.request("GET", f"http://{HOST}/" if handoff and i == 0 else "/", headers=headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"status {r.status}")
        if cookies:
            for sc in r.msg.get_all("Set-Cookie") or []:
                name, _, value = sc.split(";")[0].partition("=")
                jar[name.strip()] = value.strip()
    c.close()


def peer(name, n):
    """Instructions of haproxy or nginx serving `n` requests (see --peers)."""
    d = "/tmp/router-instructions-peer"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for k in H.TEMP_KINDS:
        os.makedirs(f"{d}/tmp-{k}")
    # The TLS listeners only with --h2, which makes their certificate: without
    # it (a fresh machine) haproxy and nginx refused to start on the missing file.
    if name == "haproxy":
        tls = (f"\n    bind 127.0.0.1:{HAPROXY + TLS_OFFSET} ssl crt {CERT_DIR}/tls.pem alpn h2,http/1.1"
               if H2 else "")
        log = (f"\n    log 127.0.0.1:{SYSLOG_PORT} format rfc5424 local1\n    option httplog"
               if PEERS_SYSLOG else "")
        H.write(f"{d}/haproxy.cfg", H.HAPROXY_HEAD + f"""
frontend fe_http
    bind 127.0.0.1:{HAPROXY}{tls}{log}
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{BACKEND}
""")
        cmd, port = ["haproxy", "-db", "-f", f"{d}/haproxy.cfg"], HAPROXY
    else:
        tls = (f"""
    listen 127.0.0.1:{NGINX + TLS_OFFSET} ssl http2;
    ssl_certificate {CERT_DIR}/tls.crt;
    ssl_certificate_key {CERT_DIR}/tls.key;""" if H2 else "")
        log = f"\n    access_log syslog:server=127.0.0.1:{SYSLOG_PORT} combined;" if PEERS_SYSLOG else ""
        H.nginx_conf(d, "nginx", f"""
  upstream backend {{ server 127.0.0.1:{BACKEND}; keepalive 64; keepalive_requests 100000; }}
  server {{
    listen 127.0.0.1:{NGINX};{tls}{log}
    {H.PROXY_PASS}
  }}""")
        cmd, port = ["nginx", "-c", f"{d}/nginx.conf", "-g", "daemon off; master_process off;"], NGINX
    total = measured(cmd, port, f"{d}/run.out", name, n)
    for into in (RUNS, KEEP):
        if into:
            os.makedirs(into, exist_ok=True)
            shutil.copy(f"{d}/run.out", f"{into}/{name}-{n}.out")
    return total


def measured(cmd, port, out, name, n, handoff=False, cookies=False):
    """Ir of `cmd` under callgrind serving `n` requests on `port` (after the first
    answer of 200), from start to exit; with --syscalls, its system calls counted
    by `strace -c` instead."""
    wrap = C.wrapped(out, SYSCALLS) + ([] if SYSCALLS else os.environ.get("CALLGRIND_EXTRA", "").split())
    if MASK:
        wrap = ["env", f"OPENSSL_ia32cap={CPU_MASK}"] + wrap
    err = open(f"{out}.stderr", "w")
    p = subprocess.Popen(wrap + cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if (HTTPS or PROXY_V2) and name == "the router":
                    raw_requests(1, port)  # exits on anything but 200
                    break
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/", headers={"Host": HOST})
                if c.getresponse().status == 200:
                    break
            except (OSError, SystemExit):
                pass
            if p.poll() is not None or time.time() > deadline:
                with open(f"{out}.stderr") as f:
                    said = f.read()[-2000:]
                sys.exit(f"{name} under valgrind never answered; it said:\n{said}")
            time.sleep(0.5)
        if port == ROUTER:
            admin_calls()
        requests(n, handoff, cookies, port)
    finally:
        C.stop(p, SYSCALLS)
    counted = C.total(out, SYSCALLS)
    if counted is not None:
        return counted
    sys.exit(f"no totals in {name}'s {'strace' if SYSCALLS else 'callgrind'} output")


def admin_calls():
    """The --admin calls, each answered 200 or the run stops with what was said."""
    for method, path, body in ADMIN_CALLS:
        c = http.client.HTTPConnection("127.0.0.1", ADMIN, timeout=30)
        c.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                    "Content-Type": "application/json"})
        r = c.getresponse()
        said = r.read().decode(errors="replace")
        if r.status != 200:
            sys.exit(f"admin {method} {path}: {r.status} {said[:500]}")


def annotated(out):
    """(exclusive Ir, "file:function ...") for each line of callgrind_annotate's
    listing of one callgrind output."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", out],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].replace(",", "").isdigit() and ":" in parts[1]:
            yield int(parts[0].replace(",", "")), parts[1]


def functions(out):
    """Exclusive Ir per function in one callgrind output."""
    per = {}
    for ir, where in annotated(out):
        name = where.split(":", 1)[1].split(" [")[0].strip()
        per[name] = per.get(name, 0) + ir
    return per


def per_request(keep, label, n1, n2):
    a, b = functions(f"{keep}/{label}-{n1}.out"), functions(f"{keep}/{label}-{n2}.out")
    return {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}


# --components: each line of callgrind_annotate (by source file, so inlined
# code counts where it was written) put in one component, first rule that
# matches; the router's by crate, haproxy's and nginx's by their functions.
COMPONENTS = [
    ("h2 crate (frames, HPACK, streams)", r"/h2-\d|[^a-z]hpack|h2_|h2c_|h2s_|ngx_http_v2|ngx_http_huff"),
    ("hyper and hyper-util", r"/hyper-(util-)?\d"),
    ("TLS record layer (rustls; haproxy's and nginx's OpenSSL glue)", r"/rustls-\d|ssl_sock|ngx_ssl|\bSSL_|ssl3_|tls1_|ossl_|BIO_|libssl"),
    ("crypto (aws-lc; OpenSSL's libcrypto)", r"aws[-_]lc|aesni|_gcm|gcm_|ghash|sha256|EVP_|CRYPTO_|libcrypto|poly1305|chacha"),
    ("tokio (I/O, tasks, timers)", r"/tokio-\d|/mio-\d"),
    ("allocator", r"mimalloc|\bmi_|_mi_|malloc|\bfree\b|_int_free|pool_alloc|pool_free|ngx_palloc|ngx_pfree"),
    ("memcpy, memset, other libc", r"libc\.so|/string/|memmove|memcpy|memset|memcmp|strlen"),
    ("http, bytes, httparse crates", r"/(http|bytes|httparse|http-body)(-util)?-\d"),
    ("Rust's core and std, inlined (iterators, slices, Arc, futures)", r"^/rustc/"),
    ("the router's own code", r"/work/main/|^router/|^h1-codec/|^h3-|^compress/|^spans/"),
    ("haproxy: HTTP (htx, http_ana, http_fetch)", r"htx_|http_|hdr_|sample_"),
    ("haproxy and nginx: event loop, tasks, fds, connections", r"task_|tasklet|fd_|conn_|sc_|stream_|channel_|process_|ngx_event|ngx_epoll|epoll|ngx_"),
]


def components(keep, label, n1, n2):
    """Instructions per request by component (COMPONENTS) of a kept label."""
    import re
    def by_component(out):
        totals = {}
        for ir, where in annotated(out):
            where = where.split(")", 1)[-1].strip() if where.startswith("(") else where
            name = next((n for n, rule in COMPONENTS if re.search(rule, where)), "other")
            totals[name] = totals.get(name, 0) + ir
        return totals
    a, b = by_component(f"{keep}/{label}-{n1}.out"), by_component(f"{keep}/{label}-{n2}.out")
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
    print(f"{label}: instructions per request by component")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"{v:>10,.0f}  {k}")
    print(f"{sum(per.values()):>10,.0f}  total")


def diff(keep, old, new, n1, n2, top=30):
    """The functions whose instructions per request moved most from `old` to `new`."""
    a, b = per_request(keep, old, n1, n2), per_request(keep, new, n1, n2)
    moved = sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, 0) - a.get(k, 0)))
    print(f"{'delta':>9} {old:>10} {new:>10}  function (instructions per request)")
    for k in moved[:top]:
        print(f"{b.get(k, 0) - a.get(k, 0):>+9.1f} {a.get(k, 0):>10.1f} {b.get(k, 0):>10.1f}  {k[:110]}")
    print(f"{sum(b.values()) - sum(a.values()):>+9.1f} {sum(a.values()):>10.1f} "
          f"{sum(b.values()):>10.1f}  total")


def instructions(binary, extra, n, handoff, cookies, keep=None, label=None):
    d = "/tmp/router-instructions"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{d}/spool")
    with open(f"{d}/spool/01.yaml", "w") as f:
        f.write(EVENT)
    with open(f"{d}/router.yaml", "w") as f:
        f.write(config(d, extra))
    if HANDSHAKES == "staple":
        saved_staple(f"{d}/state")
    if ADMIN_CALLS:
        with open(f"{d}/admin.token", "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(f"{d}/admin.token", 0o600)
    ir = measured([binary, "--config", f"{d}/router.yaml"], ROUTER, f"{d}/run.out",
                   "the router", n, handoff, cookies)
    for into in (RUNS, keep):
        if into:
            os.makedirs(into, exist_ok=True)
            shutil.copy(f"{d}/run.out", f"{into}/{label}-{n}.out")
    return ir


def by_name(label, n1, n2):
    """System calls per request by name (--syscalls), largest first."""
    a = C.by_name(f"{RUNS}/{label}-{n1}.out")
    b = C.by_name(f"{RUNS}/{label}-{n2}.out")
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
    print("    " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])
                              if abs(v) >= 0.01))


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


C = NEEDS.sibling("counted")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", default=os.path.join(RELEASE, "router"))
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=12000)
    ap.add_argument("--config", action="append",
                    help="extra YAML for one variant (repeat for several)")
    ap.add_argument("--handoff", action="store_true",
                    help="every request after the first served by hyper, not the own path")
    ap.add_argument("--cookies", action="store_true",
                    help="the client sends back the cookies it is sent (sticky sessions)")
    ap.add_argument("--peers", action="store_true",
                    help="also haproxy and nginx, on the same axis")
    ap.add_argument("--h2", action="store_true",
                    help="h2 over TLS (h2load, one connection, 10 streams) instead of HTTP/1.1")
    ap.add_argument("--h3", action="store_true",
                    help="HTTP/3 (h3-client, one connection, 10 streams), aws-lc's CPU paths masked (see CPU_MASK)")
    ap.add_argument("--mask", action="store_true",
                    help="with --h2: aws-lc's CPU paths masked as for --h3, so that the two compare")
    ap.add_argument("--handshakes", metavar="PRESET,...",
                    help="full TLS handshakes per preset (plain, client-optional, client-required, staple)")
    ap.add_argument("--syscalls", action="store_true",
                    help="count system calls (strace -c) instead of instructions")
    ap.add_argument("--https", action="store_true",
                    help="HTTP/1.1 over TLS on one kept connection (the openssl CA of --handshakes)")
    ap.add_argument("--client-cert", action="store_true",
                    help="with --https: client certificates required, the client presents one")
    ap.add_argument("--fresh", action="store_true",
                    help="HTTP/1.1: one connection a request (Connection: close)")
    ap.add_argument("--proxy-v2", action="store_true",
                    help="HTTP/1.1: each connection starts with a PROXY v2 header (client 192.0.2.7); "
                         "the variants must trust 127.0.0.1 (proxy_protocol: {trusted: [127.0.0.1]})")
    ap.add_argument("--path", default="/",
                    help="with --https, --fresh or --proxy-v2: the path asked for (`/page?bytes=400`: "
                         "an answer of one size whatever the request carried)")
    ap.add_argument("--peers-syslog", action="store_true",
                    help="with --peers: haproxy and nginx log each request to syslog over UDP "
                         f"(127.0.0.1:{SYSLOG_PORT}, which this script receives on)")
    ap.add_argument("--keep", help="keep each router run's callgrind output in this directory")
    ap.add_argument("--label", help="name of this binary's runs in --keep (default: the variant's number)")
    ap.add_argument("--admin", action="append", default=[], metavar="'METHOD PATH JSON'",
                    help="an admin call made before the counted requests (repeatable)")
    ap.add_argument("--components", metavar="LABEL",
                    help="instructions per request by component of a label kept in --keep "
                         "(haproxy's and nginx's runs are kept under their names)")
    ap.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"),
                    help="per-function difference of two labels kept in --keep (no measuring)")
    args = ap.parse_args()
    NEEDS.tools('valgrind', 'strace', 'h2load', 'haproxy', 'nginx', 'openssl')
    NEEDS.built('echo-backend', 'bench-clients', 'h3-client')
    NEEDS.router(args.router)
    global SYSCALLS, UNIT, KEEP
    KEEP = args.keep
    SYSCALLS = args.syscalls
    UNIT = "system calls" if SYSCALLS else "instructions"
    if args.components:
        if not args.keep:
            sys.exit("--components needs --keep DIR")
        components(args.keep, args.components, args.n1, args.n2)
        return
    if args.diff:
        if not args.keep:
            sys.exit("--diff needs --keep DIR")
        diff(args.keep, *args.diff, args.n1, args.n2)
        return
    for call in args.admin:
        method, path, body = (call.split(None, 2) + [""])[:3]
        ADMIN_CALLS.append((method, path, body))
    global H2, H3, MASK, PEERS_SYSLOG, HTTPS, CLIENT_CERT, FRESH, PROXY_V2
    PEERS_SYSLOG = args.peers_syslog
    HTTPS, CLIENT_CERT, FRESH, PROXY_V2 = args.https, args.client_cert, args.fresh, args.proxy_v2
    global RAW_PATH
    RAW_PATH = args.path
    if CLIENT_CERT and not HTTPS:
        sys.exit("--client-cert needs --https")
    if HTTPS:
        handshake_pki()
    H3 = args.h3
    H2 = args.h2 or H3
    MASK = H3 or args.mask
    if args.handshakes:
        H2 = True
        handshake_pki()
        return handshakes(args, args.handshakes.split(","))
    if H2:
        certificate()
    variants = args.config or ["upstream:\n  source_reserve: 0", "upstream:\n  source_reserve: 10"]
    lines = syslog_receiver() if PEERS_SYSLOG or any(f":{SYSLOG_PORT}" in v for v in variants) else None
    if not shutil.which("valgrind"):
        sys.exit("valgrind is missing (apt-get install valgrind)")
    if not os.path.exists(os.path.join(RELEASE, "echo-backend")):
        sys.exit("build first: cargo build --release -p e2e --bin echo-backend")
    backend = subprocess.Popen([os.path.join(RELEASE, "echo-backend"), f"127.0.0.1:{BACKEND}"],
                               stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        for i, extra in enumerate(variants):
            label = (args.label or "run") + (f"-v{i}" if len(variants) > 1 else "")
            a = instructions(args.router, extra, args.n1, args.handoff, args.cookies, args.keep, label)
            b = instructions(args.router, extra, args.n2, args.handoff, args.cookies, args.keep, label)
            per = (b - a) / (args.n2 - args.n1)
            path = ("HTTP/3" if H3 else "h2 over TLS" if H2 else "hyper" if args.handoff else "own path") + \
                (" over TLS" if HTTPS else "") + (", a client certificate" if CLIENT_CERT else "") + \
                (", a connection a request" if FRESH else "") + (", PROXY v2" if PROXY_V2 else "") + \
                (", cookies kept" if args.cookies else "")
            print(f"{extra.replace(chr(10), ' ')!r} ({path}): {per:,.{2 if SYSCALLS else 0}f} {UNIT} "
                  f"per request (total {a:,} at {args.n1}, {b:,} at {args.n2})", flush=True)
            if SYSCALLS:
                by_name(label, args.n1, args.n2)
        for name in ("haproxy", "nginx") if args.peers else ():
            a, b = peer(name, args.n1), peer(name, args.n2)
            print(f"{name}: {(b - a) / (args.n2 - args.n1):,.{2 if SYSCALLS else 0}f} {UNIT} per request "
                  f"(total {a:,} at {args.n1}, {b:,} at {args.n2})", flush=True)
            if SYSCALLS:
                by_name(name, args.n1, args.n2)
        if lines:
            print(f"syslog lines received on 127.0.0.1:{SYSLOG_PORT}: {lines[0]:,}", flush=True)
    finally:
        backend.terminate()
        backend.wait()


def handshakes(args, presets):
    """--handshakes: instructions per full handshake (and its one request) per preset."""
    global HANDSHAKES
    backend = subprocess.Popen([os.path.join(RELEASE, "echo-backend"), f"127.0.0.1:{BACKEND}"],
                               stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        base = None
        for preset in presets:
            if preset not in PRESETS:
                sys.exit(f"--handshakes: no preset {preset!r} (one of {', '.join(PRESETS)})")
            HANDSHAKES = preset
            label = (args.label or "hs") + f"-{preset}"
            a = instructions(args.router, "", args.n1, False, False, args.keep, label)
            b = instructions(args.router, "", args.n2, False, False, args.keep, label)
            per = (b - a) / (args.n2 - args.n1)
            base = base or per
            print(f"{preset}: {per:,.0f} instructions per full handshake + 1 request "
                  f"({per / base:.3f}x the first preset; total {a:,} at {args.n1}, {b:,} at {args.n2})", flush=True)
    finally:
        backend.terminate()
        backend.wait()


if __name__ == "__main__":
    main()
