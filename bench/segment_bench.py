#!/usr/bin/env python3
"""Segmented and multipath downloads (issue 18): `reachability download` beside curl and aria2c.

Scenarios (each in its own pair of network namespaces, every tool in the same run):

  capped       nginx `limit_rate 4m` (per request, so per connection), a --size-mib file, over an
               unshaped veth pair (several Gbit/s, far faster than the cap): curl, aria2c with its
               defaults, `aria2c -x16 -s16 --min-split-size=1M` (--peers chooses among them), and
               reachability with its defaults and with each `--ours` variant, --runs times in a
               shuffled order (--tls: over HTTPS, nginx with a self-signed certificate given to
               every client). Worst, median and best wall time, and the ratio to the same run's
               aria2c -x16 (worst, median, best), connections at once (polled on the server with ss
               every 20 ms), connections opened (nginx log), bytes sent, the load average.
  unthrottled  the same without limit_rate: curl, `curl && sync -f` against reachability. Below
               each table: ours' worst run beside the peer's time in that same run and the peer's
               median (a slow peer there too means the machine's load, not the planner).
               --trace prints each run's connection counts (ours, from `download --json`) and
               nginx's requests. --journal-off adds each --ours variant without the per-segment
               journal rule (a binary built with -Xswiftc -DSEGMENT_JOURNAL_AB; an environment
               variable switches it in that build only) and prints the rule's cost run by run.
  paths        the client has two uplinks to one server, shaped on the server side with `tc tbf`
               (--rates, default 100 and 50 Mbit/s; the second is named ww0, so it classifies as
               cellular, hence expensive): reachability (both paths allowed), reachability
               --no-expensive, curl and aria2c -x16; bytes received per uplink, aggregate rate
               against the sum of the shaped rates.
  cut          as paths; at 30 % the first uplink goes down (`ip link set eth1 down`, or with
               --cut blackhole the server drops its packets), at 60 % it comes back. The largest
               gap between received bytes (client rx counters sampled every millisecond inside the
               client namespace) after the cut, how soon the returning uplink carries data again,
               and the sha256.
  kills        a segmented download (capped server) SIGKILLed at a random moment, then the same
               command again, --trials times (aria2c -x16 -c the same way, as the peer): every
               file must complete with the right sha256; bytes re-fetched per kill (body bytes
               nginx sent beyond the file size) and connections open at the kill.
  hostile      servers that answer ranges differently per connection (another version's bytes
               with the same ETag, another ETag, 200 to some ranges, a Content-Range total that
               differs): exit status and whether the file that exit 0 left is the right one. A
               spliced file with exit 0 is a failure of the benchmark.

Needs root, nginx, curl, aria2c, tc. Namespaces are named rchS<pid>-* (BENCH_NETNS_PREFIX replaces
rchS), always removed.
Usage: sudo bench/segment_bench.py --binary .build/release/reachability [--scenarios capped,...]
       [--size-mib 512] [--runs 1] [--trials 30] [--ours '' --ours '--connections 16'] [--seed N]
       [--peers aria2c-x16] [--tls] [--rate 1m] [--trace] [--journal-off]
"""
import argparse
import hashlib
import http.server
import os
import random
import re
import shlex
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchnet import ip, random_file, run as sh

# BENCH_NETNS_PREFIX: a prefix of one's own on a machine shared with others running benchmarks.
PREFIX = f"{os.environ.get('BENCH_NETNS_PREFIX', 'rchS')}{os.getpid()}"
# The bench build's switch for the journal A/B (compiled in only with -DSEGMENT_JOURNAL_AB, see
# SegmentJournalRule): every connection gathers 128 KiB with no time bound, as before issue 30.
JOURNAL_OFF = "REACHABILITY_BENCH_SEGMENT_JOURNAL=off"
SERVER = "10.87.0.1"
CLIENT1 = "10.87.0.2"
CLIENT2 = "10.87.0.3"
PORT = 80
TLS_PORT = 443


