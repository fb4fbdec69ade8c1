#!/usr/bin/env python3
"""A link outage in the middle of an upload: `reachability upload` against the peers users have,
in one run.

A client namespace reaches a server namespace over a veth pair whose client side is shaped with
tc tbf (--rate, 64 Mbit/s by default). The server namespace runs a real tus server (aiohttp-tus,
Tests/Servers/tus_server.py) and the test server that speaks the IETF resumable-upload draft-05
and plain PUT (Tests/Servers/upload_server.py). Each tool uploads the same file (--size-mib,
64 by default); once a quarter of it has left the client interface (its tx counter), the link
goes down for --outage seconds and comes back (link), or the server namespace resets every
connection to the client with `ss -K` (reset). Measured: wall time from start to exit, bytes the
client interface sent (the wire, headers included) against the file's size, exit status, and
whether the server's file has the file's SHA-256.

Tools: reachability upload over tus and over the IETF draft; tuspy (the tus Python client, with
its retries: retries=30, retry_delay=1 s, default chunk size, the file name in Upload-Metadata); curl -T with --retry 30
--retry-all-errors --retry-delay 1 (a plain PUT).

Needs root, a built `reachability` (swift build), aiohttp-tus and tuspy (scripts/setup.sh
--bench). Namespaces are named rchB<pid>-*, always removed.
Usage: bench/upload_bench.py [--binary .build/debug/reachability] [--size-mib 64] [--rate 64mbit]
                             [--outage 5] [--runs 1] [--modes link,reset]
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

PREFIX = f"rchB{os.getpid()}"
CLIENT = f"{PREFIX}-c"
SERVER = f"{PREFIX}-s"
SERVER_ADDRESS = "10.90.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "..", "Tests", "Servers")


def run(*command, check=True):
    return subprocess.run(command, check=check, capture_output=True, text=True).stdout


def ip(command, check=True):
    return run("ip", *command.split(), check=check)


def setup_network(rate):
    ip(f"netns add {CLIENT}")
    ip(f"netns add {SERVER}")
    for namespace in (CLIENT, SERVER):
        ip(f"-n {namespace} link set lo up")
    ip(f"link add eth1 netns {CLIENT} type veth peer name peth1 netns {SERVER}")
    ip(f"-n {SERVER} addr add {SERVER_ADDRESS}/24 dev peth1")
    ip(f"-n {SERVER} link set peth1 up")
    ip(f"-n {CLIENT} addr add 10.90.0.2/24 dev eth1")
    link_up()
    run("ip", "netns", "exec", CLIENT, "tc", "qdisc", "add", "dev", "eth1", "root", "tbf",
        "rate", rate, "burst", "64kb", "latency", "50ms")


def link_up():
    ip(f"-n {CLIENT} link set eth1 up")
    ip(f"-n {CLIENT} route replace default via {SERVER_ADDRESS} dev eth1")


def link_down():
    ip(f"-n {CLIENT} link set eth1 down")


def transmitted():
    """Bytes the client interface has sent (the wire, with headers)."""
    text = run("ip", "-n", CLIENT, "-j", "-s", "link", "show", "eth1")
    return json.loads(text)[0]["stats64"]["tx"]["bytes"]


def start_server(script, directory, port):
    process = subprocess.Popen(["ip", "netns", "exec", SERVER, sys.executable, os.path.join(SERVERS, script),
                                "--directory", directory, "--address", SERVER_ADDRESS, "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    process.stdout.readline()   # "port N" once it listens
    return process


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The filename in Upload-Metadata, as tus clients send it: aiohttp-tus answers 404 without it.
TUSPY = """
import os, sys
from tusclient import client
uploader = client.TusClient(sys.argv[2]).uploader(sys.argv[1], metadata={"filename": os.path.basename(sys.argv[1])},
                                                  retries=30, retry_delay=1)
