#!/usr/bin/env python3
"""Path-monitor benchmarks against `ip monitor`, measured in the same run.

latency: event-to-output latency for link down/up, route del/add and addr del, for
         `reachability watch --json` and `ip monitor`, both separate processes reading the same
         namespace, both timed when their line arrives on a pipe. p50/p90 per kind. Then the
         same with five interfaces carrying IPv6 link-local addresses, each link going down right
         after another change (the case a fixed coalescing delay used to hold back).
churn:   2,000 veth pairs created, brought up and deleted (a container host's day) while
         `reachability watch --json`, `reachability watch` and `ip monitor` print it: CPU seconds
         and bytes of output of each.
scale:   startup time and peak RSS of `reachability status` with N routes in the table (peer:
         `ip route show`, a full dump), then an add+delete storm of N routes with a default-route
         switch in the middle: the final path must equal `ip route get`, CPU time compared with
         `ip monitor route` over the same storm.

Needs root (it creates network namespaces named rchB<pid>-*, always removed).
Usage: bench/monitor_bench.py [--binary PATH] [--changes 200] [--routes 1000000] [--pairs 2000]
                              [--only latency|churn|scale]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

PREFIX = f"rchB{os.getpid()}"
CHILDREN = []


def spawn(args, **kwargs):
    """Starts a child that cleanup() kills, so a failed run leaves nothing behind."""
    proc = subprocess.Popen(args, stderr=subprocess.DEVNULL, **kwargs)
    CHILDREN.append(proc)
    return proc


def sh(*args, check=True, input=None):
    return subprocess.run(args, check=check, input=input, capture_output=True, text=True).stdout


class LineLog:
    """Reads a child's stdout on a thread, timestamping each line on arrival."""

    def __init__(self, proc, keep=True):
        self.proc = proc
        self.keep = keep  # False: count bytes and lines, keep only the last few
        self.bytes = 0
        self.count = 0
        self.lines = []  # (monotonic_ns, text)
        self.cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        fd = self.proc.stdout.fileno()
        pending = b""
        while True:
            chunk = os.read(fd, 65536)
            now = time.monotonic_ns()
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            with self.cond:
                self.bytes += len(chunk)
                self.count += len(complete)
                for line in complete:
                    self.lines.append((now, line.decode(errors="replace")))
                if not self.keep and len(self.lines) > 64:
                    del self.lines[:-64]
                self.cond.notify_all()

    def wait_for(self, after_ns, predicate, timeout=10.0):
        """First line at or after `after_ns` satisfying `predicate`: (ns, text)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            start = 0
            while True:
                for i in range(start, len(self.lines)):
                    t, text = self.lines[i]
                    if t >= after_ns and predicate(text):
                        return t, text
                start = len(self.lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    tail = "\n  ".join(text for _, text in self.lines[-5:])
                    raise TimeoutError(f"no matching line within {timeout}s; last lines:\n  {tail}")
                self.cond.wait(remaining)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_namespace(suffix):
    name = f"{PREFIX}-{suffix}"
    sh("ip", "netns", "add", name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    return name


def cleanup():
    for proc in CHILDREN:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for line in sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            sh("ip", "netns", "del", name, check=False)


def topology():
    client, router = make_namespace("c"), make_namespace("r")
    sh("ip", "link", "add", "enp3s0", "netns", client, "type", "veth", "peer", "name", "up1", "netns", router)
    sh("ip", "-n", router, "addr", "add", "10.77.1.1/24", "dev", "up1")
    sh("ip", "-n", router, "link", "set", "up1", "up")
    sh("ip", "-n", client, "addr", "add", "10.77.1.2/24", "dev", "enp3s0")
    sh("ip", "-n", client, "link", "set", "enp3s0", "up")
    sh("ip", "-n", client, "route", "add", "default", "via", "10.77.1.1", "dev", "enp3s0")
    return client, router


def ours_is(status, reason=None):
    def match(text):
        try:
            obj = json.loads(text)
        except ValueError:
            return False
        return obj.get("status") == status and (reason is None or obj.get("reason") == reason)
    return match


def percentile(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def latency(binary, changes, gap_ms):
    client, _ = topology()
    ours = spawn([binary, "watch", "--json", "--netns", client], stdout=subprocess.PIPE)
    peer = spawn(["stdbuf", "-oL", "ip", "-n", client, "monitor", "link", "address", "route"],
                            stdout=subprocess.PIPE)
    ours_log, peer_log = LineLog(ours), LineLog(peer)
    batch = spawn(["ip", "-n", client, "-force", "-batch", "-"], stdin=subprocess.PIPE, text=True)
    ours_log.wait_for(0, ours_is("satisfied"))

    def run(command):
        t0 = time.monotonic_ns()
        batch.stdin.write(command + "\n")
        batch.stdin.flush()
        return t0

    steps = [
        ("route del", "route del default", ours_is("unsatisfied", "no route"), lambda s: s.startswith("Deleted default")),
        ("route add", "route add default via 10.77.1.1 dev enp3s0", ours_is("satisfied"), lambda s: s.startswith("default via")),
        ("link down", "link set enp3s0 down", ours_is("unsatisfied", "no interface up"),
         lambda s: re.match(r"\d+: enp3s0[@:]", s) is not None and re.search(r"<[^>]*\bUP\b", s) is None),
        ("link up", "link set enp3s0 up", ours_is("unsatisfied", "no route"),
         lambda s: re.match(r"\d+: enp3s0[@:]", s) is not None and re.search(r"<[^>]*\bUP\b", s) is not None),
        (None, "route add default via 10.77.1.1 dev enp3s0", ours_is("satisfied"), lambda s: s.startswith("default via")),
        ("addr del", "addr del 10.77.1.2/24 dev enp3s0", ours_is("unsatisfied", "no address"),
         lambda s: s.startswith("Deleted") and "inet 10.77.1.2/" in s),
        (None, "addr add 10.77.1.2/24 dev enp3s0", ours_is("unsatisfied", "no route"), lambda s: "inet 10.77.1.2/" in s),
        (None, "route add default via 10.77.1.1 dev enp3s0", ours_is("satisfied"), lambda s: s.startswith("default via")),
    ]
    results = {}
    for _ in range(changes):
        for kind, command, ours_match, peer_match in steps:
            t0 = run(command)
            t_ours, _ = ours_log.wait_for(t0, ours_match)
            t_peer, _ = peer_log.wait_for(t0, peer_match)
            # Isolated changes, as on a real machine; storms are measured by `scale`.
            time.sleep(gap_ms / 1000)
            if kind:
                results.setdefault(kind, ([], []))
                results[kind][0].append((t_ours - t0) / 1e6)
                results[kind][1].append((t_peer - t0) / 1e6)
    cpu_ours, cpu_peer = cpu_seconds(ours.pid), cpu_seconds(peer.pid)
    rss_ours, rss_peer = peak_rss_mib(ours.pid), peak_rss_mib(peer.pid)
    for p in (ours, peer, batch):
        p.kill()
        p.wait()

    print(f"\n## Event-to-output latency, {changes} changes per kind, {gap_ms} ms apart (ms from issuing the change)\n")
    print("| change | reachability p50 | p90 | ip monitor p50 | p90 | p50 difference |")
    print("|---|---|---|---|---|---|")
    for kind, (o, p) in results.items():
        print(f"| {kind} | {percentile(o, .5):.3f} | {percentile(o, .9):.3f} | {percentile(p, .5):.3f} | "
              f"{percentile(p, .9):.3f} | {percentile(o, .5) - percentile(p, .5):+.3f} |")
    print(f"\nCPU over the run: reachability {cpu_ours:.2f} s, ip monitor {cpu_peer:.2f} s; "
          f"peak RSS: reachability {rss_ours:.1f} MiB, ip monitor {rss_peer:.1f} MiB")
    cleanup()


def wait_for_settled_ipv6(namespace, timeout=10.0):
    """Link-local addresses finish duplicate address detection about a second after carrier."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sh("ip", "-n", namespace, "-6", "addr", "show", "tentative").strip():
            return
        time.sleep(0.05)
    raise TimeoutError(f"IPv6 addresses in {namespace} still tentative after {timeout}s")


