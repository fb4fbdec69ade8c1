#!/usr/bin/env python3
"""Issue 28's four outages in the middle of an upload: `reachability upload` against the peers
users have, in one run.

A client namespace reaches a server namespace (its address on loopback) over two veth uplinks whose
client sides are shaped with tc tbf (--rate, 256 Mbit/s by default); the second is up only in the
path-switch mode. The server namespace runs a real tus server (aiohttp-tus,
Tests/Servers/tus_server.py) and the test server that speaks the IETF resumable-upload draft-05
and plain PUT (Tests/Servers/upload_server.py). Each tool uploads the same file (--size-mib, 256
by default); once a random 10-90 % of it has left the client's interfaces (their tx counters),
the outage begins and lasts --outage seconds:
- link: the only uplink goes down, then up again;
- switch: the primary uplink goes down with the second one up (a path switch), then back up;
- blackhole: the server namespace DROPs everything from the client (its path stays up);
- reset: the client namespace REJECTs its segments to the server with tcp-reset (RSTs exempt).
Measured per run: wall time from start to exit, bytes the client's interfaces sent (the wire, as
the kernel counts it) against the file's size, exit status, and whether the server's file has the
file's SHA-256. A tool still running --timeout seconds (90) after its start is killed ("timeout").
With --runs N, a summary gives each tool's worst and median per outage.

Tools: reachability upload over tus and over the IETF draft; tuspy (the tus Python client, with
its retries: retries=30, retry_delay=1 s, default chunk size, the file name in Upload-Metadata);
curl -T with --retry 30 --retry-all-errors --retry-delay 1 --speed-limit 1 --speed-time 5 (a plain PUT); Foundation's URLSession
(swift-corelibs-foundation: bench/foundation_upload.swift, built here with swiftc -O,
uploadTask(with:fromFile:) as a plain PUT, the whole file again after an error, as a Linux port of
an iOS app would without resumable uploads).

Needs root, a built `reachability` (swift build), swiftc, aiohttp-tus and tuspy (scripts/setup.sh
--bench). Namespaces are named rchB<pid>-*, always removed.
Usage: bench/upload_bench.py [--binary .build/debug/reachability] [--size-mib 256] [--rate 256mbit]
                             [--outage 5] [--runs 3] [--modes link,switch,blackhole,reset]
                             [--tools reachability-tus,reachability-ietf,tuspy,curl,foundation]
"""
import argparse
import hashlib
import random
import statistics
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


CLIENT_ADDRESSES = ("10.90.1.2", "10.90.2.2")


def setup_network(rate):
    ip(f"netns add {CLIENT}")
    ip(f"netns add {SERVER}")
    for namespace in (CLIENT, SERVER):
        ip(f"-n {namespace} link set lo up")
    # The server's address on its loopback: reachable over either uplink.
    ip(f"-n {SERVER} addr add {SERVER_ADDRESS}/32 dev lo")
    for index in (1, 2):
        ip(f"link add eth{index} netns {CLIENT} type veth peer name peth{index} netns {SERVER}")
        ip(f"-n {SERVER} addr add 10.90.{index}.1/24 dev peth{index}")
        ip(f"-n {SERVER} link set peth{index} up")
        ip(f"-n {CLIENT} addr add 10.90.{index}.2/24 dev eth{index}")
        run("ip", "netns", "exec", CLIENT, "tc", "qdisc", "add", "dev", f"eth{index}", "root", "tbf",
            "rate", rate, "burst", "64kb", "latency", "50ms")
    link_up(1)


def link_up(index):
    ip(f"-n {CLIENT} link set eth{index} up")
    # The default route goes with the link.
    ip(f"-n {CLIENT} route replace default via 10.90.{index}.1 dev eth{index} metric {index * 100}")


def link_down(index):
    ip(f"-n {CLIENT} link set eth{index} down")


def transmitted():
    """Bytes the client's interfaces have sent (the wire, as the kernel counts it)."""
    total = 0
    for index in (1, 2):
        text = run("ip", "-n", CLIENT, "-j", "-s", "link", "show", f"eth{index}")
        total += json.loads(text)[0]["stats64"]["tx"]["bytes"]
    return total


