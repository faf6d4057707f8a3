"""What a bench script calls, installed or built when it is missing, so that
each script runs alone on a fresh Debian machine (bench/run.sh did this for
http.py only).

    needs = load_needs()            # see the loader at the top of each script
    needs.tools("nginx", "h2load")  # apt-get install what is not on PATH
    needs.built("bench-certs")      # cargo build --release what is not built

Debian's packages, by the command they give: nginx-light is nginx without the
modules a static backend and a reverse proxy do not use."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Command -> Debian 12 package.
PACKAGES = {
    "nginx": "nginx-light",
    "haproxy": "haproxy",
    "wrk": "wrk",
    "h2load": "nghttp2-client",
    "curl": "curl",
    "openssl": "openssl",
    "valgrind": "valgrind",
    "strace": "strace",
    "slowhttptest": "slowhttptest",
    "pebble": "pebble",
    "perf": "linux-perf",
}

# Our binary -> the package that builds it (release profile).
OWN = {
    "router": "router",
    "portproxy": "portproxy",
    "echo-backend": "e2e",
    "bench-certs": "e2e",
    "bench-h1-floor": "e2e",
    "h3-client": "e2e",
    "bench-clients": "e2e",
    "bench-tcp": "e2e",
}


def tools(*commands):
    """Installs the package of every command in `commands` not on PATH."""
    missing = [c for c in commands if shutil.which(c) is None and not os.path.exists(f"/usr/sbin/{c}")]
    if not missing:
        return
    unknown = [c for c in missing if c not in PACKAGES]
    if unknown:
        sys.exit(f"needs {', '.join(unknown)}, which bench/needs.py does not know how to install")
    packages = sorted({PACKAGES[c] for c in missing})
    if os.geteuid() != 0:
        sys.exit(f"needs {', '.join(missing)}: run as root, or apt-get install {' '.join(packages)}")
    print(f"installing {' '.join(packages)} (for {', '.join(missing)})", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, env=env)


def built(*binaries):
    """Builds (release) every one of our `binaries` not in target/release."""
    missing = [b for b in binaries if not os.path.exists(os.path.join(ROOT, "target/release", b))]
    if not missing:
        return
    cmd = ["cargo", "build", "--release"]
    for package in sorted({OWN[b] for b in missing}):
        cmd += ["-p", package]
    for b in missing:
        cmd += ["--bin", b]
    print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)


def router(path, binary="router"):
    """The binary a script measures: built when it is the default
    (target/release/BINARY) and missing; any other path must exist."""
    if os.path.exists(path):
        return
    if os.path.abspath(path) == os.path.join(ROOT, "target/release", binary):
        built(binary)
        return
    sys.exit(f"{path} is missing (build it first: bash deploy/pgo.sh for the shipped one)")


def sibling(name):
    """Another module of bench/ by its file name (bench/http.py shadows the
    standard library's `http`, so bench/ is not on the import path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
