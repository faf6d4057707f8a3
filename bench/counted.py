"""What the scripts that count share (bench/instructions.py for the router,
bench/portproxy_calls.py for the port proxy): a process run under callgrind
(user-space instructions) or `strace -c` (system calls), stopped so that the
counter writes its totals, and those totals read back; and waiting for a port
to listen."""

import os
import socket
import sys
import time


def wrapped(out, syscalls):
    """The command prefix that counts a process into `out`."""
    if syscalls:
        return ["strace", "-f", "-c", "-o", out]
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def stop(p, syscalls):
    """Ends a counted process: under strace, the traced child (strace then
    prints its counts and exits); under valgrind, valgrind itself."""
    if syscalls:
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                for child in f.read().split():
                    os.kill(int(child), 15)
        except OSError:
            p.terminate()
    else:
        p.terminate()
    p.wait(timeout=120)


def total(out, syscalls):
    """The total in one callgrind or `strace -c` output, or None."""
    with open(out) as f:
        for line in f:
            if syscalls and line.split()[-1:] == ["total"]:
                return int(line.split()[3])
            if not syscalls and line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def by_name(out):
    """Calls per system call name in one `strace -c` output."""
    calls = {}
    with open(out) as f:
        for line in f:
            t = line.split()
            if len(t) >= 5 and t[0][0].isdigit() and t[-1] != "total":
                calls[t[-1]] = int(t[3])
    return calls


def wait_tcp(port, limit=20):
    """Returns once something accepts on 127.0.0.1:`port`; exits after `limit` s."""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port} after {limit} s")