def latency_five_interfaces(binary, changes, gap_ms):
    """Five uplinks with IPv6 link-locals; each link down follows another change within
    microseconds (one write to `ip -batch`), so the down's messages arrive right behind an
    evaluation. Both tools are timed from the write."""
    client, router = topology()
    for n in range(2, 6):
        sh("ip", "link", "add", f"enp{n + 2}s0", "netns", client, "type", "veth", "peer", "name", f"up{n}", "netns", router)
        sh("ip", "-n", router, "addr", "add", f"10.77.{n}.1/24", "dev", f"up{n}")
        sh("ip", "-n", router, "link", "set", f"up{n}", "up")
        sh("ip", "-n", client, "addr", "add", f"10.77.{n}.2/24", "dev", f"enp{n + 2}s0")
        sh("ip", "-n", client, "link", "set", f"enp{n + 2}s0", "up")
    wait_for_settled_ipv6(client)
    ours = spawn([binary, "watch", "--json", "--netns", client], stdout=subprocess.PIPE)
    peer = spawn(["stdbuf", "-oL", "ip", "-n", client, "monitor", "link", "address", "route"], stdout=subprocess.PIPE)
    ours_log, peer_log = LineLog(ours), LineLog(peer)
    batch = spawn(["ip", "-n", client, "-force", "-batch", "-"], stdin=subprocess.PIPE, text=True)
    ours_log.wait_for(0, ours_is("satisfied"))

    def run(commands):
        t0 = time.monotonic_ns()
        batch.stdin.write("".join(c + "\n" for c in commands))
        batch.stdin.flush()
        return t0

    def listing(present):
        def match(text):
            if not ours_is("unsatisfied", "no route")(text):
                return False
            names = [i.get("name") for i in json.loads(text).get("interfaces", [])]
            return ("enp3s0" in names) == present
        return match

    enp3s0_down = lambda s: re.match(r"\d+: enp3s0[@:]", s) is not None and re.search(r"<[^>]*\bUP\b", s) is None
    enp3s0_up = lambda s: re.match(r"\d+: enp3s0[@:]", s) is not None and re.search(r"<[^>]*\bUP\b", s) is not None
    steps = [
        ("link down after an address change", ["addr add 10.77.60.1/32 dev enp4s0", "link set enp3s0 down"],
         listing(False), enp3s0_down),
        ("link up after an address change", ["addr del 10.77.60.1/32 dev enp4s0", "link set enp3s0 up"],
         listing(True), enp3s0_up),
        (None, ["route add default via 10.77.1.1 dev enp3s0"], ours_is("satisfied"), lambda s: s.startswith("default via")),
    ]
    results = {}
    for _ in range(changes):
        for kind, commands, ours_match, peer_match in steps:
            t0 = run(commands)
            t_ours, _ = ours_log.wait_for(t0, ours_match)
            t_peer, _ = peer_log.wait_for(t0, peer_match)
            time.sleep(gap_ms / 1000)
            if kind:
                results.setdefault(kind, ([], []))
                results[kind][0].append((t_ours - t0) / 1e6)
                results[kind][1].append((t_peer - t0) / 1e6)
    for p in (ours, peer, batch):
        p.kill()
        p.wait()
    print(f"\n## Five interfaces with IPv6 link-locals, {changes} changes per kind, each right after another change\n")
    print("| change | reachability p50 | p90 | ip monitor p50 | p90 | p50 difference |")
    print("|---|---|---|---|---|---|")
    for kind, (o, p) in results.items():
        print(f"| {kind} | {percentile(o, .5):.3f} | {percentile(o, .9):.3f} | {percentile(p, .5):.3f} | "
              f"{percentile(p, .9):.3f} | {percentile(o, .5) - percentile(p, .5):+.3f} |")
    cleanup()