def sha256_file(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


class Lab:
    """Client and server namespaces joined by a bridge in the server namespace (kept up by a
    spare veth pair); the client's uplinks are veth pairs with /32 addresses and onlink default
    routes, the first preferred (metric 100, the second 200)."""

    def __init__(self, index, workdir):
        self.client = f"{PREFIX}-{index}c"
        self.server = f"{PREFIX}-{index}s"
        self.workdir = workdir
        self.nginx = None
        self.hostile = None
        self.port = PORT
        for ns in (self.client, self.server):
            ip(f"netns add {ns}")
            ip(f"-n {ns} link set lo up")
            for key in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                        "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.default.arp_ignore=1"):
                sh("ip", "netns", "exec", ns, "sysctl", "-qw", key)
        s = self.server
        ip(f"-n {s} link add br0 type bridge")
        ip(f"-n {s} addr add {SERVER}/24 dev br0")
        ip(f"-n {s} link add keep0 type veth peer name keep1")
        ip(f"-n {s} link set keep0 master br0")
        for name in ("keep0", "keep1", "br0"):
            ip(f"-n {s} link set {name} up")
        os.makedirs(f"{workdir}/www", exist_ok=True)
        os.makedirs(f"{workdir}/nginx/tmp", exist_ok=True)

    def uplink(self, name, address, metric, rate=None):
        ip(f"link add {name} netns {self.client} type veth peer name p{name} netns {self.server}")
        ip(f"-n {self.server} link set p{name} master br0")
        ip(f"-n {self.server} link set p{name} up")
        ip(f"-n {self.client} addr add {address}/32 dev {name}")
        ip(f"-n {self.client} link set {name} up")
        self.route(name, metric)
        if rate:
            # Shapes what the server sends towards this uplink (the download direction). No netem
            # on this kernel; tbf alone: the rate, a burst of a few packets, 20 ms of queue.
            sh("ip", "netns", "exec", self.server, "tc", "qdisc", "add", "dev", f"p{name}", "root", "tbf",
               "rate", rate, "burst", "32kb", "latency", "20ms")

    def route(self, name, metric):
        ip(f"-n {self.client} route replace default via {SERVER} dev {name} onlink metric {metric}")

    def start_nginx(self, rate=None, tls=False):
        p = f"{self.workdir}/nginx"
        limit = f"limit_rate {rate};" if rate else ""
        listen = f"{SERVER}:{PORT}"
        if tls:
            # A self-signed certificate for the server's address; every client is given it as its CA.
            sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={SERVER}",
               "-addext", f"subjectAltName=IP:{SERVER}", "-keyout", f"{p}/key.pem", "-out", f"{p}/cert.pem")
            listen = f"{SERVER}:{TLS_PORT} ssl; ssl_certificate {p}/cert.pem; ssl_certificate_key {p}/key.pem"
        self.port = TLS_PORT if tls else PORT
        conf = f"""
daemon off; master_process off; worker_processes 1;
error_log {p}/error.log warn; pid {p}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  log_format bench '$connection $status $body_bytes_sent $remote_addr "$http_range"';
  access_log {p}/access.log bench;
  client_body_temp_path {p}/tmp/b; proxy_temp_path {p}/tmp/p; fastcgi_temp_path {p}/tmp/f;
  uwsgi_temp_path {p}/tmp/u; scgi_temp_path {p}/tmp/s;
  default_type application/octet-stream;
  keepalive_requests 100000;
  server {{ listen {listen}; root {self.workdir}/www; {limit} }}
}}
"""
        with open(f"{p}/nginx.conf", "w") as f:
            f.write(conf)
        if os.path.exists(f"{p}/access.log"):
            os.remove(f"{p}/access.log")
        self.nginx = subprocess.Popen(["ip", "netns", "exec", self.server, "nginx", "-c", f"{p}/nginx.conf",
                                       "-p", f"{p}/", "-e", f"{p}/error.log"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_listening()

    def wait_listening(self):
        deadline = time.monotonic() + 10
        while not sh("ip", "netns", "exec", self.server, "ss", "-Hltn", f"sport = :{self.port}").strip():
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)

    def stop_nginx(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.kill()
            self.nginx.wait()
        self.nginx = None

    def reset_log(self):
        """Truncates nginx's access log (nginx appends with O_APPEND, so truncation is safe)."""
        path = f"{self.workdir}/nginx/access.log"
        if os.path.exists(path):
            os.truncate(path, 0)

    def log(self):
        """(connection, status, bytes, client, range) for every request logged so far."""
        rows = []
        try:
            with open(f"{self.workdir}/nginx/access.log") as f:
                for line in f:
                    fields = line.split(" ", 4)
                    if len(fields) == 5:
                        rows.append((fields[0], fields[1], int(fields[2]), fields[3], fields[4].strip()))
        except FileNotFoundError:
            pass
        return rows

    def established(self):
        out = sh("ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established", f"sport = :{self.port}")
        return len([line for line in out.splitlines() if line.strip()])

    def wait_idle(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = sh("ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established",
                     "state", "close-wait", "state", "fin-wait-1", "state", "fin-wait-2", f"sport = :{self.port}")
            if not out.strip():
                return
            time.sleep(0.05)

    def close(self):
        self.stop_nginx()
        if self.hostile:
            self.hostile.kill()
            self.hostile.wait()
        for ns in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class ConnectionSampler(threading.Thread):
    """Counts the server's established connections every 20 ms; keeps the maximum."""

    def __init__(self, lab):
        super().__init__(daemon=True)
        self.lab = lab
        self.maximum = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            try:
                self.maximum = max(self.maximum, self.lab.established())
            except RuntimeError:
                pass
            self.stopped.wait(0.02)

    def stop(self):
        self.stopped.set()
        self.join()
        return self.maximum


RX_SAMPLER = r"""
import sys, time
names = sys.argv[1:]
files = [open(f"/sys/class/net/{n}/statistics/rx_bytes") for n in names]
last = None
out = sys.stdout
while True:
    values = []
    for f in files:
        f.seek(0)
        try:
            values.append(int(f.read()))
        except (OSError, ValueError):
            values.append(-1)
    if values != last:
        out.write(f"{time.monotonic():.6f} " + " ".join(map(str, values)) + "\n")
        out.flush()
        last = values
    time.sleep(0.0005)
"""


class RxSampler:
    """Samples the client's rx byte counters of `names` inside its namespace (sysfs there is the
    namespace's own under `ip netns exec`), writing a line at every change."""

    def __init__(self, lab, names):
        self.path = f"{lab.workdir}/rx.log"
        self.out = open(self.path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", lab.client, sys.executable, "-c", RX_SAMPLER, *names],
                                     stdout=self.out, stderr=subprocess.DEVNULL)
        time.sleep(0.2)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.out.close()
        rows = []
        with open(self.path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2:
                    rows.append((float(fields[0]), [int(x) for x in fields[1:]]))
        return rows


def ours(binary, url, out, state, extra=(), trace=False):
    # --trace: the NDJSON events on stdout (connection counts as they change) instead of -q.
    return [binary, "download", "--json" if trace else "-q", "--state-dir", state, "-o", out, *extra, url]


def peer(tool, url, out, cacert=None):
    directory, name = os.path.split(out)
    curl_ca = ["--cacert", cacert] if cacert else []
    aria_ca = [f"--ca-certificate={cacert}"] if cacert else []
    if tool == "curl":
        return ["curl", "-sS", *curl_ca, "-o", out, url]
    if tool == "curl+sync":
        # What making curl's file durable costs (ours is fsynced when it says completed).
        return ["sh", "-c", f'curl -sS {" ".join(curl_ca)} -o "$1" "$2" && sync -f "$1"', "curl-sync", out, url]
    if tool == "aria2c":
        return ["aria2c", "-q", *aria_ca, "--allow-overwrite=true", "--auto-file-renaming=false", "-d", directory, "-o", name, url]
    if tool == "aria2c-x16":
        return ["aria2c", "-q", *aria_ca, "-x16", "-s16", "--min-split-size=1M", "--allow-overwrite=true",
                "--auto-file-renaming=false", "-d", directory, "-o", name, url]
    raise ValueError(tool)


def tool_command(tool, args, url, out, state, cacert=None):
    ca = ["--cacert", cacert] if cacert else []
    trace = getattr(args, "trace", False)
    if tool.startswith("baseline"):
        extra = shlex.split(tool[len("baseline"):].strip(" []"))
        return ours(args.baseline, url, out, state, ca + extra, trace)
    if tool.startswith("reachability-journal-off"):
        extra = shlex.split(tool[len("reachability-journal-off"):].strip(" []"))
        return ["env", JOURNAL_OFF] + ours(args.binary, url, out, state, ca + extra, trace)
    if tool.startswith("reachability"):
        extra = shlex.split(tool[len("reachability"):].strip(" []"))
        return ours(args.binary, url, out, state, ca + extra, trace)
    return peer(tool, url, out, cacert)


def clean_outputs(out, state):
    for path in (out, out + ".part", out + ".aria2"):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(state, ignore_errors=True)


class Finished:
    """A finished command: exit status, output, and the CPU time it and its children used."""

    def __init__(self, returncode, stdout, stderr, cpu):
        self.returncode, self.stdout, self.stderr, self.cpu = returncode, stdout, stderr, cpu


def run_timed(lab, argv, timeout):
    """Runs `argv` in the client namespace: (Finished, wall seconds, most connections at once).
    The CPU time (user + system) comes from wait4 on the command (`ip netns exec` execs it), so
    it counts the tool and the children it waited for (curl and sync under `sh`), not the
    sampler's `ss` runs."""
    sampler = ConnectionSampler(lab)
    sampler.start()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(["ip", "netns", "exec", lab.client] + argv, stdout=out, stderr=err,
                                env={**os.environ, "NO_COLOR": "1"})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        elapsed = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        finished = Finished(proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                            {"user": usage.ru_utime, "sys": usage.ru_stime})
    return finished, elapsed, sampler.stop()


def tools_for(args, base):
    tools = base + [("reachability " + variant).strip() for variant in args.ours]
    if args.journal_off:
        tools += [("reachability-journal-off " + variant).strip() for variant in args.ours]
    return tools


def connection_trace(stdout):
    """The connection counts a `download --json` run went through, in order ('1 2 1')."""
    import json
    counts = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "connections" and "connections" in event:
            if not counts or counts[-1] != event["connections"]:
                counts.append(event["connections"])
    return counts


def load():
    """The 1-minute load average (the machine may be shared: each figure is printed beside it)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def measure_transfer(args, scenario, rate):
    """capped / unthrottled: every tool fetches the file from nginx over an unshaped veth."""
    workdir = tempfile.mkdtemp(prefix="segment-bench-")
    lab = Lab(0, workdir)
    results = []
    try:
        lab.uplink("eth1", CLIENT1, 100)
        digest = random_file(f"{workdir}/www/file.bin", args.size_mib, args.seed)
        size = args.size_mib << 20
        lab.start_nginx(rate, tls=args.tls)
        cacert = f"{workdir}/nginx/cert.pem" if args.tls else None
        url = f"{'https' if args.tls else 'http'}://{SERVER}/file.bin"
        out, state = f"{workdir}/client/file.bin", f"{workdir}/state"
        os.makedirs(f"{workdir}/client", exist_ok=True)
        if args.peers is not None:
            base = [tool for tool in args.peers.split(",") if tool]
        else:
            base = ["curl", "aria2c", "aria2c-x16"] if scenario == "capped" else ["curl", "curl+sync", "aria2c-x16"]
        # The other build runs each --ours variant too, so each row has its A/B beside it.
        tools = tools_for(args, base) + ([("baseline " + variant).strip() for variant in args.ours] if args.baseline else [])
        for run in range(args.runs):
            order = tools[:]
            random.Random(args.seed + run).shuffle(order)
            for tool in order:
                clean_outputs(out, state)
                lab.reset_log()
                before = load()
                proc, elapsed, most = run_timed(lab, tool_command(tool, args, url, out, state, cacert), args.timeout)
                lab.wait_idle()
                log = lab.log()
                ok = proc.returncode == 0 and sha256_file(out) == digest
                if not ok:
                    print(f"# {tool}: exit {proc.returncode}: {proc.stderr[-500:]}", file=sys.stderr)
                results.append({"tool": tool, "run": run, "seconds": elapsed, "ok": ok, "most": most,
                                "opened": len({row[0] for row in log}), "requests": len(log),
                                "sent": sum(row[2] for row in log), "size": size, "load": max(before, load()),
                                "user": proc.cpu["user"], "sys": proc.cpu["sys"]})
                print(f"# {scenario} run {run + 1} {tool}: {elapsed:.2f} s (user {proc.cpu['user']:.2f} s, "
                      f"sys {proc.cpu['sys']:.2f} s), {most} at once, "
                      f"{results[-1]['opened']} opened, {len(log)} requests, load {results[-1]['load']:.1f}, ok={ok}",
                      file=sys.stderr, flush=True)
                if args.trace:
                    counts = connection_trace(proc.stdout) if tool.startswith(("reachability", "baseline")) else []
                    results[-1]["trace"] = counts
                    # Each request as nginx logged it: connection, status, body bytes, Range.
                    requests = "; ".join(f"{row[0]} {row[1]} {row[2] / 1048576:.1f} MiB {row[4]}" for row in log)
                    print(f"#   trace: connections {' '.join(map(str, counts)) or '-'}; requests: {requests}",
                          file=sys.stderr, flush=True)
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def report_transfer(scenario, results, args):
    """Worst, median and best per tool; the ratios against aria2c -x16 (or curl+sync, or curl) are
    taken run by run (the same run's peer), and their worst is the one that counts."""
    tools = list(dict.fromkeys(r["tool"] for r in results))
    present = set(tools)
    peer_name = next((t for t in ("aria2c-x16", "curl+sync", "curl") if t in present), None)
    peer_of = {r["run"]: r["seconds"] for r in results if r["tool"] == peer_name}
    rate = f"nginx limit_rate {args.rate} per connection" if scenario == "capped" else "nginx, no limit"
    scheme = "HTTPS (nginx with TLS)" if args.tls else "HTTP"
    print(f"\n## {scenario}: {args.size_mib} MiB, {rate}, {scheme}, veth pair, {args.runs} run(s), seed {args.seed}\n")
    print(f"| tool | worst | median | best | x {peer_name} (same run): worst | median | best | connections at once (max) "
          f"| connections opened (max) | bytes sent / size (max) | load (max) | sha256 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for tool in tools:
        rows = [r for r in results if r["tool"] == tool]
        times = sorted(r["seconds"] for r in rows)
        ratios = sorted(r["seconds"] / peer_of[r["run"]] for r in rows if r["run"] in peer_of)
        ratio = (f"{ratios[-1]:.2f}x | {statistics.median(ratios):.2f}x | {ratios[0]:.2f}x" if ratios else "- | - | -")
        print(f"| {tool} | {times[-1]:.2f} s | {statistics.median(times):.2f} s | {times[0]:.2f} s | {ratio} "
              f"| {max(r['most'] for r in rows)} | {max(r['opened'] for r in rows)} "
              f"| {max(r['sent'] for r in rows) / rows[0]['size']:.3f} | {max(r['load'] for r in rows):.1f} "
              f"| {'ok' if all(r['ok'] for r in rows) else 'WRONG'} |")
    # CPU time (user + system, from wait4): what each tool does per byte, which the machine's
    # load does not change as much as it changes the wall time.
    print("\n| tool | CPU user+sys: worst | median | best | user (median) | sys (median) |")
    print("|---|---|---|---|---|---|")
    for tool in tools:
        rows = [r for r in results if r["tool"] == tool and "user" in r]
        if rows:
            cpu = sorted(r["user"] + r["sys"] for r in rows)
            print(f"| {tool} | {cpu[-1]:.2f} s | {statistics.median(cpu):.2f} s | {cpu[0]:.2f} s "
                  f"| {statistics.median(r['user'] for r in rows):.2f} s | {statistics.median(r['sys'] for r in rows):.2f} s |")
    loads = [r["load"] for r in results]
    print(f"\nLoad average (1 min) over the runs: {min(loads):.1f}-{max(loads):.1f} "
          f"(the machine is shared: other builds and tests ran meanwhile).")
    # The worst run of each of ours beside its neighbours: was the peer slow too in that run (the
    # machine's load), or only we (the planner)?
    peer_times = sorted(peer_of.values())
    for tool in tools:
        if not tool.startswith(("reachability", "baseline")) or not peer_of:
            continue
        rows = [r for r in results if r["tool"] == tool and r["run"] in peer_of]
        if not rows:
            continue
        worst = max(rows, key=lambda r: r["seconds"] / peer_of[r["run"]])
        trace = f", connections {' '.join(map(str, worst['trace']))}" if worst.get("trace") else ""
        print(f"- {tool}, worst run ({worst['run'] + 1}): {worst['seconds']:.2f} s, {worst['most']} at once, "
              f"{worst['opened']} opened{trace}; {peer_name} in the same run {peer_of[worst['run']]:.2f} s "
              f"(its median {statistics.median(peer_times):.2f} s, worst {peer_times[-1]:.2f} s); "
              f"load {worst['load']:.1f}")
    # The journal A/B: the same variant with the per-segment journal rule (ours) and without.
    for tool in tools:
        if not tool.startswith("reachability-journal-off"):
            continue
        on = "reachability" + tool[len("reachability-journal-off"):]
        on_of = {r["run"]: r["seconds"] for r in results if r["tool"] == on}
        ratios = sorted(r["seconds"] / on_of[r["run"]] for r in results if r["tool"] == tool and r["run"] in on_of)
        costs = sorted(on_of[r["run"]] / r["seconds"] - 1 for r in results if r["tool"] == tool and r["run"] in on_of)
        if costs:
            on_med = statistics.median(on_of.values())
            off_med = statistics.median(r["seconds"] for r in results if r["tool"] == tool)
            print(f"- journal per segment, cost (time on / off - 1, same run): worst {costs[-1] * 100:+.1f} %, "
                  f"median {statistics.median(costs) * 100:+.1f} %, best {costs[0] * 100:+.1f} %; "
                  f"medians {on_med:.2f} s on, {off_med:.2f} s off ({(on_med / off_med - 1) * 100:+.1f} %)")


# MARK: two paths


def paths_lab(args, workdir, index=0):
    lab = Lab(index, workdir)
    rate1, rate2 = args.rates.split(",")
    lab.uplink("eth1", CLIENT1, 100, rate1)
    # "ww" names classify as cellular (systemd's predictable name for WWAN), hence expensive.
    lab.uplink("ww0", CLIENT2, 200, rate2)
    return lab


def mbit(rate):
    value = float(rate.rstrip("mbitMBIT"))
    return value


def measure_paths(args):
    workdir = tempfile.mkdtemp(prefix="segment-bench-")
    lab = paths_lab(args, workdir)
    results = []
    try:
        size_mib = args.paths_mib
        digest = random_file(f"{workdir}/www/file.bin", size_mib, args.seed)
        lab.start_nginx(None)
        url = f"http://{SERVER}/file.bin"
        out, state = f"{workdir}/client/file.bin", f"{workdir}/state"
        os.makedirs(f"{workdir}/client", exist_ok=True)
        tools = ["curl", "aria2c-x16"] + [("reachability " + v).strip() for v in args.ours] + \
                [("reachability --no-expensive " + v).strip() for v in args.ours]
        for tool in tools:
            clean_outputs(out, state)
            lab.reset_log()
            rx = RxSampler(lab, ["eth1", "ww0"])
            proc, elapsed, most = run_timed(lab, tool_command(tool, args, url, out, state), args.timeout)
            rows = rx.stop()
            ok = proc.returncode == 0 and sha256_file(out) == digest
            per = [rows[-1][1][i] - rows[0][1][i] for i in range(2)] if rows else [0, 0]
            results.append({"tool": tool, "seconds": elapsed, "ok": ok, "most": most, "eth1": per[0], "ww0": per[1],
                            "size": size_mib << 20})
            if not ok:
                print(f"# {tool}: exit {proc.returncode}: {proc.stderr[-500:]}", file=sys.stderr)
            print(f"# paths {tool}: {elapsed:.2f} s, eth1 {per[0] >> 20} MiB, ww0 {per[1] >> 20} MiB", file=sys.stderr, flush=True)
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    rate1, rate2 = (mbit(r) for r in args.rates.split(","))
    print(f"\n## paths: {args.paths_mib} MiB over two uplinks shaped to {rate1:g} and {rate2:g} Mbit/s "
          f"(tc tbf; the second classifies as cellular), nginx unlimited, seed {args.seed}\n")
    print("| tool | time | aggregate | share of the sum | first uplink | second uplink | connections at once | sha256 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        rate = r["size"] * 8 / r["seconds"] / 1e6
        print(f"| {r['tool']} | {r['seconds']:.2f} s | {rate:.1f} Mbit/s | {rate / (rate1 + rate2) * 100:.0f} % "
              f"| {r['eth1'] / 1048576:.1f} MiB | {r['ww0'] / 1048576:.1f} MiB | {r['most']} | {'ok' if r['ok'] else 'WRONG'} |")


def measure_cut(args):
    """The first uplink is cut at 30 % of the time curl would need over it, restored 3 s later."""
    workdir = tempfile.mkdtemp(prefix="segment-bench-")
    results = []
    try:
        size_mib = args.paths_mib
        digest = random_file(f"{workdir}/file.bin", size_mib, args.seed)
        tools = [("reachability " + v).strip() for v in args.ours] + ["curl-retry", "aria2c-x16"]
        for index, tool in enumerate(tools):
            lab = paths_lab(args, f"{workdir}/{index}", index)
            try:
                shutil.copy(f"{workdir}/file.bin", f"{workdir}/{index}/www/file.bin")
                lab.start_nginx(None)
                url = f"http://{SERVER}/file.bin"
                out, state = f"{workdir}/{index}/client/file.bin", f"{workdir}/{index}/state"
                os.makedirs(f"{workdir}/{index}/client", exist_ok=True)
                if tool == "curl-retry":
                    argv = ["curl", "-sS", "--retry", "1000", "--retry-all-errors", "--retry-delay", "1", "-C", "-",
                            "--speed-limit", "1024", "--speed-time", "3", "-o", out, url]
                else:
                    argv = tool_command(tool, args, url, out, state)
                rx = RxSampler(lab, ["eth1", "ww0"])
                start = time.monotonic()
                proc = subprocess.Popen(["ip", "netns", "exec", lab.client] + argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
                cut_after = args.cut_at * (size_mib << 20) * 8 / (mbit(args.rates.split(",")[0]) * 1e6)
                time.sleep(cut_after)
                cut = time.monotonic()
                if args.cut == "blackhole":
                    # Dropped in the client namespace: the link and its routes stay up, so only
                    # silence tells that this uplink is gone.
                    sh("ip", "netns", "exec", lab.client, "iptables", "-A", "INPUT", "-i", "eth1", "-j", "DROP")
                    sh("ip", "netns", "exec", lab.client, "iptables", "-A", "OUTPUT", "-o", "eth1", "-j", "DROP")
                else:
                    ip(f"-n {lab.client} link set eth1 down")
                time.sleep(args.cut_seconds)
                restored = time.monotonic()
                if args.cut == "blackhole":
                    sh("ip", "netns", "exec", lab.client, "iptables", "-F", "INPUT")
                    sh("ip", "netns", "exec", lab.client, "iptables", "-F", "OUTPUT")
                else:
                    ip(f"-n {lab.client} link set eth1 up")
                    lab.route("eth1", 100)
                try:
                    proc.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                finished = time.monotonic()
                rows = rx.stop()
                ok = proc.returncode == 0 and sha256_file(out) == digest
                if not ok:
                    print(f"# cut {tool}: exit {proc.returncode}: {proc.stderr.read().decode(errors='replace')[-500:]}",
                          file=sys.stderr)
                # Largest gap between data arriving (both uplinks), from the cut until the download
                # ended: a sample counts once the counters grew by a full-sized packet since the
                # last one that counted (ARP, ACKs and router advertisements alone do not); and
                # when the first uplink next carried 64 KiB within 100 ms.
                gap, previous, counted = 0.0, cut, None
                back = None
                window = []
                for stamp, values in rows:
                    if stamp < cut or stamp > finished:
                        continue
                    total = sum(v for v in values if v >= 0)
                    if counted is None:
                        counted = total
                    elif total - counted >= 1400:
                        gap = max(gap, stamp - previous)
                        previous = stamp
                        counted = total
                    if stamp >= restored and back is None and values[0] >= 0:
                        window.append((stamp, values[0]))
                        while window and stamp - window[0][0] > 0.1:
                            window.pop(0)
                        if window[-1][1] - window[0][1] >= 64 << 10:
                            back = window[0][0] - restored
                results.append({"tool": tool, "ok": ok, "gap": gap, "back": back, "total": finished - start})
                print(f"# cut {tool}: gap {gap * 1000:.0f} ms, back {back}, ok={ok}", file=sys.stderr, flush=True)
            finally:
                lab.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n## cut: the first uplink {'blackholed' if args.cut == 'blackhole' else 'taken down'} at "
          f"{args.cut_at * 100:.0f} % of its solo time for {args.cut_seconds:g} s, {args.paths_mib} MiB, seed {args.seed}\n")
    print("| tool | largest gap between bytes after the cut | first uplink carries data again after restore | total | sha256 |")
    print("|---|---|---|---|---|")
    for r in results:
        back = f"{r['back'] * 1000:.0f} ms" if r["back"] is not None else "never"
        print(f"| {r['tool']} | {r['gap'] * 1000:.0f} ms | {back} | {r['total']:.2f} s | {'ok' if r['ok'] else 'WRONG'} |")


# MARK: kills


def rx_bytes(lab, name):
    return int(sh("ip", "netns", "exec", lab.client, "cat", f"/sys/class/net/{name}/statistics/rx_bytes"))


# Ethernet (14), IPv4 (20) and TCP with timestamps (32) per received packet (a GRO-merged packet
# counts once), as outage_bench.py: rx_bytes less this per rx_packets is the TCP payload.
HEADER_BYTES = 14 + 20 + 32


def rx_payload(lab, name):
    """TCP payload (HTTP heads included) the client's uplink `name` received so far."""
    out = sh("ip", "netns", "exec", lab.client, "cat", f"/sys/class/net/{name}/statistics/rx_bytes",
             f"/sys/class/net/{name}/statistics/rx_packets")
    received, packets = (int(x) for x in out.split())
    return received - HEADER_BYTES * packets


def coverage(rows):
    """[start, end) of the body bytes each logged request was sent (from its Range)."""
    spans = []
    for _, _, sent, _, rng in rows:
        start = 0
        match = re.match(r'"bytes=(\d+)-', rng)
        if match:
            start = int(match.group(1))
        spans.append((start, start + sent))
    return spans


def overlap(a, b):
    """Bytes covered by both lists of spans (each list merged first)."""
    def merged(spans):
        out = []
        for start, end in sorted(spans):
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], end)
            else:
                out.append([start, end])
        return out
    total, left, right = 0, merged(a), merged(b)
    i = j = 0
    while i < len(left) and j < len(right):
        low, high = max(left[i][0], right[j][0]), min(left[i][1], right[j][1])
        total += max(0, high - low)
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return total


def measure_kills(args):
    workdir = tempfile.mkdtemp(prefix="segment-bench-")
    lab = Lab(0, workdir)
    generator = random.Random(args.seed)
    results = []
    try:
        lab.uplink("eth1", CLIENT1, 100)
        mib = args.kill_mib
        digest = random_file(f"{workdir}/www/file.bin", mib, args.seed)
        size = mib << 20
        lab.start_nginx(args.rate)
        url = f"http://{SERVER}/file.bin"
        out, state = f"{workdir}/client/file.bin", f"{workdir}/state"
        os.makedirs(f"{workdir}/client", exist_ok=True)
        tools = [("reachability " + v).strip() for v in args.ours] + ["aria2c-x16-c"]
        for tool in tools:
            for trial in range(args.trials):
                clean_outputs(out, state)
                lab.reset_log()
                if tool == "aria2c-x16-c":
                    argv = peer("aria2c-x16", url, out)
                    argv.insert(1, "-c")
                else:
                    argv = tool_command(tool, args, url, out, state)
                phase = generator.uniform(0.1, 0.9)
                base = rx_bytes(lab, "eth1")
                wire_base = rx_payload(lab, "eth1")
                proc = subprocess.Popen(["ip", "netns", "exec", lab.client] + argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                # Killed once the client has received a random share of the file (its rx counter).
                while rx_bytes(lab, "eth1") - base < phase * size and proc.poll() is None:
                    time.sleep(0.01)
                at_kill = lab.established()
                os.killpg(proc.pid, 9)
                proc.wait()
                lab.wait_idle()
                killed = lab.log()
                first = proc.returncode
                proc2 = subprocess.run(["ip", "netns", "exec", lab.client] + argv, capture_output=True, text=True,
                                       timeout=args.timeout)
                lab.wait_idle()
                rows = lab.log()
                sent = sum(row[2] for row in rows)
                # On the wire: nginx's log also counts what it had written into its socket and never
                # sent (the killed client's kernel answered with a reset).
                wire = rx_payload(lab, "eth1") - wire_base - size
                # Sent again because of the kill: what the killed run was sent that the rerun was
                # sent again (bytes one run fetched twice, a tail piece, are not the kill's).
                again = overlap(coverage(killed), coverage(rows[len(killed):]))
                ok = proc2.returncode == 0 and sha256_file(out) == digest
                if not ok:
                    print(f"# kills {tool} trial {trial}: exit {proc2.returncode}: {proc2.stderr[-400:]}", file=sys.stderr)
                results.append({"tool": tool, "ok": ok, "wasted": sent - size, "wire": wire, "again": again, "connections": at_kill,
                                "completed_before_kill": first == 0, "load": os.getloadavg()[0]})
                if args.trace:
                    for label, part in (("killed", killed), ("rerun", rows[len(killed):])):
                        for _, status, count, _, rng in part:
                            print(f"#   {label} {status} {rng} {count}", file=sys.stderr)
                print(f"# kills {tool} {trial}: killed at {phase * 100:.0f} % with {at_kill} connections, re-fetched "
                      f"{(sent - size) / 1048576:.2f} MiB ({again / 1048576:.2f} MiB of the killed run's; on the wire "
                      f"{wire / 1048576:.2f} MiB), ok={ok}, "
                      f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n## kills: SIGKILL once a random share (10-90 %) of the file has arrived, then the same command; {args.trials} trials "
          f"per tool, {args.kill_mib} MiB, nginx limit_rate {args.rate}, seed {args.seed}\n")
    print("| tool | completed right | sent twice per kill (nginx's log): worst | median | best | of which the killed run's, sent again: worst | median | best | on the wire: worst | median | best | connections at the kill, median | load (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for tool in dict.fromkeys(r["tool"] for r in results):
        rows = [r for r in results if r["tool"] == tool]
        wasted = [r["wasted"] / 1048576 for r in rows]
        again = [r["again"] / 1048576 for r in rows]
        wire = [r["wire"] / 1048576 for r in rows]
        print(f"| {tool} | {sum(r['ok'] for r in rows)}/{len(rows)} | {max(wasted):.2f} MiB | {statistics.median(wasted):.2f} MiB "
              f"| {min(wasted):.2f} MiB | {max(again):.2f} MiB | {statistics.median(again):.2f} MiB | {min(again):.2f} MiB "
              f"| {max(wire):.2f} MiB | {statistics.median(wire):.2f} MiB | {min(wire):.2f} MiB "
              f"| {statistics.median(r['connections'] for r in rows):g} | {max(r['load'] for r in rows):.1f} |")


# MARK: hostile servers

HOSTILE_SERVER = r"""
import http.server, socketserver, sys, random, itertools
mode, path_a, path_b, host, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
A = open(path_a, "rb").read()
B = open(path_b, "rb").read()
counter = itertools.count()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_GET(self):
        # Every connection is served by its own "backend": even connections get A, odd ones B.
        if not hasattr(self, "backend"):
            self.backend = next(counter)
        body, etag = A, '"v1"'
        status, headers = 200, {}
        rng = self.headers.get("Range")
        odd = self.backend % 2 == 1
        if mode == "bytes" and odd:
            body = B                      # another version, same ETag
        if mode == "etag" and odd:
            body, etag = B, '"v2"'       # another version, its own ETag
        total = len(body)
        start, end = 0, total - 1
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            start = int(first)
            end = min(int(last), total - 1) if last else total - 1
            status = 206
            if mode == "200" and odd:
                status, start, end = 200, 0, total - 1   # ignores the range on this connection
        if mode == "total" and odd and status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{total + 1}"
        elif status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{total}"
        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        view = memoryview(body)[start:end + 1]
        try:
            for i in range(0, len(view), 65536):
                self.wfile.write(view[i:i + 65536])
                if mode != "fast":
                    import time; time.sleep(0.004)   # about 16 MiB/s per connection: worth splitting
        except (BrokenPipeError, ConnectionResetError):
            pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

Server((host, port), Handler).serve_forever()
"""


def measure_hostile(args):
    workdir = tempfile.mkdtemp(prefix="segment-bench-")
    results = []
    try:
        mib = args.hostile_mib
        digest_a = random_file(f"{workdir}/a.bin", mib, args.seed)
        digest_b = random_file(f"{workdir}/b.bin", mib, args.seed + 1)
        with open(f"{workdir}/server.py", "w") as f:
            f.write(HOSTILE_SERVER)
        for index, mode in enumerate(["bytes", "etag", "200", "total"]):
            lab = Lab(index, f"{workdir}/{index}")
            try:
                lab.uplink("eth1", CLIENT1, 100)
                lab.hostile = subprocess.Popen(["ip", "netns", "exec", lab.server, sys.executable, f"{workdir}/server.py",
                                                mode, f"{workdir}/a.bin", f"{workdir}/b.bin", SERVER, str(PORT)],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                lab.wait_listening()
                url = f"http://{SERVER}/file.bin"
                out, state = f"{workdir}/{index}/client/file.bin", f"{workdir}/{index}/state"
                os.makedirs(f"{workdir}/{index}/client", exist_ok=True)
                for tool in [("reachability " + v).strip() for v in args.ours] + ["aria2c-x16"]:
                    clean_outputs(out, state)
                    proc, elapsed, most = run_timed(lab, tool_command(tool, args, url, out, state), args.timeout)
                    got = sha256_file(out)
                    verdict = ("right file" if got == digest_a else "the other version, whole" if got == digest_b
                               else "no file" if got is None else "SPLICED")
                    results.append({"mode": mode, "tool": tool, "status": proc.returncode, "verdict": verdict,
                                    "most": most, "message": proc.stderr.strip().splitlines()[-1:] if proc.stderr else []})
                    print(f"# hostile {mode} {tool}: exit {proc.returncode}, {verdict}, {most} at once", file=sys.stderr, flush=True)
            finally:
                lab.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n## hostile: a server whose odd-numbered connections answer differently, {args.hostile_mib} MiB\n")
    print("| server | tool | exit | file left | connections at once | last message |")
    print("|---|---|---|---|---|---|")
    names = {"bytes": "another version's bytes, same ETag", "etag": "another version with its own ETag",
             "200": "200 (whole file) to ranges", "total": "Content-Range total off by one"}
    bad = False
    for r in results:
        # One version whole (either) is not a splice: the server served both under one ETag.
        spliced = r["status"] == 0 and r["verdict"] not in ("right file", "the other version, whole")
        bad = bad or (spliced and r["tool"].startswith("reachability"))
        message = (r["message"][0] if r["message"] else "").replace("|", "/")[:120]
        print(f"| {names[r['mode']]} | {r['tool']} | {r['status']} | {r['verdict']}{' (exit 0!)' if spliced else ''} "
              f"| {r['most']} | {message} |")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--scenarios", default="capped,unthrottled,paths,cut,kills,hostile")
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--paths-mib", type=int, default=128)
    parser.add_argument("--kill-mib", type=int, default=128)
    parser.add_argument("--hostile-mib", type=int, default=32)
    parser.add_argument("--rate", default="4m", help="nginx limit_rate for capped and kills")
    parser.add_argument("--rates", default="100mbit,50mbit", help="tbf rates of the two uplinks")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--cut", choices=["down", "blackhole"], default="down")
    parser.add_argument("--cut-at", type=float, default=0.3)
    parser.add_argument("--cut-seconds", type=float, default=3.0)
    parser.add_argument("--ours", action="append", help="extra reachability arguments (repeatable; '' = defaults)")
    parser.add_argument("--baseline", help="another reachability build measured as 'baseline' with each --ours "
                        "variant (capped, unthrottled)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--peers", help="capped/unthrottled: the other tools, comma-separated (default: curl, aria2c, "
                        "aria2c-x16 capped; curl, curl+sync, aria2c-x16 unthrottled)")
    parser.add_argument("--tls", action="store_true", help="capped/unthrottled over HTTPS (nginx with a self-signed certificate)")
    parser.add_argument("--trace", action="store_true", help="capped/unthrottled: each run's connection counts (ours, "
                        "from download --json) and nginx's requests, on stderr and beside the worst run")
    parser.add_argument("--journal-off", action="store_true", help="capped/unthrottled: each --ours variant again "
                        "without the per-segment journal rule (a binary built with -Xswiftc -DSEGMENT_JOURNAL_AB)")
    args = parser.parse_args()
    if args.ours is None:
        args.ours = [""]
    args.binary = os.path.abspath(args.binary)
    if args.baseline:
        args.baseline = os.path.abspath(args.baseline)
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    for tool in ("nginx", "curl", "aria2c", "tc"):
        if shutil.which(tool) is None:
            sys.exit(f"missing {tool} (./scripts/setup.sh --bench)")
    scenarios = args.scenarios.split(",")
    failed = False
    if "capped" in scenarios:
        report_transfer("capped", measure_transfer(args, "capped", args.rate), args)
    if "unthrottled" in scenarios:
        report_transfer("unthrottled", measure_transfer(args, "unthrottled", None), args)
    if "paths" in scenarios:
        measure_paths(args)
    if "cut" in scenarios:
        measure_cut(args)
    if "kills" in scenarios:
        measure_kills(args)
    if "hostile" in scenarios:
        failed = measure_hostile(args) or failed
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
