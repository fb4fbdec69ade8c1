#!/usr/bin/env python3
"""What following the route to one host costs the path monitor, beside peers in the same run.

Three readers watch one client namespace that has a LAN route and no default route while route
storms run: `reachability wait --host 10.99.0.1` (follows the route to that host; unreachable, so
it waits), `reachability wait` (the primary path only; unsatisfied, so it waits) and
`ip monitor route` (prints every change to /dev/null). CPU seconds of each, from /proc:

unrelated: N host routes (172.16.x.y/32) added then deleted: they cover neither the primary
           path's lookup destinations nor the followed host, so the kernel-side filter drops them
           for both `reachability` readers.
covering:  M times an unreachable route to 10.99.0.0/24 (it covers the followed host, which stays
           unreachable, so the reader keeps waiting) added and deleted:
           each is a change for the host (a lookup and an evaluation), and nothing for the
           primary-only reader (dropped in the kernel).

Needs root (namespaces named rchH<pid>-*, always removed).
Usage: bench/host_route_bench.py [--binary PATH] [--routes 200000] [--covering 2000]
"""
import argparse
import os
import subprocess
import sys
import time

PREFIX = f"rchH{os.getpid()}"
CLIENT = f"{PREFIX}-c"
CHILDREN = []


def sh(*args, input=None):
    done = subprocess.run(args, input=input, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {done.stderr.strip()[:500]}")
    return done.stdout


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch(lines):
    sh("ip", "-n", CLIENT, "-batch", "-", input="\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/reachability")
    parser.add_argument("--routes", type=int, default=200_000)
    parser.add_argument("--covering", type=int, default=2_000)
    options = parser.parse_args()
    binary = os.path.abspath(options.binary)
    try:
        sh("ip", "netns", "add", CLIENT)
        sh("ip", "-n", CLIENT, "link", "set", "lo", "up")
        sh("ip", "-n", CLIENT, "link", "add", "enp3s0", "type", "veth", "peer", "name", "peer0")
        sh("ip", "-n", CLIENT, "addr", "add", "10.77.0.2/24", "dev", "enp3s0")
        for name in ("peer0", "enp3s0"):
            sh("ip", "-n", CLIENT, "link", "set", name, "up")
        readers = {
            "reachability wait --host 10.99.0.1": [binary, "wait", "--netns", CLIENT, "--host", "10.99.0.1", "--timeout", "inf"],
            "reachability wait (primary path)": [binary, "wait", "--netns", CLIENT, "--timeout", "inf"],
            "ip monitor route": ["ip", "-n", CLIENT, "monitor", "route"],
        }
        processes = {}
        for name, arguments in readers.items():
            process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            CHILDREN.append(process)
            processes[name] = process
        time.sleep(1.0)  # start-up (netlink dumps) is not what is measured
        for process in processes.values():
            if process.poll() is not None:
                sys.exit(f"a reader exited early: {process.args}")

        def measure(label, run):
            before = {name: cpu_seconds(p.pid) for name, p in processes.items()}
            started = time.monotonic()
            run()
            time.sleep(1.0)  # let the readers drain what is queued
            elapsed = time.monotonic() - started
            print(f"\n{label} ({elapsed:.1f} s)")
            print("| reader | CPU s |")
            print("|---|---|")
            for name, process in processes.items():
                print(f"| `{name}` | {cpu_seconds(process.pid) - before[name]:.2f} |")

        def unrelated():
            routes = [f"172.{16 + i // 62_500}.{i // 250 % 250}.{i % 250 + 1}" for i in range(options.routes // 2)]
            for start in range(0, len(routes), 10_000):
                chunk = routes[start:start + 10_000]
                batch([f"route add {r}/32 dev enp3s0" for r in chunk])
                batch([f"route del {r}/32 dev enp3s0" for r in chunk])

        def covering():
            lines = []
            for _ in range(options.covering // 2):
                lines += ["route add unreachable 10.99.0.0/24", "route del unreachable 10.99.0.0/24"]
            batch(lines)

        measure(f"{options.routes:,} unrelated route changes", unrelated)
        measure(f"{options.covering:,} changes of a route covering the followed host", covering)
    finally:
        for process in CHILDREN:
            process.kill()
            process.wait()
        subprocess.run(["ip", "netns", "del", CLIENT], capture_output=True)


if __name__ == "__main__":
    main()