def churn(binary, pairs):
    """A container host's day: veth pairs created, both ends up (IPv6 link-locals, routes), deleted."""
    client, _ = topology()
    procs = {
        "reachability watch --json": spawn([binary, "watch", "--json", "--netns", client], stdout=subprocess.PIPE),
        "reachability watch": spawn([binary, "watch", "--netns", client], stdout=subprocess.PIPE),
        "ip monitor link address route": spawn(["ip", "-n", client, "monitor", "link", "address", "route"],
                                               stdout=subprocess.PIPE),
    }
    logs = {name: LineLog(proc, keep=False) for name, proc in procs.items()}
    logs["reachability watch --json"].wait_for(0, ours_is("satisfied"))
    logs["reachability watch"].wait_for(0, lambda s: "reachable via" in s)
    time.sleep(0.5)  # let ip monitor subscribe (it prints nothing to wait for)
    cpu_before = {name: cpu_seconds(proc.pid) for name, proc in procs.items()}
    commands = []
    for i in range(pairs):
        commands += [f"link add vc{i} type veth peer name vp{i}", f"link set vc{i} up", f"link set vp{i} up"]
    for i in range(pairs):
        commands.append(f"link del vc{i}")
    start = time.monotonic()
    sh("ip", "-n", client, "-batch", "-", input="".join(c + "\n" for c in commands))
    churn_seconds = time.monotonic() - start
    # A change that matters marks the end for every reader.
    t0 = time.monotonic_ns()
    sh("ip", "-n", client, "route", "del", "default")
    logs["reachability watch --json"].wait_for(t0, ours_is("unsatisfied"), timeout=120)
    logs["reachability watch"].wait_for(t0, lambda s: "unreachable" in s, timeout=120)
    logs["ip monitor link address route"].wait_for(t0, lambda s: s.startswith("Deleted default"), timeout=120)
    print(f"\n## Churn: {pairs} veth pairs created, both ends up, deleted ({len(commands)} commands in {churn_seconds:.1f} s)\n")
    print("| reader | CPU | output | lines |")
    print("|---|---|---|---|")
    for name, proc in procs.items():
        cpu = cpu_seconds(proc.pid) - cpu_before[name]
        print(f"| {name} | {cpu:.2f} s | {logs[name].bytes / 1024:.1f} KiB | {logs[name].count} |")
    for proc in procs.values():
        proc.kill()
        proc.wait()
    cleanup()


