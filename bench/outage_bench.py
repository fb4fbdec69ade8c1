#!/usr/bin/env python3
"""Outage recovery of `reachability download` against curl, wget and aria2c, in one run.

Each run builds a fresh pair of namespaces (client: /32 address + onlink default route; server:
nginx with limit_rate on a bridge kept up by a second veth pair, as in
Tests/IntegrationTests/DownloadOutageTests.swift), starts the downloader inside the client
namespace, and once a random share of the file (10-80 %, the "phase") is on disk applies one
scenario. Every tool gets the same phases and outage lengths, in the same run.

Failures the kernel reports (the client's path changes):
  outage N    the client link goes down for N seconds, then comes back up with its default route
  switch      a second uplink (another /32 source address) gets a default route and the first
              link is deleted: the old connection is dead, the new path is fine at once
Failures the kernel cannot see (the client's path stays up; N is drawn from --lengths):
  blackhole   the server drops every packet of port 80 both ways (iptables DROP in the server
              namespace): an upstream blackhole
  reset       the server answers every packet of port 80 with a TCP reset (iptables REJECT
              --reject-with tcp-reset in the server namespace): the transfer is reset and every
              new connection refused
  stop        nginx is killed and started again N seconds later (connections refused meanwhile)
  long        nginx is stopped for --long-outage seconds (default 600): the download must finish

reachability runs with its defaults: up to 6 connections where the server caps each (nginx's
limit_rate does), so a file is fetched in segments; "on disk" is the file's allocated blocks, and
bytes sent twice are the TCP payload the client's uplinks received (their rx_bytes in the client's
namespace, less 66 bytes of Ethernet, IPv4 and TCP-with-timestamps header per received packet,
the uplink a path switch deletes read just before), minus the file's length: bytes on the wire,
never the file's size on disk (sparse), and counted even for requests nginx never logged (a
killed nginx logs none of the responses it was sending). HTTP response heads (~300 bytes a
request) count as sent twice. nginx's access log gives the same figure where it saw every
request; it is printed beside it per run ("log").

Measured: time from restore to the first byte beyond what was on disk at restore ("resume"),
time from restore to the server seeing a new connection ("reconnect", polled with ss), whether
the SHA-256 matched, and connection attempts during the outage counted on the server side (an
iptables rule that counts every SYN to port 80, retransmissions included, before any DROP or
REJECT), divided by the outage length.

The peers get their best retry flags for this job (retry forever, no or fixed short waits, a
3-second stall detector since they cannot see the link), shown in the table's footnotes; aria2c
runs in a shell retry loop because it gives up on some errors despite --max-tries=0.

Needs root. Namespaces are named rchO<pid>-*, always removed.
Usage: bench/outage_bench.py [--binary PATH] [--size-mib 256] [--rate 40m] [--runs 5]
                             [--scenarios blackhole,reset,stop,long] [--lengths 5-60]
                             [--tools reachability,curl,wget,aria2c] [--seed N]
The README's outage table: sudo bench/outage_bench.py --binary .build/release/reachability
"""
import argparse
import hashlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchnet import sha256_file

PREFIX = f"rchO{os.getpid()}"
SERVER_ADDRESS = "10.88.0.1"
STALL_SECONDS = 3


