#!/usr/bin/env python3
"""TLS benchmark: our router vs haproxy 2.6 vs nginx 1.22 with the same ECDSA P-256
certificate, same backend, same run (CPU per handshake and per request from
/proc/PID/stat; with --pin each proxy runs on the same core, clients on the other).

Per round, for each proxy:
  - full TLS 1.3 handshakes: h2load --h1 -t1 -c50 -n N with Connection: close against a
    listener that cannot resume (router tls.resumption: false; haproxy no-tls-tickets +
    tune.ssl.cachesize 0; nginx ssl_session_tickets off + ssl_session_cache off);
  - resumed handshakes: the same against listeners that resume (router with a shared
    ticket key file; haproxy and nginx defaults);
  - HTTPS keep-alive: wrk -t1 -c64 over TLS.
Proxy CPU per handshake or request comes from /proc/PID/stat (utime+stime), warm-up
excluded. Then, router only: the full-handshake rate with SNI = an alias whose own
certificate is loaded, with 1 alias certificate vs --certs (100k) loaded.

With --only-groups: the key exchange instead. Full handshakes by a rustls client
(bench-clients handshakes) offering the hybrid post-quantum group first
(X25519MLKEM768, then X25519, as browsers do) or X25519 only, against each proxy's
listener that cannot resume: the group each agreed on and the proxy's CPU per
handshake (haproxy and nginx on Debian 12's OpenSSL 3.0 have no ML-KEM: they agree
on X25519 whatever is offered).

With --client-cert: full handshakes in which the client presents a certificate
that each proxy verifies against a CA and a CRL (router `tls.client_certificates`
required with `crl_files`; haproxy `verify required ca-file crl-file`; nginx
`ssl_verify_client on` with `ssl_crl`), by the same rustls client offering X25519,
against the listeners that cannot resume; then the same listeners' plain full
handshakes are not measured (see --only-groups for those).

usage: bench/tls.py [--rounds N] [--handshakes N] [--duration S] [--certs N] [--pin]
                    [--only-groups | --client-cert]

Everything listens on 127.0.0.1; every process started here is stopped by PID."""

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("bench_http", os.path.join(ROOT, "bench", "http.py"))
H = importlib.util.module_from_spec(spec)
spec.loader.exec_module(H)
spec = importlib.util.spec_from_file_location("bench_start", os.path.join(ROOT, "bench", "start.py"))
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)

P = {"backend": 18080, "haproxy": 18443, "haproxy_full": 18445, "nginx": 18444, "nginx_full": 18446,
     "router": 18447, "router_full": 18448, "router_http": 18083, "router_full_http": 18084,
     "router_admin": 18093, "router_full_admin": 18094,
     "certs_https": 18449, "certs_http": 18085, "certs_admin": 18095}
HOST = H.HOST