def timed_child(args):
    """Wall time, peak RSS (MiB) and CPU seconds of one command, measured by GNU time: a child
    forked from this (large) Python process would report Python's RSS as its own peak."""
    result = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M %U %S"] + args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = [l for l in result.stderr.splitlines() if l.startswith("TIME ")][-1].split()
    return float(line[1]), int(line[2]) / 1024, float(line[3]) + float(line[4]), result.returncode


def route_lines(verb, count, via):
    for i in range(count):
        yield f"route {verb} 172.{16 + i // 65536}.{(i // 256) % 256}.{i % 256}/32{via}\n"


def scale(binary, routes):
    client, router = topology()
    sh("ip", "link", "add", "wlp1s0", "netns", client, "type", "veth", "peer", "name", "up2", "netns", router)
    sh("ip", "-n", router, "addr", "add", "10.77.2.1/24", "dev", "up2")
    sh("ip", "-n", router, "link", "set", "up2", "up")
    sh("ip", "-n", client, "addr", "add", "10.77.2.2/24", "dev", "wlp1s0")
    sh("ip", "-n", client, "link", "set", "wlp1s0", "up")
    start = time.monotonic()
    sh("ip", "-n", client, "-batch", "-", input="".join(route_lines("add", routes, " via 10.77.1.1 dev enp3s0")))
    print(f"\n## {routes} routes in the table (loaded by ip -batch in {time.monotonic() - start:.1f} s)\n")
    print("| command | wall time | peak RSS | CPU |")
    print("|---|---|---|---|")
    for label, args in [
        ("reachability status --netns", [binary, "status", "--netns", client]),
        ("ip route show (full dump, peer)", ["ip", "-n", client, "route", "show"]),
        ("ip route get 8.8.8.8 (one lookup)", ["ip", "-n", client, "route", "get", "8.8.8.8"]),
    ]:
        runs = [timed_child(args) for _ in range(5)]
        wall = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        print(f"| {label} | {wall * 1000:.0f} ms | {rss:.1f} MiB | {cpu * 1000:.0f} ms |")

    # Storm: delete all N, re-add N, with the default moving to wlp1s0 half way.
    ours = spawn([binary, "watch", "--json", "--netns", client], stdout=subprocess.PIPE)
    peer = spawn(["ip", "-n", client, "monitor", "route"], stdout=subprocess.DEVNULL)
    ours_log = LineLog(ours)
    ours_log.wait_for(0, ours_is("satisfied"))
    storm = list(route_lines("del", routes, ""))
    storm.insert(routes // 2, "route del default\nroute add default via 10.77.2.1 dev wlp1s0\n")
    storm += list(route_lines("add", routes, " via 10.77.1.1 dev enp3s0"))
    start = time.monotonic()
    sh("ip", "-n", client, "-batch", "-", input="".join(storm))
    storm_seconds = time.monotonic() - start
    kernel = sh("ip", "-n", client, "route", "get", "8.8.8.8")
    device = re.search(r"dev (\S+)", kernel).group(1)
    t_end = time.monotonic_ns()
    try:
        _, last = ours_log.wait_for(0, lambda s: ours_is("satisfied")(s) and json.loads(s).get("interface") == device,
                                    timeout=30)
        agrees = True
    except TimeoutError:
        agrees = False
    settle_ms = (time.monotonic_ns() - t_end) / 1e6
    cpu_ours, cpu_peer = cpu_seconds(ours.pid), cpu_seconds(peer.pid)
    rss_ours = peak_rss_mib(ours.pid)
    for p in (ours, peer):
        p.kill()
        p.wait()
    print(f"\nStorm of {2 * routes} route changes in {storm_seconds:.1f} s: final path via {device} per "
          f"`ip route get`; reachability agrees: {'yes' if agrees else 'NO'} (settled {settle_ms:.0f} ms after the storm). "
          f"CPU: reachability watch {cpu_ours:.2f} s, ip monitor route {cpu_peer:.2f} s; "
          f"reachability peak RSS {rss_ours:.1f} MiB")
    cleanup()
    if not agrees:
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/reachability")
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--routes", type=int, default=1_000_000)
    parser.add_argument("--gap-ms", type=float, default=5.0, help="pause between latency changes")
    parser.add_argument("--pairs", type=int, default=2000, help="veth pairs for the churn benchmark")
    parser.add_argument("--only", choices=["latency", "churn", "scale"])
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("monitor_bench: needs root to create network namespaces")
    if not shutil.which("stdbuf"):
        sys.exit("monitor_bench: stdbuf (coreutils) is missing")
    try:
        if args.only in (None, "latency"):
            latency(os.path.abspath(args.binary), args.changes, args.gap_ms)
            latency_five_interfaces(os.path.abspath(args.binary), args.changes, args.gap_ms)
        if args.only in (None, "churn"):
            churn(os.path.abspath(args.binary), args.pairs)
        if args.only in (None, "scale"):
            scale(os.path.abspath(args.binary), args.routes)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