def sh(*args, check=True):
    result = subprocess.run(args, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def ip(command):
    sh("ip", *command.split())


class Lab:
    """Client and server namespaces with nginx serving `content` at /file.bin."""

    def __init__(self, index, workdir, content, rate):
        self.client = f"{PREFIX}-{index}c"
        self.server = f"{PREFIX}-{index}s"
        self.workdir = workdir
        self.nginx = None
        self.uplinks = []
        self.gone_rx = (0, 0)
        for ns in (self.client, self.server):
            ip(f"netns add {ns}")
            ip(f"-n {ns} link set lo up")
            for key in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
                sh("ip", "netns", "exec", ns, "sysctl", "-qw", key)
        s = self.server
        ip(f"-n {s} link add br0 type bridge")
        ip(f"-n {s} addr add {SERVER_ADDRESS}/24 dev br0")
        ip(f"-n {s} link add keep0 type veth peer name keep1")
        ip(f"-n {s} link set keep0 master br0")
        for name in ("keep0", "keep1", "br0"):
            ip(f"-n {s} link set {name} up")
        self.uplink("eth1", "10.88.0.2")
        os.makedirs(f"{workdir}/www", exist_ok=True)
        os.makedirs(f"{workdir}/nginx/tmp", exist_ok=True)
        os.makedirs(f"{workdir}/client", exist_ok=True)
        with open(f"{workdir}/www/file.bin", "wb") as f:
            f.write(content)
        self.rate = rate
        self.start_nginx(rate)

    def uplink(self, name, address, route=True, metric=None):
        ip(f"link add {name} netns {self.client} type veth peer name p{name} netns {self.server}")
        ip(f"-n {self.server} link set p{name} master br0")
        ip(f"-n {self.server} link set p{name} up")
        ip(f"-n {self.client} addr add {address}/32 dev {name}")
        ip(f"-n {self.client} link set {name} up")
        self.uplinks.append(name)
        if route:
            self.route(name, metric)

    # Ethernet (14), IPv4 (20) and TCP with timestamps (32): one per packet the uplink received
    # (a GRO-merged packet carries one), so rx_bytes less this per rx_packets is TCP payload.
    HEADER_BYTES = 14 + 20 + 32

    def rx(self, name):
        """(rx_bytes, rx_packets) of the client's uplink `name`, read in the client's namespace."""
        out = sh("ip", "netns", "exec", self.client, "cat", f"/sys/class/net/{name}/statistics/rx_bytes",
                 f"/sys/class/net/{name}/statistics/rx_packets")
        received, packets = (int(x) for x in out.split())
        return received, packets

    def delete_uplink(self, name):
        """Deletes a client uplink, keeping what it received (its counters go with it)."""
        received, packets = self.rx(name)
        self.gone_rx = (self.gone_rx[0] + received, self.gone_rx[1] + packets)
        self.uplinks.remove(name)
        ip(f"-n {self.client} link del {name}")

    def payload_received(self):
        """TCP payload every client uplink received so far (deleted ones included)."""
        received, packets = self.gone_rx
        for name in self.uplinks:
            more, count = self.rx(name)
            received, packets = received + more, packets + count
        return received - self.HEADER_BYTES * packets

    def route(self, name, metric=None):
        extra = f" metric {metric}" if metric is not None else ""
        ip(f"-n {self.client} route add default via {SERVER_ADDRESS} dev {name} onlink{extra}")

    def start_nginx(self, rate):
        p = f"{self.workdir}/nginx"
        conf = f"""
daemon off; master_process off; worker_processes 1;
error_log {p}/error.log warn; pid {p}/nginx.pid;
events {{ worker_connections 64; }}
http {{
  log_format bytes '$remote_addr $status $body_bytes_sent $msec $request_time "$http_range"';
  access_log {p}/access.log bytes;
  client_body_temp_path {p}/tmp/b; proxy_temp_path {p}/tmp/p; fastcgi_temp_path {p}/tmp/f;
  uwsgi_temp_path {p}/tmp/u; scgi_temp_path {p}/tmp/s;
  default_type application/octet-stream;
  send_timeout 2s;
  server {{ listen {SERVER_ADDRESS}:80; root {self.workdir}/www; limit_rate {rate}; }}
}}
"""
        with open(f"{p}/nginx.conf", "w") as f:
            f.write(conf)
        self.nginx = subprocess.Popen(["ip", "netns", "exec", self.server, "nginx", "-c", f"{p}/nginx.conf",
                                       "-p", f"{p}/", "-e", f"{p}/error.log"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not sh("ip", "netns", "exec", self.server, "ss", "-Hltn", "sport = :80").strip():
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not start")
            time.sleep(0.01)

    def server_iptables(self, *rule, check=True):
        return sh("ip", "netns", "exec", self.server, "iptables", *rule, check=check)

    def count_syns(self):
        """Counts every SYN to port 80 (first rule of INPUT, no target, so later rules still apply)."""
        self.server_iptables("-I", "INPUT", "1", "-p", "tcp", "--dport", "80", "--syn")

    def syns(self):
        out = self.server_iptables("-L", "INPUT", "1", "-v", "-x", "-n")
        fields = out.split()
        return int(fields[0]) if fields else 0

    BLACKHOLE = [["INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP"],
                 ["OUTPUT", "-p", "tcp", "--sport", "80", "-j", "DROP"]]
    RESET = [["INPUT", "-p", "tcp", "--dport", "80", "-j", "REJECT", "--reject-with", "tcp-reset"]]

    def rules(self, rules, on):
        for rule in rules:
            self.server_iptables("-A" if on else "-D", *rule)

    def stop_nginx(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.kill()
            self.nginx.wait()

    def client_connections(self):
        """(address, port) of every established connection to nginx, seen from the server."""
        lines = sh("ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established", "sport = :80").splitlines()
        return {line.split()[-1] for line in lines if line.split()}

    def bytes_sent_when_idle(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = sh("ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established",
                      "state", "close-wait", "sport = :80").strip()
            if not busy:
                break
            time.sleep(0.1)
        total = 0
        with open(f"{self.workdir}/nginx/access.log") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3:
                    total += int(fields[2])
        return total

    def requests(self):
        """(logged at, seconds, status, body bytes sent, first byte asked) of every logged request."""
        rows = []
        with open(f"{self.workdir}/nginx/access.log") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 6:
                    continue
                match = re.match(r'"bytes=(\d+)-', fields[5])
                rows.append((float(fields[3]), float(fields[4]), int(fields[1]), int(fields[2]),
                             int(match.group(1)) if match else 0))
        return rows

    def close(self):
        self.stop_nginx()
        for ns in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def command(tool, binary, url, out, state):
    directory, name = os.path.split(out)
    if tool == "reachability":
        return [binary, "download", "--state-dir", state, "-o", out, url]
    if tool == "curl":
        # --retry-delay 0 would mean curl's exponential backoff (1 s doubling); a fixed 1 s is better here.
        return ["curl", "-sS", "--retry", "100000", "--retry-all-errors", "--retry-connrefused", "--retry-delay", "1",
                "--retry-max-time", "0", "-C", "-", "--connect-timeout", str(STALL_SECONDS),
                "--speed-limit", "1024", "--speed-time", str(STALL_SECONDS), "-o", out, url]
    if tool == "wget":
        return ["wget", "-q", "-c", "--tries=0", "--retry-connrefused", "--waitretry=0",
                f"--read-timeout={STALL_SECONDS}", f"--connect-timeout={STALL_SECONDS}", "-O", out, url]
    if tool == "aria2c":
        # No --lowest-speed-limit: aria2c aborts (exit 5) on it instead of retrying. It also gives up
        # on "Network is unreachable" and "Connection refused" despite --max-tries=0, so it runs in
        # a retry loop (0.1 s between its runs, so a refusing server is not hammered by the loop).
        aria = ["aria2c", "-q", "-c", "--max-tries=0", "--retry-wait=0", f"--timeout={STALL_SECONDS}",
                f"--connect-timeout={STALL_SECONDS}", "--file-allocation=none",
                "--allow-overwrite=true", "--auto-file-renaming=false", "-d", directory, "-o", name, url]
        return ["sh", "-c", 'until "$@"; do sleep 0.1; done', "aria2c-loop"] + aria
    raise ValueError(tool)


FLAGS_NOTE = {
    "reachability": "defaults (path monitor; stall suspected after about 1 s without a byte, 30 s hard limit)",
    "curl": f"--retry 100000 --retry-all-errors --retry-connrefused --retry-delay 1 --retry-max-time 0 -C - --speed-limit 1024 --speed-time {STALL_SECONDS} --connect-timeout {STALL_SECONDS}",
    "wget": f"-c --tries=0 --retry-connrefused --waitretry=0 --read-timeout={STALL_SECONDS} --connect-timeout={STALL_SECONDS}",
    "aria2c": f"-c --max-tries=0 --retry-wait=0 --timeout={STALL_SECONDS} --connect-timeout={STALL_SECONDS} --file-allocation=none, in `until aria2c ...; do sleep 0.1; done`",
}


def on_disk(out):
    """Bytes on disk: the blocks the file system allocated (a file fetched in segments is sparse,
    so its size says nothing about what arrived)."""
    size = 0
    for path in (out, out + ".part"):
        try:
            size = max(size, os.stat(path).st_blocks * 512)
        except FileNotFoundError:
            pass
    return size


def run_one(index, tool, case, args, content, digest):
    """One download under one scenario. `case` is (scenario, phase, seconds)."""
    scenario, phase, seconds = case
    workdir = tempfile.mkdtemp(prefix="outage-bench-")
    lab = Lab(index, workdir, content, args.rate)
    try:
        lab.count_syns()
        out = f"{workdir}/client/file.bin"
        argv = command(tool, args.binary, f"http://{SERVER_ADDRESS}/file.bin", out, f"{workdir}/state")
        start = time.monotonic()
        proc = subprocess.Popen(["ip", "netns", "exec", lab.client] + argv, cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"},
                                start_new_session=True)
        limit = time.monotonic() + 120
        while on_disk(out) < int(len(content) * phase):
            if proc.poll() is not None or time.monotonic() > limit:
                raise RuntimeError(f"{tool} did not get going: {proc.stderr.read().decode()[-400:]}")
            time.sleep(0.005)
        syns_before = lab.syns()
        cut = time.monotonic()
        if scenario == "switch":
            old_connections = lab.client_connections()
            lab.uplink("eth2", "10.88.0.3", route=False)
            lab.route("eth2", metric=10)
            lab.delete_uplink("eth1")
        elif scenario == "outage":
            ip(f"-n {lab.client} link set eth1 down")
            time.sleep(seconds)
            # Taken before the restore: a fast client reconnects before `ss` could run after it.
            old_connections = lab.client_connections()
            ip(f"-n {lab.client} link set eth1 up")
            lab.route("eth1")
        elif scenario in ("blackhole", "reset"):
            rules = Lab.BLACKHOLE if scenario == "blackhole" else Lab.RESET
            lab.rules(rules, on=True)
            time.sleep(seconds)
            old_connections = lab.client_connections()
            lab.rules(rules, on=False)
        elif scenario in ("stop", "long"):
            lab.stop_nginx()
            time.sleep(seconds)
            old_connections = lab.client_connections()
            lab.start_nginx(lab.rate)
        else:
            raise ValueError(scenario)
        restored = time.monotonic()
        attempts = lab.syns() - syns_before
        outage = restored - cut
        at_restore = on_disk(out)
        resumed = reconnected = None
        deadline = restored + args.timeout
        while proc.poll() is None and time.monotonic() < deadline:
            if resumed is None and on_disk(out) > at_restore:
                resumed = time.monotonic()
            if reconnected is None:
                # Polled as fast as `ss` runs (a few ms) until the new connection shows up.
                if lab.client_connections() - old_connections:
                    reconnected = time.monotonic()
                continue
            time.sleep(0.005)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        finished = time.monotonic()
        if resumed is None and proc.returncode == 0:
            resumed = finished
        ok = proc.returncode == 0 and os.path.exists(out) and sha256_file(out) == digest
        logged = lab.bytes_sent_when_idle(timeout=5)
        sent = lab.payload_received()
        if args.trace:
            trace_requests(lab.requests(), cut - start, restored - start, start)
        if not ok:
            print(f"# {tool} {scenario}: exit {proc.returncode}: {proc.stderr.read().decode(errors='replace')[-600:]}",
                  file=sys.stderr, flush=True)
        return {
            "tool": tool, "scenario": scenario, "phase": phase, "seconds": seconds, "ok": ok,
            "status": proc.returncode, "total": finished - start,
            "resume": (resumed - restored) if resumed else None,
            "reconnect": (reconnected - restored) if reconnected else None,
            "done": finished - restored, "wasted": sent - len(content), "logged": logged - len(content), "attempts": attempts,
            "rate": attempts / outage if outage > 0 else 0.0,
        }
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)


def trace_requests(rows, cut, restored, start):
    """Each logged request (when it began and ended against the cut and the restore, the span it
    was sent) and the bytes another request had been sent before it: where the bytes sent twice
    went, by nginx's count (it counts what it wrote into its socket, not what crossed the wire)."""
    wall_start = time.time() - (time.monotonic() - start)
    spans = []
    for logged, seconds, status, sent, first in sorted(rows, key=lambda row: row[0] - row[1]):
        began, ended = logged - seconds - wall_start, logged - wall_start
        twice = sum(max(0, min(first + sent, e) - max(first, s)) for s, e in spans)
        spans.append((first, first + sent))
        print(f"#   {began:7.3f}-{ended:7.3f} s {status} [{first}, {first + sent}) {sent / 1048576:7.3f} MiB, "
              f"{twice / 1024:7.1f} KiB sent before (cut at {cut:.3f}, restored at {restored:.3f})",
              file=sys.stderr, flush=True)


def fmt(value, digits=2, unit=" s"):
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(here, "..", ".build", "debug", "reachability"))
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rate", default="40m", help="nginx limit_rate")
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario (each with its own phase and length)")
    parser.add_argument("--scenarios", default="blackhole,reset,stop,long",
                        help="comma-separated: blackhole, reset, stop, long, outage, switch")
    parser.add_argument("--lengths", default="5-60", help="outage length range in seconds (drawn per run)")
    parser.add_argument("--long-outage", type=float, default=600, help="seconds nginx is down in 'long'")
    parser.add_argument("--tools", default="reachability,curl,wget,aria2c")
    parser.add_argument("--seed", type=int, default=None, help="for the phases and lengths (default: random)")
    parser.add_argument("--timeout", type=float, default=240, help="per run, after the restore")
    parser.add_argument("--trace", action="store_true", help="print every request nginx logged per run: its span and "
                        "the bytes of it another request had been sent before")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    args.binary = os.path.abspath(args.binary)
    tools = args.tools.split(",")
    for tool in tools:
        if tool != "reachability" and not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install -y curl wget aria2")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    low, high = (float(x) for x in args.lengths.split("-"))
    cases = []
    for scenario in [s for s in args.scenarios.split(",") if s]:
        runs = 1 if scenario in ("long", "switch") else args.runs
        for _ in range(runs):
            phase = rng.uniform(0.1, 0.8)
            # Millisecond resolution: a tool that retries on a fixed grid (every 0.5 s, every 1 s)
            # from the start of the outage would otherwise see the restore at a few phases only.
            seconds = {"long": args.long_outage, "switch": 0}.get(scenario, round(rng.uniform(low, high), 3))
            cases.append((scenario, phase, seconds))
    content = os.urandom(args.size_mib << 20)
    digest = hashlib.sha256(content).hexdigest()
    print(f"# seed {seed}; {len(cases)} cases x {len(tools)} tools", file=sys.stderr, flush=True)
    results = []
    index = 0

    def run(index, tool, case):
        try:
            result = run_one(index, tool, case, args, content, digest)
        except Exception as error:  # one broken run must not lose the others
            print(f"# {case} {tool}: run failed: {error}", file=sys.stderr, flush=True)
            return
        results.append(result)
        print(f"# {case[0]:>9} {case[2]:>7.3f}s phase {case[1]:.2f} {tool:<12} ok={result['ok']} "
              f"resume={fmt(result['resume'])} reconnect={fmt(result['reconnect'], 3)} "
              f"attempts={result['attempts']} ({result['rate']:.2f}/s) total={result['total']:.1f}s "
              f"sent twice={result['wasted'] / 1048576:.2f} MiB (log {result['logged'] / 1048576:.2f}) load={os.getloadavg()[0]:.1f}",
              file=sys.stderr, flush=True)

    for case in cases:
        if case[0] == "long":
            # Ten minutes each: the tools wait out the long outage side by side, each in its own
            # pair of namespaces (the restore times of this case are not the point; completion is).
            threads = []
            for tool in tools:
                index += 1
                threads.append(threading.Thread(target=run, args=(index, tool, case)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            continue
        for tool in tools:
            index += 1
            run(index, tool, case)

    print(f"\n{args.size_mib} MiB at limit_rate {args.rate}; each scenario applied at a random phase "
          f"(10-80 % on disk); seed {seed}.\n")
    print("| scenario | tool | ok | restore→resumed p50 (runs) | restore→reconnect p50 | attempts/s during the outage (mean) "
          "| sent twice: worst | median | best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scenario in dict.fromkeys(c[0] for c in cases):
        for tool in tools:
            rows = [r for r in results if r["scenario"] == scenario and r["tool"] == tool]
            if not rows:
                continue
            ok = sum(r["ok"] for r in rows)
            resumes = [r["resume"] for r in rows if r["ok"]]
            name = {"blackhole": "upstream blackhole", "reset": "server resets/refuses", "stop": "server stopped",
                    "long": f"server down {args.long_outage:.0f} s", "outage": "link down", "switch": "path switch"}[scenario]
            lengths = sorted(r["seconds"] for r in rows)
            span = f" {lengths[0]:.0f}-{lengths[-1]:.0f} s" if scenario not in ("long", "switch") else ""
            rates = [r["rate"] for r in rows]
            wasted = [r["wasted"] / 1048576 for r in rows if r["ok"]] or [float("nan")]
            print(f"| {name}{span} | {tool} | {ok}/{len(rows)} | {fmt(median(resumes))} "
                  f"({', '.join(fmt(r, 2, '') for r in sorted(resumes))}) | {fmt(median(r['reconnect'] for r in rows if r['ok']), 3)} | "
                  f"{statistics.mean(rates):.2f} | {max(wasted):.2f} MiB | {median(wasted):.2f} MiB | {min(wasted):.2f} MiB |")
    print()
    for tool in tools:
        print(f"- {tool}: {FLAGS_NOTE[tool]}")


if __name__ == "__main__":
    try:
        main()
    finally:
        for line in sh("ip", "netns", "list", check=False).splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX):
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