RESET_RULE = ["OUTPUT", "-p", "tcp", "!", "--tcp-flags", "RST", "RST", "-j", "REJECT", "--reject-with", "tcp-reset"]


def iptables(namespace, action, rule):
    run("ip", "netns", "exec", namespace, "iptables", action, *rule)


def begin_outage(mode):
    if mode == "link":
        link_down(1)
    elif mode == "switch":
        link_down(1)
    elif mode == "blackhole":
        for address in CLIENT_ADDRESSES:
            iptables(SERVER, "-A", ["INPUT", "-s", address, "-j", "DROP"])
    elif mode == "reset":
        iptables(CLIENT, "-A", RESET_RULE)


def end_outage(mode):
    if mode in ("link", "switch"):
        link_up(1)
    elif mode == "blackhole":
        for address in CLIENT_ADDRESSES:
            iptables(SERVER, "-D", ["INPUT", "-s", address, "-j", "DROP"])
    elif mode == "reset":
        iptables(CLIENT, "-D", RESET_RULE)


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


def tools(args, path, foundation):
    binary = os.path.abspath(args.binary)
    every = {
        "reachability-tus": ("reachability (tus)", [binary, "upload", "-q", path, f"http://{SERVER_ADDRESS}:8080/uploads"], "tus"),
        "reachability-ietf": ("reachability (ietf)", [binary, "upload", "-q", "--protocol", "ietf", path,
                                                      f"http://{SERVER_ADDRESS}:8081/ietf/"], "ietf"),
        "tuspy": ("tuspy (retries=30)", [sys.executable, "-c", TUSPY, path, f"http://{SERVER_ADDRESS}:8080/uploads"], "tus"),
        # --speed-time 5: a stalled transfer ends after 5 s and is retried, like Foundation's
        # timeoutIntervalForRequest below (without it a path switch leaves curl waiting on a dead
        # connection until TCP gives up, as tuspy, which has no timeout, does).
        "curl": ("curl -T --retry 30", ["curl", "-sS", "-o", "/dev/null", "-T", path, "--retry", "30", "--retry-all-errors",
                                        "--retry-delay", "1", "--speed-limit", "1", "--speed-time", "5",
                                        f"http://{SERVER_ADDRESS}:8081/plain/upload.bin"], "plain"),
        "foundation": ("Foundation URLSession", [foundation, path, f"http://{SERVER_ADDRESS}:8081/plain/upload.bin", "30"], "plain"),
    }
    return [every[name] for name in args.tools.split(",")]


def build_foundation(workdir):
    """Builds bench/foundation_upload.swift (swift-corelibs-foundation's URLSession)."""
    output = os.path.join(workdir, "foundation_upload")
    run("swiftc", "-O", os.path.join(HERE, "foundation_upload.swift"), "-o", output)
    return output


def stored_file(kind, directories, name):
    if kind == "tus":
        return os.path.join(directories["tus"], name)
    if kind == "plain":
        return os.path.join(directories["draft"], "upload.bin")
    # The draft server names the file after the upload's id (32 hex digits).
    ids = [entry for entry in os.listdir(directories["draft"]) if len(entry) == 32]
    return os.path.join(directories["draft"], ids[0]) if len(ids) == 1 else ""


# The tool being measured, killed if the bench is interrupted.
RUNNING = []


