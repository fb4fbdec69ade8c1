#!/usr/bin/env python3
"""A fleet behind a site cache (issue 34 item 3): how many bytes the origin serves, and how long
the fleet takes, when N clients fetch one file through one cache.

Layout (namespaces PREFIX-ori, PREFIX-cch, PREFIX-cNN; PREFIX is cach<pid>, BENCH_NETNS_PREFIX
replaces cach): the origin nginx on 10.77.1.2:80 (`limit_rate` --origin-rate per connection,
access log of body bytes) -- the cache namespace (10.77.1.1 towards the origin, 10.77.2.1 on a
bridge towards the clients, no forwarding: clients reach the origin only through the cache) --
--clients client namespaces (10.77.2.10+). Caches, each started empty for every run:

  nginx   proxy_cache + slice 1m, proxy_cache_key $uri$is_args$args$slice_range,
          proxy_set_header Range $slice_range, proxy_cache_lock on (docs/downloads.md), read from
          Tests/Servers/nginx-slice-cache.conf.in, the file the tests (SiteCacheLab) run too
  squid   memory cache, range_offset_limit -1, quick_abort_min -1, collapsed_forwarding on

Tools, every client at once, the proxy given as each tool takes it: reachability download with
its default connections (--proxy), `aria2c -x16 -s16 --min-split-size=1M` (--all-proxy) and curl
(-x). Per run: wall time until the last client exits, bytes the origin sent (its access log),
clients whose file is the published one. --runs runs per (cache, tool), in a shuffled order;
worst and median are printed.

Scenario `replace`: the origin's file is replaced by another of the same length (a new
Last-Modified, so a new ETag) once the origin has sent --replace-at of one copy. Every client's
result must be version A whole, version B whole, or no file (a failure that says why): a file
that is neither is a splice, counted in the table (it must be 0 for reachability).

Needs root, nginx (with the slice module), squid (scripts/setup.sh), aria2c, curl (scripts/setup.sh --bench).
Usage: sudo bench/fleet_bench.py --binary .build/release/reachability [--clients 20]
       [--size-mib 32] [--runs 3] [--caches nginx,squid] [--tools ours,aria2c,curl]
       [--scenarios fleet,replace] [--origin-rate 20m]
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnet import ip, random_file, run, sha256_file  # noqa: E402

PROXY = "http://10.77.2.1:3128"
URL = "http://10.77.1.2/f.bin"


def slice_cache_template(store):
    """Tests/Servers/nginx-slice-cache.conf.in, the tests' configuration too, its store at `store`."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Servers", "nginx-slice-cache.conf.in")
    with open(path) as f:
        return f.read().replace("@STORE@", store)


def wait_listening(namespace, address, port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Hltn", "src", f"{address}:{port}"],
                             capture_output=True, text=True).stdout
        if f":{port}" in out:
            return True
        time.sleep(0.05)
    return False


NGINX_PRELUDE = """daemon off;
master_process off;
worker_processes 1;
error_log {p}/error.log warn;
pid {p}/nginx.pid;
events {{ worker_connections 4096; }}
"""
NGINX_TEMP = """    client_body_temp_path {p}/tmp/body;
    proxy_temp_path {p}/tmp/proxy;
    fastcgi_temp_path {p}/tmp/fastcgi;
    uwsgi_temp_path {p}/tmp/uwsgi;
    scgi_temp_path {p}/tmp/scgi;
"""