uploader.upload()
"""


def tools(args, path):
    binary = os.path.abspath(args.binary)
    return [
        ("reachability (tus)", [binary, "upload", "-q", path, f"http://{SERVER_ADDRESS}:8080/uploads"], "tus"),
        ("reachability (ietf)", [binary, "upload", "-q", "--protocol", "ietf", path, f"http://{SERVER_ADDRESS}:8081/ietf/"], "ietf"),
        ("tuspy (retries=30)", [sys.executable, "-c", TUSPY, path, f"http://{SERVER_ADDRESS}:8080/uploads"], "tus"),
        ("curl -T --retry 30", ["curl", "-sS", "-o", "/dev/null", "-T", path, "--retry", "30", "--retry-all-errors",
                                "--retry-delay", "1", f"http://{SERVER_ADDRESS}:8081/plain/upload.bin"], "plain"),
    ]


def stored_file(kind, directories, name):
    if kind == "tus":
        return os.path.join(directories["tus"], name)
    if kind == "plain":
        return os.path.join(directories["draft"], "upload.bin")
    # The draft server names the file after the upload's id (32 hex digits).
    ids = [entry for entry in os.listdir(directories["draft"]) if len(entry) == 32]
    return os.path.join(directories["draft"], ids[0]) if len(ids) == 1 else ""


def reset_connections():
    """The server resets every connection to the client (a restart, a load balancer)."""
    run("ip", "netns", "exec", SERVER, "ss", "-K", "dst", "10.90.0.2")


def measure(name, command, kind, args, path, digest, directories, size, mode):
    for directory in directories.values():
        for entry in os.listdir(directory):
            if entry != "_stats.json":
                full = os.path.join(directory, entry)
                shutil.rmtree(full) if os.path.isdir(full) else os.remove(full)
    before = transmitted()
    started = time.monotonic()
    process = subprocess.Popen(["ip", "netns", "exec", CLIENT] + command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    cut = None
    while process.poll() is None and cut is None:
        if transmitted() - before >= size // 4:
            if mode == "link":
                link_down()
            else:
                reset_connections()
            cut = time.monotonic()
        time.sleep(0.01)
    if cut is not None and mode == "link":
        time.sleep(max(0, args.outage - (time.monotonic() - cut)))
        link_up()
    try:
        status = process.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        status = "timeout"
    elapsed = time.monotonic() - started
    wire = transmitted() - before
    stored = stored_file(kind, directories, os.path.basename(path))
    same = os.path.exists(stored) and sha256(stored) == digest
    return {"outage": mode, "tool": name, "time": f"{elapsed:.1f} s", "wire": f"{wire / (1 << 20):.1f} MiB",
            "extra": f"{(wire - size) / (1 << 20):+.1f} MiB", "exit": str(status), "identical": "yes" if same else "NO",
            "cut": "yes" if cut is not None else "finished first"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/debug/reachability")
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--rate", default="64mbit")
    parser.add_argument("--outage", type=float, default=5)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--modes", default="link,reset")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("upload_bench: needs root (network namespaces)")
    workdir = tempfile.mkdtemp(prefix="rch-upload-bench-")
    servers = []
    try:
        setup_network(args.rate)
        directories = {"tus": os.path.join(workdir, "tus"), "draft": os.path.join(workdir, "draft")}
        for directory in directories.values():
            os.makedirs(directory)
        servers.append(start_server("tus_server.py", directories["tus"], 8080))
        servers.append(start_server("upload_server.py", directories["draft"], 8081))
        size = args.size_mib << 20
        path = os.path.join(workdir, "client", "storm.bin")
        os.makedirs(os.path.dirname(path))
        with open(path, "wb") as out:
            out.write(os.urandom(size))
        digest = sha256(path)
        rows = []
        for _ in range(args.runs):
            for mode in args.modes.split(","):
                for name, command, kind in tools(args, path):
                    rows.append(measure(name, command, kind, args, path, digest, directories, size, mode))
        print(f"upload of {args.size_mib} MiB at {args.rate}; at a quarter: link down {args.outage} s (link), "
              "or the server resets every connection (reset):")
        columns = ["outage", "tool", "time", "wire", "extra", "exit", "identical", "cut"]
        widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
        print("  ".join(c.ljust(widths[c]) for c in columns))
        for row in rows:
            print("  ".join(row[c].ljust(widths[c]) for c in columns))
    finally:
        for server in servers:
            server.kill()
        for namespace in (CLIENT, SERVER):
            ip(f"netns del {namespace}", check=False)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