def measure(name, command, kind, args, path, digest, directories, size, mode):
    for directory in directories.values():
        for entry in os.listdir(directory):
            if entry != "_stats.json":
                full = os.path.join(directory, entry)
                shutil.rmtree(full) if os.path.isdir(full) else os.remove(full)
    if mode == "switch":
        link_up(2)
    before = transmitted()
    point = random.uniform(0.1, 0.9)
    started = time.monotonic()
    errors = open(os.path.join(os.path.dirname(path), "..", "stderr.txt"), "w+")
    process = subprocess.Popen(["ip", "netns", "exec", CLIENT] + command, stdout=subprocess.DEVNULL, stderr=errors)
    RUNNING.append(process)
    cut = None
    while process.poll() is None and cut is None:
        if transmitted() - before >= size * point:
            begin_outage(mode)
            cut = time.monotonic()
        time.sleep(0.01)
    # A path switch stays switched until the tool is done (the primary's return would be a second switch).
    if cut is not None and mode != "switch":
        while process.poll() is None and time.monotonic() - cut < args.outage:
            time.sleep(0.01)
        end_outage(mode)
    try:
        status = process.wait(timeout=max(0.1, args.timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        status = "timeout"
    RUNNING.remove(process)
    elapsed = time.monotonic() - started
    errors.seek(0)
    said = errors.read().strip().splitlines()
    errors.close()
    wire = transmitted() - before
    if mode == "switch":
        if cut is not None:
            end_outage(mode)
        link_down(2)
        ip(f"-n {CLIENT} route del default via 10.90.2.1 dev eth2", check=False)
    stored = stored_file(kind, directories, os.path.basename(path))
    same = os.path.exists(stored) and sha256(stored) == digest
    return {"outage": mode, "tool": name, "at": f"{point * 100:.0f} %", "time": elapsed, "wire": wire,
            "extra": wire - size, "exit": str(status), "identical": same, "cut": cut is not None,
            "said": said[-1] if said else ""}


def show(rows, columns):
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(row[c].ljust(widths[c]) for c in columns))


def mib(count):
    return f"{count / (1 << 20):.1f} MiB"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/debug/reachability")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rate", default="256mbit")
    parser.add_argument("--outage", type=float, default=5)
    parser.add_argument("--timeout", type=float, default=90)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="link,switch,blackhole,reset")
    parser.add_argument("--tools", default="reachability-tus,reachability-ietf,tuspy,curl,foundation")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("upload_bench: needs root (network namespaces)")
    workdir = tempfile.mkdtemp(prefix="rch-upload-bench-")
    servers = []
    try:
        foundation = build_foundation(workdir) if "foundation" in args.tools.split(",") else ""
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
        for run_number in range(args.runs):
            for mode in args.modes.split(","):
                for name, command, kind in tools(args, path, foundation):
                    row = measure(name, command, kind, args, path, digest, directories, size, mode)
                    rows.append(row)
                    print(f"run {run_number + 1}: {mode} {name} at {row['at']}: {row['time']:.1f} s, {mib(row['wire'])} "
                          f"on the wire, exit {row['exit']}, file {'right' if row['identical'] else 'WRONG'}"
                          + (f" ({row['said']})" if row["exit"] != "0" and row["said"] else ""),
                          file=sys.stderr, flush=True)
        print(f"upload of {args.size_mib} MiB at {args.rate}; at a random 10-90 %, a {args.outage:g} s outage: link down "
              "(link), the primary down with a second uplink up (switch), a server-side DROP (blackhole), "
              "a client-side REJECT with tcp-reset (reset):")
        show([dict(row, time=f"{row['time']:.1f} s", wire=mib(row["wire"]), extra=f"{row['extra'] / (1 << 20):+.1f} MiB",
                   identical="yes" if row["identical"] else "NO", cut="yes" if row["cut"] else "finished first")
              for row in rows], ["outage", "tool", "at", "time", "wire", "extra", "exit", "identical", "cut"])
        print(f"\nper tool and outage over {args.runs} run(s): worst / median")
        summary = []
        for mode in args.modes.split(","):
            for name, _, _ in tools(args, path, foundation):
                mine = [row for row in rows if row["outage"] == mode and row["tool"] == name]
                times = [row["time"] for row in mine]
                extras = [row["extra"] for row in mine]
                summary.append({"outage": mode, "tool": name,
                                "time worst / median": f"{max(times):.1f} / {statistics.median(times):.1f} s",
                                "extra on the wire worst / median": f"{max(extras) / (1 << 20):+.1f} / "
                                                                    f"{statistics.median(extras) / (1 << 20):+.1f} MiB",
                                "file right": f"{sum(row['identical'] for row in mine)}/{len(mine)}",
                                "exit 0": f"{sum(row['exit'] == '0' for row in mine)}/{len(mine)}"})
        show(summary, ["outage", "tool", "time worst / median", "extra on the wire worst / median", "file right", "exit 0"])
    finally:
        for server in servers + RUNNING:
            server.kill()
        for namespace in (CLIENT, SERVER):
            ip(f"netns del {namespace}", check=False)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