class Fleet:
    """The origin, the cache namespace and the client namespaces; `close()` removes them."""

    def __init__(self, prefix, workdir, clients, origin_rate):
        self.prefix, self.workdir = prefix, workdir
        self.origin, self.cache = f"{prefix}-ori", f"{prefix}-cch"
        self.clients = [f"{prefix}-c{i:02d}" for i in range(clients)]
        self.namespaces, self.processes = [], []
        self.cache_process = None
        # --squid-log DIR: squid logs every request (time, ms, client, status, bytes, Range).
        self.squid_log = None
        for ns in [self.origin, self.cache] + self.clients:
            ip(f"netns add {ns}")
            self.namespaces.append(ns)
            ip(f"-n {ns} link set lo up")
        ip(f"-n {self.origin} link add up0 type veth peer name down0 netns {self.cache}")
        ip(f"-n {self.origin} addr add 10.77.1.2/24 dev up0")
        ip(f"-n {self.origin} link set up0 up")
        ip(f"-n {self.cache} addr add 10.77.1.1/24 dev down0")
        ip(f"-n {self.cache} link set down0 up")
        ip(f"-n {self.cache} link add br0 type bridge")
        ip(f"-n {self.cache} addr add 10.77.2.1/24 dev br0")
        ip(f"-n {self.cache} link set br0 up")
        for index, ns in enumerate(self.clients):
            ip(f"-n {self.cache} link add d{index} type veth peer name up0 netns {ns}")
            ip(f"-n {self.cache} link set d{index} master br0")
            ip(f"-n {self.cache} link set d{index} up")
            ip(f"-n {ns} addr add 10.77.2.{10 + index}/24 dev up0")
            ip(f"-n {ns} link set up0 up")
            ip(f"-n {ns} route add default via 10.77.2.1")
        os.makedirs(f"{workdir}/www", exist_ok=True)
        p = f"{workdir}/origin"
        os.makedirs(f"{p}/tmp", exist_ok=True)
        with open(f"{p}/nginx.conf", "w") as f:
            f.write(NGINX_PRELUDE.format(p=p) + "http {\n    log_format bytes '$status $body_bytes_sent $http_range';\n"
                    f"    access_log {workdir}/origin.log bytes;\n" + NGINX_TEMP.format(p=p)
                    + f"    default_type application/octet-stream;\n    server {{\n        listen 10.77.1.2:80;\n"
                    f"        root {workdir}/www;\n        limit_rate {origin_rate};\n    }}\n}}\n")
        self.processes.append(subprocess.Popen(["ip", "netns", "exec", self.origin, "nginx", "-c", f"{p}/nginx.conf",
                                                "-p", f"{p}/", "-e", f"{p}/error.log"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_listening(self.origin, "10.77.1.2", 80):
            raise RuntimeError("origin nginx did not start")

    def start_cache(self, kind):
        """Starts `kind` with an empty store (the previous one stopped and removed)."""
        self.stop_cache()
        p = f"{self.workdir}/{kind}"
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(f"{p}/tmp", exist_ok=True)
        if kind == "nginx":
            with open(f"{p}/nginx.conf", "w") as f:
                f.write(NGINX_PRELUDE.format(p=p) + "http {\n    access_log off;\n" + NGINX_TEMP.format(p=p)
                        + slice_cache_template(f"{p}/store") + "}\n")
            argv = ["nginx", "-c", f"{p}/nginx.conf", "-p", f"{p}/", "-e", f"{p}/error.log"]
        else:
            with open(f"{p}/squid.conf", "w") as f:
                access_log = (f'logformat trace %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm "%{{Range}}>h"\n'
                              f"access_log {p}/access.log trace") if self.squid_log else "access_log none"
                f.write(f"""http_port 10.77.2.1:3128
http_access allow all
visible_hostname sitecache
cache_mem 1024 MB
maximum_object_size 4 GB
maximum_object_size_in_memory 512 MB
range_offset_limit -1
quick_abort_min -1 KB
collapsed_forwarding on
refresh_pattern . 60 20% 4320
pid_filename none
{access_log}
cache_log {p}/cache.log
cache_store_log none
coredump_dir {p}
shutdown_lifetime 0 seconds
""")
            open(f"{p}/access.log", "w").close()
            run("chown", "-R", "proxy:proxy", p)   # squid drops root for Debian's `proxy` user
            argv = ["/usr/sbin/squid", "-N", "-f", f"{p}/squid.conf"]
        self.cache_process = subprocess.Popen(["ip", "netns", "exec", self.cache] + argv,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_listening(self.cache, "10.77.2.1", 3128):
            raise RuntimeError(f"{kind} did not start")

    def stop_cache(self):
        if self.cache_process and self.cache_process.poll() is None:
            self.cache_process.kill()
            self.cache_process.wait()
        self.cache_process = None

    def serve(self, source, modified):
        """Replaces the origin's file atomically with `source`, stamped `modified`."""
        temporary = f"{self.workdir}/www/.f.bin.new"
        shutil.copyfile(source, temporary)
        os.utime(temporary, (modified, modified))
        os.rename(temporary, f"{self.workdir}/www/f.bin")

    def reset_log(self):
        open(f"{self.workdir}/origin.log", "w").close()
        # nginx keeps its descriptor: truncating in place is what it sees.

    def origin_bytes(self):
        total = 0
        with open(f"{self.workdir}/origin.log") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    total += int(parts[1])
        return total

    def close(self):
        self.stop_cache()
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def client_command(tool, binary, out_dir):
    out = f"{out_dir}/f.bin"
    if tool == "ours":
        return [binary, "download", "--quiet", "--state-dir", f"{out_dir}/state", "-o", out, "--proxy", PROXY, URL]
    if tool == "aria2c":
        return ["aria2c", "-q", "-x16", "-s16", "--min-split-size=1M", "--all-proxy", PROXY, "--file-allocation=none",
                "--allow-overwrite=true", "--auto-file-renaming=false", "-d", out_dir, "-o", "f.bin", URL]
    return ["curl", "-sf", "-x", PROXY, "-o", out, URL]


def fleet_run(fleet, tool, binary, cache, replace, versions, size, replace_at, timeout):
    """One fleet: every client at once. Returns the row's numbers."""
    fleet.serve(versions["A"][0], 1_700_000_000)
    fleet.start_cache(cache)
    fleet.reset_log()
    outs = []
    processes = []
    start = time.monotonic()
    for ns in fleet.clients:
        out_dir = tempfile.mkdtemp(prefix="cach-client-", dir=fleet.workdir)
        outs.append(out_dir)
        processes.append(subprocess.Popen(["ip", "netns", "exec", ns] + client_command(tool, binary, out_dir),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=out_dir))
    replaced_at = None
    while any(p.poll() is None for p in processes):
        if replace and replaced_at is None and fleet.origin_bytes() >= replace_at * size:
            fleet.serve(versions["B"][0], 1_700_000_100)
            replaced_at = time.monotonic() - start
        if time.monotonic() - start > timeout:
            for p in processes:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    for p in processes:
        p.wait()
    # "neither": a file of the full length that is neither version (a splice): with exit 0
    # ("neither"), or left by a peer that failed ("neitherFailed").
    results = {"A": 0, "B": 0, "none": 0, "neither": 0, "neitherFailed": 0}
    by_digest = {versions["A"][1]: "A", versions["B"][1]: "B"}
    for out_dir, p in zip(outs, processes):
        path = f"{out_dir}/f.bin"
        if p.returncode == 0 and os.path.exists(path):
            results[by_digest.get(sha256_file(path), "neither")] += 1
        elif os.path.exists(path) and os.path.getsize(path) == size and tool != "ours":
            # A peer that failed yet left a full-length file: counted by its content.
            results[by_digest.get(sha256_file(path), "neitherFailed")] += 1
        else:
            results["none"] += 1
        shutil.rmtree(out_dir, ignore_errors=True)
    fleet.stop_cache()
    if fleet.squid_log and cache == "squid":
        shutil.copyfile(f"{fleet.workdir}/squid/access.log", f"{fleet.squid_log}/{tool}-{int(time.time())}.log")
    return {"seconds": elapsed, "origin": fleet.origin_bytes(), "replaced": replaced_at, **results}


def load():
    return os.getloadavg()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--size-mib", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--caches", default="nginx,squid")
    parser.add_argument("--tools", default="ours,aria2c,curl")
    parser.add_argument("--scenarios", default="fleet,replace")
    parser.add_argument("--origin-rate", default="20m", help="nginx limit_rate per origin connection")
    parser.add_argument("--replace-at", type=float, default=0.25, help="replace: fraction of one copy the origin sent first")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--squid-log", help="keep squid's access log of each run in this directory "
                        "(time, ms, client, status, bytes, Range: requests per client and aborted ones)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("fleet_bench: needs root (network namespaces)")
    for tool in ("nginx", "aria2c", "curl") + (("squid",) if "squid" in args.caches else ()):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"fleet_bench: {tool} is not installed (scripts/setup.sh --bench)")
    binary = os.path.abspath(args.binary)
    prefix = os.environ.get("BENCH_NETNS_PREFIX", "cach") + str(os.getpid() % 100000)
    workdir = tempfile.mkdtemp(prefix="cach-fleet-")
    os.chmod(workdir, 0o755)
    size = args.size_mib << 20
    versions = {}
    for name, seed in (("A", args.seed), ("B", args.seed + 1)):
        path = f"{workdir}/version{name}"
        versions[name] = (path, random_file(path, args.size_mib, seed))
    fleet = None
    rows = {}
    try:
        fleet = Fleet(prefix, workdir, args.clients, args.origin_rate)
        if args.squid_log:
            os.makedirs(args.squid_log, exist_ok=True)
            fleet.squid_log = args.squid_log
        plan = [(scenario, cache, tool) for scenario in args.scenarios.split(",") for cache in args.caches.split(",")
                for tool in args.tools.split(",")]
        order = [entry for entry in plan for _ in range(args.runs)]
        random.Random(args.seed).shuffle(order)
        loads = []
        for scenario, cache, tool in order:
            loads.append(load())
            row = fleet_run(fleet, tool, binary, cache, scenario == "replace", versions, size, args.replace_at, args.timeout)
            rows.setdefault((scenario, cache, tool), []).append(row)
            print(f"{scenario:8} {cache:6} {tool:7} {row['seconds']:7.2f} s  origin {row['origin'] / size:5.2f} copies  "
                  f"A {row['A']} B {row['B']} none {row['none']} neither {row['neither']} (+{row['neitherFailed']} failed)", file=sys.stderr, flush=True)
    finally:
        if fleet:
            fleet.close()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{args.clients} clients, {args.size_mib} MiB, origin limit_rate {args.origin_rate} per connection, "
          f"{args.runs} runs each, load {min(loads):.1f}-{max(loads):.1f}\n")
    print("| scenario | cache | tool | time worst / median (s) | origin copies worst / median | files A / B / none / neither with exit 0 / neither, failed (all runs) |")
    print("|---|---|---|---|---|---|")
    for (scenario, cache, tool), results in rows.items():
        times = [r["seconds"] for r in results]
        copies = [r["origin"] / size for r in results]
        total = {key: sum(r[key] for r in results) for key in ("A", "B", "none", "neither", "neitherFailed")}
        print(f"| {scenario} | {cache} | {tool} | {max(times):.1f} / {statistics.median(times):.1f} | "
              f"{max(copies):.2f} / {statistics.median(copies):.2f} | "
              f"{total['A']} / {total['B']} / {total['none']} / {total['neither']} / {total['neitherFailed']} |")
    spliced = sum(r["neither"] + r["neitherFailed"] for (s, c, t), rs in rows.items() if t == "ours" for r in rs)
    if spliced:
        print(f"\nFAILURE: reachability left {spliced} spliced files", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
