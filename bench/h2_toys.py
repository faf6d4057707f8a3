#!/usr/bin/env python3
"""What h2 framing costs a request end to end, without the router's request
path: the same plain-text h2 server (prior knowledge; `GET` answered `hello
PATH`) on `h2-codec` (`h2-codec/examples/toy.rs`) and on hyper's server with
the `h2` crate (`toy_hyper.rs`, the router's h2 stack today), each under
callgrind while h2load sends N requests on one connection, 10 streams at a
time; the difference between two N, per request.

    python3 bench/h2_toys.py [--n1 1000 --n2 11000]

Needs valgrind and h2load (installed when missing) and builds the two
examples (release)."""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import counted as C  # noqa: E402
import needs as NEEDS  # noqa: E402


def run(binary, n, out):
    """Instructions of `binary` serving `n` h2c requests (and starting)."""
    p = subprocess.Popen(C.wrapped(out, False) + [binary, "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(p.stdout.readline())
        C.wait_tcp(port)
        said = subprocess.run(["h2load", "-n", str(n), "-c", "1", "-m", "10",
                               f"http://127.0.0.1:{port}/"], capture_output=True, text=True).stdout
        if f"{n} succeeded" not in said:
            sys.exit(f"h2load against {binary}:\n{said}")
    finally:
        C.stop(p, False)
    total = C.total(out, False)
    if total is None:
        sys.exit(f"no totals in {out}")
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n1", type=int, default=1000)
    ap.add_argument("--n2", type=int, default=11000)
    args = ap.parse_args()
    NEEDS.tools("valgrind", "h2load")
    subprocess.run(["cargo", "build", "--release", "-p", "h2-codec", "--example", "toy",
                    "--example", "toy_hyper"], cwd=NEEDS.ROOT, check=True)
    figures = {}
    with tempfile.TemporaryDirectory() as d:
        for name in ("toy", "toy_hyper"):
            binary = os.path.join(NEEDS.ROOT, "target/release/examples", name)
            a = run(binary, args.n1, f"{d}/{name}-1.out")
            b = run(binary, args.n2, f"{d}/{name}-2.out")
            figures[name] = (b - a) / (args.n2 - args.n1)
            print(f"{name}: {figures[name]:,.0f} instructions a request")
    print(f"h2-codec against hyper and h2: {figures['toy'] / figures['toy_hyper']:.2f}x")


if __name__ == "__main__":
    main()
