#!/usr/bin/env python3
"""Outage recovery of `reachability download` against curl, wget and aria2c, in one run.

Each run builds a fresh pair of namespaces (client: /32 address + onlink default route; server:
nginx with limit_rate on a bridge kept up by a second veth pair, as in
Tests/IntegrationTests/DownloadOutageTests.swift), starts the downloader inside the client
namespace, and once a quarter of the file is on disk applies one scenario:

  outage N  the client link goes down for N seconds, then comes back up with its default route
  switch    a second uplink (another /32 source address) gets a default route and the first
            link is deleted: the old connection is dead, the new path is fine at once

Measured: total time, time from restore to the server seeing a new connection from the client
("reconnect", polled with ss in the server namespace), time from restore to the first byte beyond
what was on disk at restore ("resume"; our engine gathers 512 KiB before writing, so at 2 MiB/s this
trails the reconnect by about 0.25 s), time from restore to completion ("done"), wasted bytes (the server's access log
$body_bytes_sent summed over all requests, minus the file size; nginx's send_timeout is 2 s so a
vanished client's request is logged), and whether the SHA-256 matched.

The peers get their best retry flags for this job (retry forever, no or fixed short waits, a
3-second stall detector since they cannot see the link), shown in the table's footnotes.

Needs root. Namespaces are named rchO<pid>-*, always removed.
Usage: bench/outage_bench.py [--binary PATH] [--size-mib 16] [--rate 2m] [--outages 5,60]
                             [--tools reachability,curl,wget,aria2c] [--no-switch]
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

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
        self.start_nginx(rate)

    def uplink(self, name, address, route=True, metric=None):
        ip(f"link add {name} netns {self.client} type veth peer name p{name} netns {self.server}")
        ip(f"-n {self.server} link set p{name} master br0")
        ip(f"-n {self.server} link set p{name} up")
        ip(f"-n {self.client} addr add {address}/32 dev {name}")
        ip(f"-n {self.client} link set {name} up")
        if route:
            self.route(name, metric)

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
  log_format bytes '$remote_addr $status $body_bytes_sent';
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
                if len(fields) == 3:
                    total += int(fields[2])
        return total

    def close(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.kill()
            self.nginx.wait()
        for ns in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def command(tool, binary, url, out, state):
    directory, name = os.path.split(out)
    if tool == "reachability":
        return [binary, "download", "--state-dir", state, "-o", out, url]
    if tool == "curl":
        # --retry-delay 0 would mean curl's exponential backoff (1 s doubling); a fixed 1 s is better here.
        return ["curl", "-sS", "--retry", "100", "--retry-all-errors", "--retry-connrefused", "--retry-delay", "1",
                "--retry-max-time", "0", "-C", "-", "--connect-timeout", str(STALL_SECONDS),
                "--speed-limit", "1024", "--speed-time", str(STALL_SECONDS), "-o", out, url]
    if tool == "wget":
        return ["wget", "-q", "-c", "--tries=0", "--retry-connrefused", "--waitretry=0",
                f"--read-timeout={STALL_SECONDS}", f"--connect-timeout={STALL_SECONDS}", "-O", out, url]
    if tool == "aria2c":
        return ["aria2c", "-q", "-c", "--max-tries=0", "--retry-wait=0", f"--timeout={STALL_SECONDS}",
                # No --lowest-speed-limit: aria2c aborts (exit 5) on it instead of retrying.
                f"--connect-timeout={STALL_SECONDS}", "--file-allocation=none",
                "--allow-overwrite=true", "--auto-file-renaming=false", "-d", directory, "-o", name, url]
    raise ValueError(tool)


FLAGS_NOTE = {
    "reachability": "defaults (path monitor; stall 30 s)",
    "curl": f"--retry 100 --retry-all-errors --retry-connrefused --retry-delay 1 -C - --speed-limit 1024 --speed-time {STALL_SECONDS} --connect-timeout {STALL_SECONDS}",
    "wget": f"-c --tries=0 --retry-connrefused --waitretry=0 --read-timeout={STALL_SECONDS} --connect-timeout={STALL_SECONDS}",
    "aria2c": f"-c --max-tries=0 --retry-wait=0 --timeout={STALL_SECONDS} --connect-timeout={STALL_SECONDS} --file-allocation=none",
}


def on_disk(out):
    size = 0
    for path in (out, out + ".part"):
        try:
            size = max(size, os.stat(path).st_size)
        except FileNotFoundError:
            pass
    return size


def run_one(index, tool, scenario, args, content, digest):
    workdir = tempfile.mkdtemp(prefix="outage-bench-")
    lab = Lab(index, workdir, content, args.rate)
    try:
        out = f"{workdir}/client/file.bin"
        argv = command(tool, args.binary, f"http://{SERVER_ADDRESS}/file.bin", out, f"{workdir}/state")
        start = time.monotonic()
        proc = subprocess.Popen(["ip", "netns", "exec", lab.client] + argv, cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
        limit = time.monotonic() + 120
        while on_disk(out) < len(content) // 4:
            if proc.poll() is not None or time.monotonic() > limit:
                raise RuntimeError(f"{tool} did not get going: {proc.stderr.read().decode()[-400:]}")
            time.sleep(0.02)
        if scenario == "switch":
            old_connections = lab.client_connections()
            lab.uplink("eth2", "10.88.0.3", route=False)
            lab.route("eth2", metric=10)
            ip(f"-n {lab.client} link del eth1")
        else:
            ip(f"-n {lab.client} link set eth1 down")
            time.sleep(int(scenario))
            # Taken before the restore: a fast client reconnects before `ss` could run after it.
            old_connections = lab.client_connections()
            ip(f"-n {lab.client} link set eth1 up")
            lab.route("eth1")
        restored = time.monotonic()
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
            time.sleep(0.02)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        finished = time.monotonic()
        if resumed is None and proc.returncode == 0:
            resumed = finished
        ok = proc.returncode == 0 and os.path.exists(out) and hashlib.sha256(open(out, "rb").read()).hexdigest() == digest
        sent = lab.bytes_sent_when_idle()
        if not ok:
            print(f"# {tool} {scenario}: exit {proc.returncode}: {proc.stderr.read().decode(errors='replace')[-600:]}",
                  file=sys.stderr, flush=True)
        return {
            "tool": tool, "scenario": scenario, "ok": ok, "status": proc.returncode,
            "total": finished - start, "resume": (resumed - restored) if resumed else None,
            "reconnect": (reconnected - restored) if reconnected else None,
            "done": finished - restored, "wasted": sent - len(content),
        }
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(here, "..", ".build", "debug", "reachability"))
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--rate", default="2m", help="nginx limit_rate")
    parser.add_argument("--outages", default="5,60", help="comma-separated outage lengths in seconds")
    parser.add_argument("--tools", default="reachability,curl,wget,aria2c")
    parser.add_argument("--no-switch", action="store_true")
    parser.add_argument("--timeout", type=float, default=240, help="per run, after the restore")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    args.binary = os.path.abspath(args.binary)
    tools = args.tools.split(",")
    for tool in tools:
        if tool != "reachability" and not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install -y curl wget aria2")
    scenarios = [s for s in args.outages.split(",") if s] + ([] if args.no_switch else ["switch"])
    content = os.urandom(args.size_mib << 20)
    digest = hashlib.sha256(content).hexdigest()
    results = []
    index = 0
    for scenario in scenarios:
        for tool in tools:
            index += 1
            try:
                result = run_one(index, tool, scenario, args, content, digest)
            except Exception as error:  # one broken run must not lose the others
                print(f"# {scenario} {tool}: run failed: {error}", file=sys.stderr, flush=True)
                continue
            results.append(result)
            print(f"# {scenario:>6} {tool:<12} ok={result['ok']} total={result['total']:.1f}s "
                  f"resume={result['resume'] if result['resume'] is None else round(result['resume'], 2)}s "
                  f"wasted={result['wasted']}", file=sys.stderr, flush=True)

    print(f"\n{args.size_mib} MiB at limit_rate {args.rate}; scenario applied at 25% on disk.\n")
    print("| scenario | tool | ok | total s | restore→reconnect s | restore→resume s | restore→done s | wasted bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        name = f"outage {r['scenario']} s" if r["scenario"] != "switch" else "path switch"
        resume = "-" if r["resume"] is None else f"{r['resume']:.2f}"
        reconnect = "-" if r["reconnect"] is None else f"{r['reconnect']:.3f}"
        print(f"| {name} | {r['tool']} | {'yes' if r['ok'] else 'NO (exit %s)' % r['status']} | {r['total']:.1f} | "
              f"{reconnect} | {resume} | {r['done']:.1f} | {r['wasted']} |")
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