def client_pki(d):
    """The clients' CA (client-ca.pem), a client certificate it signs
    (client.crt, client.key), and its CRL (crl.pem) revoking another
    certificate it signed: what each proxy verifies a client against."""
    H.write(f"{d}/client-ca.cnf", f"""[ca]
default_ca = bench
[bench]
dir = {d}
database = {d}/client-index.txt
new_certs_dir = {d}
certificate = {d}/client-ca.pem
private_key = {d}/client-ca.key
serial = {d}/client-serial
crlnumber = {d}/client-crlnumber
default_md = sha256
default_days = 2
default_crl_days = 2
policy = any
[any]
commonName = supplied
[client]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
""")
    H.write(f"{d}/client-index.txt", "")
    H.write(f"{d}/client-crlnumber", "01\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench client CA",
        "-keyout", "client-ca.key", "-out", "client-ca.pem")
    for name in ("client", "revoked"):
        run("req", *ec, "-subj", f"/CN={name}.bench", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("ca", "-batch", "-config", "client-ca.cnf", "-create_serial", "-extensions", "client",
            "-in", f"{name}.csr", "-out", f"{name}.crt", "-notext")
    run("ca", "-batch", "-config", "client-ca.cnf", "-revoke", "revoked.crt")
    run("ca", "-batch", "-config", "client-ca.cnf", "-gencrl", "-out", "crl.pem")


def proxies_config(d, client_cert=False):
    """Each proxy on two listeners: one that resumes, one that cannot
    (`_full`); with `client_cert` the latter also requires a client
    certificate, verified against client-ca.pem and crl.pem."""
    verify = {"nginx": "", "haproxy": "", "router": ""}
    if client_cert:
        verify = {
            "nginx": f"ssl_verify_client on;\n    ssl_client_certificate {d}/client-ca.pem;\n"
                     f"    ssl_crl {d}/crl.pem;",
            "haproxy": f" ca-file {d}/client-ca.pem crl-file {d}/crl.pem verify required",
            "router": f"  client_certificates:\n    mode: required\n    ca_file: {d}/client-ca.pem\n"
                      f"    crl_files: [{d}/crl.pem]\n",
        }
    H.nginx_conf(d, "nginx-tls", f"""
  {H.UPSTREAM}
  server {{
    listen 127.0.0.1:{P['nginx']} ssl backlog=4096;
    ssl_certificate {d}/tls.crt;
    ssl_certificate_key {d}/tls.key;
    ssl_protocols TLSv1.3;
    {H.PROXY_PASS}
  }}
  server {{
    listen 127.0.0.1:{P['nginx_full']} ssl backlog=4096;
    ssl_certificate {d}/tls.crt;
    ssl_certificate_key {d}/tls.key;
    ssl_protocols TLSv1.3;
    ssl_session_tickets off;
    ssl_session_cache off;
    {verify["nginx"]}
    {H.PROXY_PASS}
  }}""")
    # No server-side session cache: with no-tls-tickets nothing can resume there.
    head = H.HAPROXY_HEAD.replace("    nbthread 1\n", "    nbthread 1\n    tune.ssl.cachesize 0\n")
    H.write(f"{d}/haproxy-tls.cfg", head + f"""
frontend fe_tls
    bind 127.0.0.1:{P['haproxy']} ssl crt {d}/tls.pem ssl-min-ver TLSv1.3 alpn http/1.1
    default_backend be
frontend fe_tls_noresume
    bind 127.0.0.1:{P['haproxy_full']} ssl crt {d}/tls.pem ssl-min-ver TLSv1.3 alpn http/1.1 no-tls-tickets{verify["haproxy"]}
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{P['backend']}
""")
    with open(f"{d}/ticket.key", "wb") as f:
        f.write(os.urandom(48))
    for name, https, http, admin, tls_extra, spool in (
        ("router", P["router"], P["router_http"], P["router_admin"],
         f"  session_ticket_key_file: {d}/ticket.key\n", "spool-tickets"),
        ("router-full", P["router_full"], P["router_full_http"], P["router_full_admin"],
         "  resumption: false\n" + verify["router"], "spool-full"),
    ):
        os.makedirs(f"{d}/{spool}", exist_ok=True)
        H.write(f"{d}/{spool}/01-bench.yaml", H.ROUTE_EVENT)
        H.write(f"{d}/{name}.yaml", f"""
cloud_domain: example.com
state_dir: {d}/state-{name}
worker_threads: 1
listen:
  http: 127.0.0.1:{http}
  https: 127.0.0.1:{https}
  admin: 127.0.0.1:{admin}
tls:
  default_cert: {d}/tls.crt
  default_key: {d}/tls.key
{tls_extra}spi:
  source: spool
  spool:
    path: {d}/{spool}
health:
  checks: false
access_log:
  enabled: false
""")


def h2load(url, n, conns, connect_to=None, authority=HOST):
    args = ["h2load", "--h1", "-t1", f"-c{conns}", f"-n{n}", "-H", "Connection: close",
            "-H", f":authority: {authority}"]
    if connect_to:
        args.append(f"--connect-to={connect_to}")
    out = subprocess.run(args + [url], capture_output=True, text=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    took = re.search(r"finished in ([\d.]+)(ms|s),", out)
    resumed = re.search(r"TLS Protocol: \S+\nServer Temp Key.*", out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    if not done or not took:
        sys.exit(f"h2load output not understood:\n{out}")
    secs = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)
    return {"done": int(done.group(1)), "ok": int(done.group(2)), "failed": int(done.group(3)),
            "ok2xx": int(status.group(1)) if status else 0, "seconds": secs, "raw": out if resumed is None else ""}


def measure(pid, fn):
    before, t = H.stat_ticks(pid), time.time()
    r = fn()
    r["cpu_s"] = (H.stat_ticks(pid) - before) / H.HZ
    r["wall"] = time.time() - t
    return r


def wrk_https(port, seconds):
    out = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "-H", f"Host: {HOST}", f"https://127.0.0.1:{port}/"],
                         capture_output=True, text=True).stdout
    req = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests": req, "non2xx": int(non2xx.group(1)) if non2xx else 0}


