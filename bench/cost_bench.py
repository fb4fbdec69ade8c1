#!/usr/bin/env python3
"""What reachability's guarantees cost, beside the peer, measured in the same run.

idle:       resident memory of `reachability watch` idle and of `reachability status`, beside
            `ip monitor` (same machine, same moment); then `status` with N routes in a
            namespace's table.
throughput: `reachability download -o` vs `curl -o` from nginx on loopback to disk, 512 MiB
            and 1 GiB, runs interleaved; wall time and peak RSS. Ours is durable when it says
            completed (fsync + rename + directory fsync); curl's is not, so `curl -o` followed
            by `sync -f` is shown too. --rate serves at that speed instead (a network slower
            than the disk, where durability should cost nothing).
crash:      a 64 MiB file served at 20 MiB/s per connection (default settings: ours opens up
            to 6); each trial SIGKILLs the download at a random moment, then runs the same
            command again: body bytes nginx logged beyond the file size (sent twice, on the
            wire), and the time from the rerun's start to the moment its file's allocated bytes
            grow past what the killed run left (a segmented file is sparse). Peer: `curl -C -`.
verify:     `reachability download --sha256` of a 200 MiB file that is already complete, in a
            DEBUG build (`swift build`: what a developer runs), beside `sha256sum`; the hash is
            libcrypto's in both builds, so debug no longer pays for Swift's unoptimized code.

Every number but verify's comes from the README's install build (release, static Swift stdlib),
which this script builds unless --binary is given (verify builds the debug binary unless
--debug-binary is given). Needs root for --routes (a network namespace named
rchC<pid>, always removed); nginx, curl, iproute2.

Usage: bench/cost_bench.py [--only idle|throughput|crash|verify] [--binary PATH] [--runs 5]
                           [--sizes 512,1024] [--rate 200m] [--trials 30] [--seed 1] [--routes 1000000]
                           [--debug-binary PATH]
"""
import argparse
import hashlib
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchnet import random_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = f"rchC{os.getpid()}"
CHILDREN = []
INSTALL_BUILD = ["swift", "build", "-c", "release", "--static-swift-stdlib", "--product", "reachability"]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def build(binary):
    if binary:
        return binary
    log("building the install build:", " ".join(INSTALL_BUILD))
    subprocess.run(INSTALL_BUILD, cwd=ROOT, check=True, stdout=sys.stderr)
    path = subprocess.run(INSTALL_BUILD[:-2] + ["--show-bin-path"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    return os.path.join(path, "reachability")


def run_measured(args):
    """Runs a child to completion: (seconds, peak RSS in KiB, exit status).

    The peak comes from /usr/bin/time: a child forked from Python would report Python's own
    resident set as its high-water mark (ru_maxrss survives exec)."""
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        code = subprocess.run(["/usr/bin/time", "-q", "-f", "%M %x", "-o", report.name] + args,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        elapsed = time.perf_counter() - start
        peak, status = report.read().split()[-2:]
    return elapsed, int(peak), int(status) if code == 0 else code


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def median(values):
    return statistics.median(values) if values else float("nan")


# MARK: nginx on loopback

class Nginx:
    def __init__(self, root, rate=None):
        self.dir = tempfile.mkdtemp(prefix="rch-cost-nginx-")
        os.makedirs(f"{self.dir}/tmp")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        limit = f"limit_rate {rate};" if rate else ""
        with open(f"{self.dir}/nginx.conf", "w") as conf:
            conf.write(f"""daemon off;
master_process off;
worker_processes 1;
error_log {self.dir}/error.log warn;
pid {self.dir}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    log_format bytes '$request_uri $status $body_bytes_sent "$http_range"';
    access_log {self.dir}/access.log bytes;
    client_body_temp_path {self.dir}/tmp/body;
    proxy_temp_path {self.dir}/tmp/proxy;
    fastcgi_temp_path {self.dir}/tmp/fastcgi;
    uwsgi_temp_path {self.dir}/tmp/uwsgi;
    scgi_temp_path {self.dir}/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    server {{ listen 127.0.0.1:{self.port}; root {root}; {limit} }}
}}
""")
        self.proc = subprocess.Popen(["/usr/sbin/nginx", "-c", f"{self.dir}/nginx.conf", "-p", f"{self.dir}/",
                                      "-e", f"{self.dir}/error.log"], stderr=subprocess.DEVNULL)
        CHILDREN.append(self.proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("nginx did not start")

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def log_lines(self):
        try:
            with open(f"{self.dir}/access.log") as log_file:
                return log_file.read().splitlines()
        except FileNotFoundError:
            return []

    def bytes_sent(self, since_line=0):
        """Body bytes nginx sent for the requests logged after `since_line`."""
        return sum(int(line.split()[2]) for line in self.log_lines()[since_line:] if len(line.split()) >= 3)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# MARK: idle

def foundation_proper_linked(binary):
    """True when the binary carries CoreFoundation (linked in with Foundation proper and ICU by
    a single call into Foundation proper: 3-4 MiB more resident memory for every command)."""
    symbols = subprocess.run(["nm", binary], capture_output=True, text=True).stdout
    return "__CFInitialize" in symbols


def shared_libstdcxx_needed(binary):
    """True when the binary loads libstdc++.so.6 (about 0.9 MiB more resident memory for every
    command): the release link did not find Sources/reachability/linker (see Package.swift)."""
    dynamic = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True).stdout
    return "libstdc++.so" in dynamic


def warn_about_footprint(binary):
    if foundation_proper_linked(binary):
        log("warning: the binary links Foundation proper (CoreFoundation + ICU); see FoundationFootprintTests")
        print("**Warning: this binary links Foundation proper (CoreFoundation, ICU).**\n")
    if shared_libstdcxx_needed(binary):
        log("warning: the binary loads libstdc++.so.6; see releaseLinkerFlags in Package.swift")
        print("**Warning: this binary loads libstdc++.so.6.**\n")


def idle(binary, routes):
    print("## Idle memory (VmRSS after start-up; status: peak RSS)\n")
    print("| process | RSS |")
    print("|---|---|")
    peers = {}
    for name, args in [("reachability watch", [binary, "watch"]), ("ip monitor", ["ip", "monitor"])]:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        CHILDREN.append(proc)
        if name.startswith("reachability"):
            proc.stdout.readline()   # ready: the first path line is out
        time.sleep(1.0)              # idle: whatever start-up left behind is what stays
        peers[name] = rss_kib(proc.pid)
        proc.terminate()
        proc.wait()
    _, status_rss, _ = run_measured([binary, "status"])
    _, ip_route_rss, _ = run_measured(["ip", "route", "show"])
    print(f"| `reachability watch` (idle) | {peers['reachability watch'] / 1024:.1f} MiB |")
    print(f"| `ip monitor` (idle) | {peers['ip monitor'] / 1024:.1f} MiB |")
    print(f"| `reachability status` | {status_rss / 1024:.1f} MiB |")
    print(f"| `ip route show` | {ip_route_rss / 1024:.1f} MiB |")
    if routes and os.geteuid() == 0:
        namespace = f"{PREFIX}-routes"
        subprocess.run(["ip", "netns", "add", namespace], check=True)
        try:
            ns = ["ip", "-n", namespace]
            subprocess.run(ns + ["link", "add", "enp3s0", "type", "veth", "peer", "name", "peer0"], check=True)
            subprocess.run(ns + ["link", "set", "enp3s0", "up"], check=True)
            subprocess.run(ns + ["link", "set", "peer0", "up"], check=True)
            subprocess.run(ns + ["addr", "add", "10.77.1.2/24", "dev", "enp3s0"], check=True)
            subprocess.run(ns + ["route", "add", "default", "via", "10.77.1.1"], check=True)
            batch = "".join(f"route add 10.{(i >> 16) & 0x3f | 0x40}.{(i >> 8) & 0xff}.{i & 0xff}/32 via 10.77.1.1 dev enp3s0\n"
                            for i in range(routes))
            subprocess.run(ns + ["-batch", "-"], input=batch, text=True, check=True)
            _, rss, code = run_measured([binary, "status", "--netns", namespace])
            _, ip_rss, _ = run_measured(ns + ["route", "show"])
            print(f"| `reachability status --netns` with {routes:,} routes | {rss / 1024:.1f} MiB (exit {code}) |")
            print(f"| `ip route show` of the same table | {ip_rss / 1024:.1f} MiB |")
        finally:
            subprocess.run(["ip", "netns", "del", namespace], check=False)
    print()


# MARK: throughput

def throughput(binary, sizes, runs, seed, rate=None):
    work = tempfile.mkdtemp(prefix="rch-cost-throughput-")
    try:
        os.makedirs(f"{work}/www")
        nginx = Nginx(f"{work}/www", rate=rate)
        served = f"nginx on loopback at {rate}B/s" if rate else "nginx on loopback"
        print(f"## Download to disk from {served} (median (min-max) of {runs} runs, interleaved)\n")
        print("| size | `curl -o` | `curl -o` + `sync -f` | `reachability download -o` | ratio to curl | peak RSS curl | peak RSS ours | RSS ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for mib in sizes:
            digest = random_file(f"{work}/www/f{mib}.bin", mib, seed + mib)
            url = nginx.url(f"f{mib}.bin")
            out = f"{work}/out.bin"
            times = {"curl": [], "curl+sync": [], "ours": []}
            rss = {"curl": [], "ours": []}

            def clean():
                for leftover in [out, out + ".part"]:
                    if os.path.exists(leftover):
                        os.remove(leftover)
                shutil.rmtree(f"{work}/state", ignore_errors=True)
                os.sync()   # nobody pays for the previous run's dirty pages

            for run in range(runs):
                order = ["curl", "ours"] if run % 2 == 0 else ["ours", "curl"]
                for tool in order:
                    clean()
                    if tool == "curl":
                        seconds, peak, code = run_measured(["curl", "-s", "-o", out, url])
                        start = time.perf_counter()
                        subprocess.run(["sync", "-f", out], check=True)
                        times["curl+sync"].append(seconds + time.perf_counter() - start)
                    else:
                        seconds, peak, code = run_measured([binary, "download", url, "-o", out,
                                                            "--state-dir", f"{work}/state"])
                    if code != 0:
                        raise RuntimeError(f"{tool} exited {code}")
                    if run == 0 and file_sha256(out) != digest:
                        raise RuntimeError(f"{tool} wrote a wrong file")
                    times[tool].append(seconds)
                    rss[tool].append(peak)
            curl, ours = median(times["curl"]), median(times["ours"])

            def spread(values):
                return f"{median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"
            print(f"| {mib} MiB | {spread(times['curl'])} | {spread(times['curl+sync'])} | {spread(times['ours'])} | {ours / curl:.2f}x "
                  f"| {max(rss['curl']) / 1024:.1f} MiB | {max(rss['ours']) / 1024:.1f} MiB "
                  f"| {max(rss['ours']) / max(rss['curl']):.2f}x |")
            os.remove(f"{work}/www/f{mib}.bin")
        nginx.stop()
        print()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# MARK: crash

def stored(path):
    """Bytes the file holds: its allocated blocks (a file fetched in segments is sparse, its size
    says nothing about what arrived); 0 when there is no file."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def wait_for_growth(path, beyond, deadline):
    """Polls the file's allocated bytes every 0.5 ms until they exceed `beyond`; the moment, or None."""
    while time.perf_counter() < deadline:
        if stored(path) > beyond:
            return time.perf_counter()
        time.sleep(0.0005)
    return None


def open_connections(port):
    """TCP connections to `port` nginx has not finished with (established or close-wait)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if len(fields) > 3 and fields[1].endswith(f":{port:04X}") and fields[3] in ("01", "08"):
                        count += 1
        except FileNotFoundError:
            pass
    return count


def crash(binary, trials, seed, mib=64, rate="20m"):
    work = tempfile.mkdtemp(prefix="rch-cost-crash-")
    generator = random.Random(seed)
    try:
        os.makedirs(f"{work}/www")
        digest = random_file(f"{work}/www/f.bin", mib, seed)
        size = mib << 20
        nginx = Nginx(f"{work}/www", rate=rate)
        url = nginx.url("f.bin")
        out = f"{work}/out.bin"
        tools = {
            "ours": (lambda: [binary, "download", url, "-o", out, "--state-dir", f"{work}/state"], out + ".part"),
            "curl -C -": (lambda: ["curl", "-s", "-C", "-", "-o", out, url], out),
        }
        results = {name: {"waste": [], "resume": []} for name in tools}
        # Killed once a random share of the file is on disk (allocated blocks for ours, whose file
        # is sparse with segments; the size for curl's).
        kills = [generator.uniform(0.1, 0.9) for _ in range(trials)]
        for trial, share in enumerate(kills):
            for name, (command, growing) in tools.items():
                for leftover in [out, out + ".part"]:
                    if os.path.exists(leftover):
                        os.remove(leftover)
                shutil.rmtree(f"{work}/state", ignore_errors=True)
                before = len(nginx.log_lines())
                first = subprocess.Popen(command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 60
                while stored(growing) < share * size and first.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.001)
                first.send_signal(signal.SIGKILL)
                first.wait()
                left = stored(growing)
                start = time.perf_counter()
                second = subprocess.Popen(command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                grew = wait_for_growth(growing, left, start + 30)
                second.wait(timeout=120)
                if second.returncode != 0 or file_sha256(out) != digest:
                    raise RuntimeError(f"{name}: trial {trial} ended {second.returncode} or with a wrong file")
                # nginx logs a request when it ends; the killed ones (several with segments) once
                # their connections closed.
                deadline = time.monotonic() + 10
                while open_connections(nginx.port) and time.monotonic() < deadline:
                    time.sleep(0.01)
                results[name]["waste"].append(nginx.bytes_sent(before) - size)
                results[name]["resume"].append((grew - start) if grew else float("nan"))
        nginx.stop()
        print(f"## SIGKILL at a random moment, same command again ({trials} trials, {mib} MiB at {rate}B/s, seed {seed})\n")
        print("| tool | sent twice: worst | median | best | rerun start -> file grows, median | max |")
        print("|---|---|---|---|---|---|")
        for name, values in results.items():
            waste, resume = values["waste"], values["resume"]
            print(f"| {name} | {max(waste) / 1048576:.2f} MiB | {median(waste) / 1048576:.2f} MiB | {min(waste) / 1048576:.2f} MiB "
                  f"| {median(resume) * 1000:.0f} ms | {max(resume) * 1000:.0f} ms |")
        print()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# MARK: verify

def verify(debug_binary, runs, seed, mib=200):
    if not debug_binary:
        log("building the debug binary: swift build --product reachability")
        subprocess.run(["swift", "build", "--product", "reachability"], cwd=ROOT, check=True, stdout=sys.stderr)
        path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        debug_binary = os.path.join(path, "reachability")
    work = tempfile.mkdtemp(prefix="rch-cost-verify-")
    try:
        target = f"{work}/f.bin"
        digest = random_file(target, mib, seed)
        ours, peer = [], []
        for run in range(runs):
            # Warm cache for both: this measures hashing, not the disk.
            seconds, _, code = run_measured([debug_binary, "download", "--sha256", digest, "--state-dir", f"{work}/state",
                                             "-o", target, "http://127.0.0.1:9/f.bin"])
            if code != 0:
                raise RuntimeError(f"reachability download --sha256 exited {code}")
            ours.append(seconds)
            seconds, _, code = run_measured(["sha256sum", target])
            peer.append(seconds)
        print(f"## `--sha256` check of a {mib} MiB file already in place, debug build (median of {runs})\n")
        print("| command | seconds |")
        print("|---|---|")
        print(f"| `reachability download --sha256` (debug build) | {median(ours):.2f} s |")
        print(f"| `sha256sum` | {median(peer):.2f} s |")
        print()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cleanup():
    for child in CHILDREN:
        if child.poll() is None:
            child.kill()
            child.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["idle", "throughput", "crash", "verify"])
    parser.add_argument("--binary")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="512,1024")
    parser.add_argument("--rate", help="throughput: nginx limit_rate (e.g. 200m), a network slower than loopback")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--routes", type=int, default=1_000_000)
    parser.add_argument("--debug-binary")
    options = parser.parse_args()
    binary = build(options.binary) if options.only != "verify" else None
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    if binary:
        warn_about_footprint(binary)
    try:
        if options.only in (None, "idle"):
            idle(binary, options.routes)
        if options.only in (None, "throughput"):
            throughput(binary, [int(size) for size in options.sizes.split(",")], options.runs, options.seed, options.rate)
        if options.only in (None, "crash"):
            crash(binary, options.trials, options.seed)
        if options.only in (None, "verify"):
            verify(options.debug_binary, options.runs, options.seed)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
