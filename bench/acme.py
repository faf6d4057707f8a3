#!/usr/bin/env python3
"""What an ACME order costs the router: time from `add_alias` to the first handshake
that verifies against the CA's root, and the router's CPU for it, against Pebble
(Debian `pebble`) on this machine.

usage: bench/acme.py [--router BIN] [--aliases N] [--challenge http-01|tls-alpn-01]

Two rounds of N aliases each, one alias at a time: Pebble as shipped (a random wait
of up to 15 s before each validation, as a CA's queue would add) and with
PEBBLE_VA_NOSLEEP=1 (what is left is the router's and the protocol's own time).
Router CPU per order is its threads' run time (/proc schedstat) over the order,
minus the same span idle. Fixed ports 18680-18692 on 127.0.0.1; every process started here is
stopped by PID. A renewal is one more order of the same kind (the certificate in
service stays meanwhile), so it costs what an order costs."""

import os
import sys

# bench/http.py (loaded by shapes.py) shadows the standard library's `http`.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import ssl  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_shapes", os.path.join(ROOT, "bench", "shapes.py"))
SHAPES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(SHAPES)
HTTP, HTTPS, ADMIN, ACME, MGMT, DNS = 18680, 18681, 18682, 18690, 18691, 18692


_needs_spec = importlib.util.spec_from_file_location(
    "bench_needs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "needs.py"))
NEEDS = importlib.util.module_from_spec(_needs_spec)
_needs_spec.loader.exec_module(NEEDS)
C = NEEDS.sibling("counted")


def cpu(pid):
    """CPU seconds of every thread of `pid` (schedstat: nanoseconds, not ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def certs(d):
    """A CA and a leaf for 127.0.0.1 (Pebble's own HTTPS), a self-signed default
    certificate for the router (tls.crt, tls.key)."""
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem", "-days", "2", "-subj", "/CN=bench pebble CA")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{d}/key.pem", "-out", f"{d}/leaf.csr", "-subj", "/CN=127.0.0.1")
    with open(f"{d}/ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", f"{d}/leaf.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
        "-CAcreateserial", "-out", f"{d}/cert.pem", "-days", "2", "-extfile", f"{d}/ext")
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{d}/tls.key", "-out", f"{d}/tls.crt", "-days", "2", "-subj", "/CN=default")


def pebble_root(d):
    out = subprocess.run(["curl", "-s", "--cacert", f"{d}/ca.pem", f"https://127.0.0.1:{MGMT}/roots/0"],
                         capture_output=True, text=True).stdout
    if "BEGIN CERTIFICATE" not in out:
        sys.exit(f"Pebble's root: {out!r}")
    with open(f"{d}/root.pem", "w") as f:
        f.write(out)
    return f"{d}/root.pem"


def verified(name, root):
    ctx = ssl.create_default_context(cafile=root)
    try:
        with socket.create_connection(("127.0.0.1", HTTPS), timeout=2) as s:
            with ctx.wrap_socket(s, server_hostname=name):
                return True
    except (OSError, ssl.SSLError):
        return False


def round_(args, d, nosleep):
    env = dict(os.environ, PEBBLE_VA_NOSLEEP="1") if nosleep else dict(os.environ)
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["pebble-challtestsrv", "-dns01", f"127.0.0.1:{DNS}", "-http01", "", "-https01", "", "-tlsalpn01", "",
             "-management", "127.0.0.1:18693", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with open(f"{d}/pebble.json", "w") as f:
            json.dump({"pebble": {
                "listenAddress": f"127.0.0.1:{ACME}", "managementListenAddress": f"127.0.0.1:{MGMT}",
                "certificate": f"{d}/cert.pem", "privateKey": f"{d}/key.pem", "httpPort": HTTP,
                "tlsPort": HTTPS, "ocspResponderURL": "", "externalAccountBindingRequired": False}}, f)
        procs.append(subprocess.Popen(["pebble", "-config", f"{d}/pebble.json", "-dnsserver", f"127.0.0.1:{DNS}"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        C.wait_tcp(ACME)
        C.wait_tcp(MGMT)
        root = pebble_root(d)
        state = tempfile.mkdtemp(prefix="router-acme-bench-", dir=d)
        os.makedirs(f"{state}/spool")
        # The bench's router configuration (shapes.py's: access log and checks off)
        # with the default certificate in `d`, one worker, ACME on for every app.
        config = SHAPES.router_yaml(d, os.path.basename(state), HTTP, HTTPS, ADMIN, f"{state}/spool",
                                    interval="50ms")
        with open(f"{state}/router.yaml", "w") as f:
            f.write(config + f"""acme:
  directory: https://127.0.0.1:{ACME}/dir
  ca_file: {d}/ca.pem
  check_interval: 1s
  challenge: {args.challenge}
app_defaults:
  acme: true
""")
        with open(f"{state}/spool/0000.yaml", "w") as f:
            f.write("---\n:action: :add_public_endpoint\n:app_name: shop\n:namespace: bench\n"
                    ":gear_id: 5464c9f6e0b8cd5a6e000001\n:public_port_name: haproxy-1.4\n"
                    ":public_address: 127.0.0.1\n:public_port: 9\n:protocols:\n- http\n:types:\n"
                    "- load_balancer\n:mappings: []\n")
        router = subprocess.Popen([args.router, "--config", f"{state}/router.yaml"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(router)
        C.wait_tcp(HTTPS)
        time.sleep(1)
        idle0, t0 = cpu(router.pid), time.time()
        time.sleep(5)
        idle_per_s = (cpu(router.pid) - idle0) / (time.time() - t0)
        times, cpus = [], []
        for i in range(args.aliases):
            alias = f"a{i}-{int(time.time())}.example.test"
            c0, t0 = cpu(router.pid), time.time()
            with open(f"{state}/spool/.{i}.tmp", "w") as f:
                f.write(f"---\n:action: :add_alias\n:app_name: shop\n:namespace: bench\n:alias: {alias}\n")
            os.rename(f"{state}/spool/.{i}.tmp", f"{state}/spool/{i + 1:04d}.yaml")
            while not verified(alias, root):
                if time.time() - t0 > 120:
                    sys.exit(f"{alias}: no certificate within 120 s")
                time.sleep(0.05)
            t1 = time.time()
            times.append(t1 - t0)
            cpus.append(max(0.0, cpu(router.pid) - c0 - idle_per_s * (t1 - t0)))
        shutil.rmtree(state, ignore_errors=True)
        return times, cpus
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", default=os.path.join(ROOT, "target/release/router"))
    ap.add_argument("--aliases", type=int, default=5)
    ap.add_argument("--challenge", default="http-01", choices=["http-01", "tls-alpn-01"])
    args = ap.parse_args()
    for tool in ("pebble", "pebble-challtestsrv", "openssl", "curl"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (apt-get install pebble openssl curl)")
    d = tempfile.mkdtemp(prefix="acme-bench-")
    try:
        certs(d)
        print(f"| Pebble | challenge | orders | add_alias → first verified handshake, median [min–max] | router CPU per order, median [min–max] |")
        print("|---|---|---|---|---|")
        for nosleep in (True, False):
            times, cpus = round_(args, d, nosleep)
            print(f"| {'PEBBLE_VA_NOSLEEP=1' if nosleep else 'as shipped (random wait ≤ 15 s)'} | {args.challenge} "
                  f"| {len(times)} | {statistics.median(times):.2f} s [{min(times):.2f}–{max(times):.2f}] "
                  f"| {statistics.median(cpus) * 1000:.0f} ms [{min(cpus) * 1000:.0f}–{max(cpus) * 1000:.0f}] |",
                  flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