def wait_https(port, sni_host=None, limit=60, cert=None):
    """Until `port` answers 200 (presenting `cert`, (crt, key), when given)."""
    deadline = time.time() + limit
    host = sni_host or HOST
    present = ["--cert", cert[0], "--key", cert[1]] if cert else []
    while time.time() < deadline:
        r = subprocess.run(["curl", "-sk", *present, "-o", "/dev/null", "-w", "%{http_code}", "--resolve",
                            f"{host}:{port}:127.0.0.1", f"https://{host}:{port}/"], capture_output=True, text=True)
        if r.stdout == "200":
            return
        time.sleep(0.2)
    sys.exit(f"https port {port} never answered 200 for {host}")


CLIENT_GROUPS = (("hybrid first", "x25519mlkem768,x25519"), ("x25519 only", "x25519"))


def rustls_handshakes(port, d, groups, n, cert=None):
    """bench-clients handshakes: n full handshakes offering `groups` (presenting
    `cert`, (crt, key), when given); its JSON."""
    env = dict(os.environ, CLIENT_CERT=cert[0], CLIENT_KEY=cert[1]) if cert else None
    out = subprocess.run([os.path.join(ROOT, "target/release/bench-clients"), "handshakes",
                          f"127.0.0.1:{port}", "router.test", f"{d}/tls.crt", groups, str(n), "50", HOST],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench-clients handshakes failed: {out.stderr}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["failed"]:
        print(f"  {r['failed']} failed: {out.stderr.strip()}", flush=True)
    return r


def groups_phase(d, procs, handshakes, rounds):
    """Per proxy and client offer: the group agreed and the proxy's CPU per full
    handshake (+1 request), rounds interleaved."""
    results = {}
    targets = (("router", P["router_full"], procs["router_full"].pid),
               ("haproxy", P["haproxy_full"], procs["haproxy"].pid),
               ("nginx", P["nginx_full"], procs["nginx"].pid))
    for rnd in range(rounds):
        for name, port, pid in targets[rnd % 3:] + targets[:rnd % 3]:
            for offer, groups in CLIENT_GROUPS:
                rustls_handshakes(port, d, groups, 500)
                r = measure(pid, lambda: rustls_handshakes(port, d, groups, handshakes))
                r["us_per_hs"] = r["cpu_s"] / max(r["ok"], 1) * 1e6
                results.setdefault((name, offer), []).append(r)
                print(f"round {rnd} {name:8} offers {offer:13} agreed {r['groups']}  "
                      f"{r['ok'] / r['seconds']:>6.0f}/s  proxy cpu {r['us_per_hs']:6.1f} us/hs  failed {r['failed']}",
                      flush=True)
    med = statistics.median
    print()
    print(f"Full TLS 1.3 handshakes (+1 request), rustls client, {rounds} rounds of {handshakes}:")
    print()
    print("| proxy | client offers | group agreed | proxy CPU µs per full handshake, median [range] |")
    print("|---|---|---|---|")
    for (name, offer), runs in results.items():
        us = [x["us_per_hs"] for x in runs]
        agreed = ", ".join(sorted({g for x in runs for g in x["groups"]}))
        print(f"| {name} | {offer} | {agreed} | {med(us):.1f} [{min(us):.1f}–{max(us):.1f}] |")
    hy, x = (med([r["us_per_hs"] for r in results[("router", o)]]) for o, _ in CLIENT_GROUPS)
    print(f"\nrouter: the hybrid costs {hy - x:.1f} µs more a handshake ({hy / x:.2f}x X25519's)")
    for p in ("haproxy", "nginx"):
        other = med([r["us_per_hs"] for r in results[(p, "x25519 only")]])
        print(f"router vs {p} (X25519 each): {x / other:.2f}x; router with the hybrid vs {p}: {hy / other:.2f}x")
    return results


def client_cert_phase(d, procs, handshakes, rounds):
    """Per proxy: CPU per full handshake (+1 request) in which the client
    presents a certificate verified against a CA and a CRL, rounds
    interleaved; a handshake that fails (a refused certificate) is counted."""
    cert = (f"{d}/client.crt", f"{d}/client.key")
    revoked = (f"{d}/revoked.crt", f"{d}/revoked.key")
    targets = (("router", P["router_full"], procs["router_full"].pid),
               ("haproxy", P["haproxy_full"], procs["haproxy"].pid),
               ("nginx", P["nginx_full"], procs["nginx"].pid))
    # Each proxy refuses the revoked certificate: the CRL is in force.
    for name, port, _ in targets:
        r = rustls_handshakes(port, d, "x25519", 5, revoked)
        if r["ok"]:
            sys.exit(f"{name} accepted a revoked client certificate: the comparison would be unequal")
    results = {}
    for rnd in range(rounds):
        for name, port, pid in targets[rnd % 3:] + targets[:rnd % 3]:
            rustls_handshakes(port, d, "x25519", 500, cert)
            r = measure(pid, lambda: rustls_handshakes(port, d, "x25519", handshakes, cert))
            r["us_per_hs"] = r["cpu_s"] / max(r["ok"], 1) * 1e6
            results.setdefault(name, []).append(r)
            print(f"round {rnd} {name:8} client certificate  {r['ok'] / r['seconds']:>6.0f}/s  "
                  f"proxy cpu {r['us_per_hs']:6.1f} us/hs  failed {r['failed']}", flush=True)
    med = statistics.median
    print()
    print(f"Full TLS 1.3 handshakes (+1 request) with a client certificate verified against a CA "
          f"and a CRL, rustls client (X25519), {rounds} rounds of {handshakes}:")
    print()
    print("| proxy | proxy CPU µs per full handshake, median [range] | failed |")
    print("|---|---|---|")
    for name, runs in results.items():
        us = [x["us_per_hs"] for x in runs]
        print(f"| {name} | {med(us):.1f} [{min(us):.1f}–{max(us):.1f}] | {sum(x['failed'] for x in runs)} |")
    mine = med([r["us_per_hs"] for r in results["router"]])
    for p in ("haproxy", "nginx"):
        other = med([r["us_per_hs"] for r in results[p]])
        by_round = ", ".join(f"{a['us_per_hs'] / b['us_per_hs']:.2f}x" for a, b in zip(results["router"], results[p]))
        print(f"router vs {p}: {mine / other:.2f}x (by round: {by_round})")
    return results


def certs_phase(d, router_bin, counts, handshakes, rounds, no_certs=False):
    """Router only: full-handshake cost with SNI = an alias that has its own
    certificate, with 1 vs N alias certificates loaded (resumption off)."""
    results = {}
    for n in counts:
        state = f"{d}/certs-{n}"
        t = time.time()
        subprocess.run([os.path.join(ROOT, "target/release/bench-certs"), state, str(n),
                        f"127.0.0.1:{P['backend']}"] + (["--no-certs"] if no_certs else []),
                       check=True, stderr=subprocess.DEVNULL)
        gen = time.time() - t
        H.write(f"{d}/certs-{n}.yaml", S.router_yaml(state, d, {
            "http": P["certs_http"], "https": P["certs_https"], "admin": P["certs_admin"]}))
        t = time.time()
        proc = subprocess.Popen([router_bin, "--config", f"{d}/certs-{n}.yaml"],
                                stdout=subprocess.DEVNULL, stderr=open(f"{d}/certs-{n}.log", "w"))
        try:
            alias = f"alias{n // 2}.bench.test"
            wait_https(P["certs_https"], alias, limit=600)
            ready = time.time() - t
            rss = S.rss_kb(proc.pid)
            url = f"https://{alias}:{P['certs_https']}/"
            connect_to = f"127.0.0.1:{P['certs_https']}"
            h2load(url, 1000, 50, connect_to, alias)
            runs = []
            for _ in range(rounds):
                r = measure(proc.pid, lambda: h2load(url, handshakes, 50, connect_to, alias))
                r["us_per_hs"] = r["cpu_s"] / r["ok"] * 1e6
                r["rate"] = r["ok"] / r["seconds"]
                runs.append(r)
                print(f"certs={n:>6} full handshakes {r['rate']:>7.0f}/s  router cpu {r['us_per_hs']:6.1f} us/hs  "
                      f"failed {r['failed']}", flush=True)
            # Again after the rounds (seconds later): background work such as the
            # restored certificates' expiry gauges has finished by then.
            results[n] = {"runs": runs, "generate_s": gen, "ready_s": ready, "rss_kb": rss,
                          "rss_after_kb": S.rss_kb(proc.pid)}
        finally:
            S.stop(proc)
    return results


# What this script calls, installed or built when missing (bench/needs.py).
_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--handshakes", type=int, default=5000)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--certs", type=int, default=100000)
    ap.add_argument("--pin", action="store_true", help="proxy on CPU 1; clients and backend on CPU 0")
    ap.add_argument("--only-certs", action="store_true", help="run the 1 vs --certs phase only")
    ap.add_argument("--only-groups", action="store_true",
                    help="the key-exchange groups phase only (hybrid post-quantum vs X25519)")
    ap.add_argument("--client-cert", action="store_true",
                    help="full handshakes presenting a client certificate verified against a CA and a CRL")
    ap.add_argument("--router", default=os.path.join(ROOT, "target/release/router"),
                    help="the router binary (e.g. an older build to compare)")
    ap.add_argument("--no-certs", action="store_true",
                    help="certificate phase: the same apps and aliases without certificates")
    args = ap.parse_args()
    NEEDS.tools('nginx', 'haproxy', 'wrk', 'h2load', 'curl', 'openssl')
    NEEDS.built('bench-certs', 'bench-clients')
    NEEDS.router(args.router)

    router_bin = args.router
    d = H.workdir("router-tls-bench-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{d}/tls.key", "-out", f"{d}/tls.crt", "-days", "2", "-subj", "/CN=router.test",
                    "-addext", "subjectAltName=DNS:router.test,IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:FALSE"], check=True, capture_output=True)
    with open(f"{d}/tls.pem", "w") as f:
        f.write(open(f"{d}/tls.crt").read() + open(f"{d}/tls.key").read())
    H.configs(d)
    if args.client_cert:
        client_pki(d)
    proxies_config(d, args.client_cert)
    procs = {}
    results = {}
    try:
        if args.only_certs:
            raise StopIteration
        procs["backend"] = subprocess.Popen(["nginx", "-c", f"{d}/backend.conf", "-p", d, "-g", "daemon off;"],
                                            stderr=subprocess.DEVNULL)
        procs["nginx"] = subprocess.Popen(["nginx", "-c", f"{d}/nginx-tls.conf", "-p", d, "-g", "daemon off;"],
                                          stderr=subprocess.DEVNULL)
        procs["haproxy"] = subprocess.Popen(["haproxy", "-W", "-db", "-f", f"{d}/haproxy-tls.cfg"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs["router"] = subprocess.Popen([router_bin, "--config", f"{d}/router.yaml"],
                                           stdout=subprocess.DEVNULL, stderr=open(f"{d}/router.log", "w"))
        procs["router_full"] = subprocess.Popen([router_bin, "--config", f"{d}/router-full.yaml"],
                                                stdout=subprocess.DEVNULL, stderr=open(f"{d}/router-full.log", "w"))
        H.wait_port(P["backend"])
        present = (f"{d}/client.crt", f"{d}/client.key") if args.client_cert else None
        for p in ("haproxy", "haproxy_full", "nginx", "nginx_full", "router", "router_full"):
            wait_https(P[p], cert=present if p.endswith("_full") else None)
        if args.pin:
            H.pin(procs["backend"].pid, {0})
            for name in ("nginx", "haproxy", "router", "router_full"):
                H.pin(procs[name].pid, {1})
            os.sched_setaffinity(0, {0})

        if args.only_groups:
            groups_phase(d, procs, args.handshakes, args.rounds)
            raise StopIteration
        if args.client_cert:
            client_cert_phase(d, procs, args.handshakes, args.rounds)
            raise StopIteration
        targets = ["router", "haproxy", "nginx"]
        results = {t: {"full": [], "resumed": [], "keepalive": []} for t in targets}
        for rnd in range(args.rounds):
            order = targets[rnd % 3:] + targets[:rnd % 3]
            for t in order:
                full_pid = procs["router_full" if t == "router" else t].pid
                pid = procs[t].pid
                for kind, port, ppid in (("full", P[f"{t}_full"], full_pid), ("resumed", P[t], pid)):
                    url = f"https://127.0.0.1:{port}/"
                    h2load(url, 1000, 50)
                    r = measure(ppid, lambda: h2load(url, args.handshakes, 50))
                    r["us_per_hs"] = r["cpu_s"] / max(r["ok"], 1) * 1e6
                    r["rate"] = r["ok"] / r["seconds"]
                    results[t][kind].append(r)
                    print(f"round {rnd} {t:8} {kind:8} {r['rate']:>7.0f}/s  proxy cpu {r['us_per_hs']:6.1f} us/hs  "
                          f"2xx {r['ok2xx']} failed {r['failed']}", flush=True)
                wrk_https(P[t], 3)
                r = measure(pid, lambda: wrk_https(P[t], args.duration))
                r["us_per_req"] = r["cpu_s"] / r["requests"] * 1e6
                r["rps"] = r["requests"] / r["wall"]
                results[t]["keepalive"].append(r)
                print(f"round {rnd} {t:8} https keep-alive {r['rps']:>8.0f} req/s  proxy cpu {r['us_per_req']:5.1f} us/req  "
                      f"non2xx {r['non2xx']}", flush=True)
        # Did the router's "resumed" runs resume? Its own counters say.
        m = subprocess.run(["curl", "-s", f"http://127.0.0.1:{P['router_admin']}/metrics"],
                           capture_output=True, text=True).stdout
        for kind in ("full", "resumed"):
            n = sum(int(v) for v in re.findall(rf'router_tls_handshakes_total{{[^}}]*kind="{kind}"[^}}]*}} (\d+)', m))
            print(f"router (resuming listener) handshakes {kind}: {n}")
    except StopIteration:
        pass
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    if args.only_groups or args.client_cert:
        shutil.rmtree(d, ignore_errors=True)
        return
    certs = {}
    procs = {}
    try:
        procs["backend"] = subprocess.Popen(["nginx", "-c", f"{d}/backend.conf", "-p", d, "-g", "daemon off;"],
                                            stderr=subprocess.DEVNULL)
        H.wait_port(P["backend"])
        certs = certs_phase(d, router_bin, [1, args.certs], args.handshakes, args.rounds, args.no_certs)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=15)
        shutil.rmtree(d, ignore_errors=True)

    med = statistics.median
    mode = "pinned (proxy CPU1; clients+backend CPU0)" if args.pin else "unpinned (all share 2 cores)"
    print()
    print(f"TLS 1.3, ECDSA P-256, {args.rounds} rounds, {mode}; h2load --h1 -t1 -c50 -n{args.handshakes} "
          f"(Connection: close); wrk -t1 -c64 -d{args.duration}s over TLS")
    print()
    print("| target | full handshakes/s | proxy CPU µs per full handshake (+1 request) | resumed/s | µs per resumed | "
          "HTTPS keep-alive req/s | proxy CPU µs/req |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for t in results:
        f, r, k = results[t]["full"], results[t]["resumed"], results[t]["keepalive"]
        rng = lambda xs: f"{med(xs):.0f} [{min(xs):.0f}–{max(xs):.0f}]"
        summary[t] = {"full_us": med([x["us_per_hs"] for x in f]), "resumed_us": med([x["us_per_hs"] for x in r]),
                      "keepalive_us": med([x["us_per_req"] for x in k])}
        print(f"| {t} | {rng([x['rate'] for x in f])} | {rng([x['us_per_hs'] for x in f])} | "
              f"{rng([x['rate'] for x in r])} | {rng([x['us_per_hs'] for x in r])} | "
              f"{rng([x['rps'] for x in k])} | {med([x['us_per_req'] for x in k]):.1f} "
              f"[{min(x['us_per_req'] for x in k):.1f}–{max(x['us_per_req'] for x in k):.1f}] |")
    print()
    for p in ("haproxy", "nginx"):
        if p in summary and "router" in summary:
            print(f"router vs {p}: CPU per full handshake {summary['router']['full_us'] / summary[p]['full_us']:.2f}x, "
                  f"per resumed {summary['router']['resumed_us'] / summary[p]['resumed_us']:.2f}x, "
                  f"per keep-alive request {summary['router']['keepalive_us'] / summary[p]['keepalive_us']:.2f}x")
    print()
    print("| alias certificates loaded | full handshakes/s (SNI = an alias) | router CPU µs per handshake | "
          "start to first HTTPS 200 | RSS then | RSS after the rounds |")
    print("|---|---|---|---|---|---|")
    for n, c in certs.items():
        rates = [x["rate"] for x in c["runs"]]
        us = [x["us_per_hs"] for x in c["runs"]]
        print(f"| {n} | {med(rates):.0f} [{min(rates):.0f}–{max(rates):.0f}] | {med(us):.1f} | {c['ready_s']:.1f} s | "
              f"{c['rss_kb'] / 1024:.0f} MiB | {c['rss_after_kb'] / 1024:.0f} MiB |")
    if len(certs) == 2:
        a, b = (certs[n] for n in certs)
        print(f"\nrate with {args.certs} certificates / rate with 1: "
              f"{med([x['rate'] for x in b['runs']]) / med([x['rate'] for x in a['runs']]):.2f}; "
              f"CPU per handshake ratio {med([x['us_per_hs'] for x in b['runs']]) / med([x['us_per_hs'] for x in a['runs']]):.2f}")
    with open(os.path.join(ROOT, "bench", "last-tls.json"), "w") as f:
        json.dump({"args": vars(args), "results": results, "summary": summary,
                   "certs": {str(k): v for k, v in certs.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
