#!/usr/bin/env python3
"""One file from several mirrors (issue 34 item 1): `reachability download URL --mirror URL...
--sha256 HEX` beside `aria2c --checksum=sha-256=HEX URL URL...` with the same URIs, in the same run.

Three nginx servers on 127.0.0.1, each its own process and port: `fast` (no limit), `slow`
(`limit_rate` --slow-rate per connection) and `bad` (different bytes of the same length, with the
same modification time, so the same Last-Modified and ETag: only the SHA-256 tells it apart), and
a `dead` port nobody listens on. Scenarios (the URIs in this order for both tools):

  bad-first    bad, fast, slow
  slow-first   slow, fast
  dead-first   dead, fast
  metalink     a Metalink 4 file: bad (priority 1), fast (2), slow (3), with size, whole-file
               SHA-256 and 1 MiB SHA-256 pieces: `download --metalink F` beside
               `aria2c --metalink-file=F --check-integrity=true`
  metalink-pieces  the same without the whole-file SHA-256 (only the pieces can tell)
  spread       fast, slow, bad with --sha256: ranges over all three at once (issue 34); give every
               server a per-connection cap (--fast-rate 4m --slow-rate 1m --bad-rate 2m) or ours
               stays on one connection to an unlimited loopback server
  spread-metalink  bad, fast, slow in a Metalink with 1 MiB pieces and no whole-file SHA-256

With --runs N >= 5 a summary gives each tool's worst and median time and waste per scenario.

For each tool and run: wall time, exit status, whether the file left is the right one (a wrong
file with exit 0 means the bad mirror's bytes reached it), and the bytes wasted (body bytes the
servers sent, from their access logs, beyond one copy of the file). Prints `uptime`'s load beside
each row; judge by the worst run.

Needs nginx and aria2c. Usage: bench/mirror_bench.py --binary .build/debug/reachability
       [--size-mib 32] [--runs 3] [--slow-rate 2m] [--fast-rate R] [--bad-rate R]
       [--scenarios bad-first,slow-first,dead-first,metalink,metalink-pieces]
"""
import argparse
import hashlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from benchnet import random_file, wait_for_port


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx in the foreground on 127.0.0.1:PORT serving ROOT, logging `status bytes`."""

    def __init__(self, workdir, name, rate=None):
        self.prefix = f"{workdir}/{name}"
        self.root = f"{self.prefix}/www"
        os.makedirs(self.root)
        os.makedirs(f"{self.prefix}/tmp")
        self.port = free_port()
        limit = f"limit_rate {rate};" if rate else ""
        p = self.prefix
        with open(f"{p}/nginx.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1;
error_log {p}/error.log warn; pid {p}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format bytes '$status $body_bytes_sent';
    access_log {p}/access.log bytes;
    client_body_temp_path {p}/tmp; proxy_temp_path {p}/tmp; fastcgi_temp_path {p}/tmp;
    uwsgi_temp_path {p}/tmp; scgi_temp_path {p}/tmp;
    default_type application/octet-stream; sendfile on;
    server {{ listen 127.0.0.1:{self.port}; root {self.root}; {limit} }}
}}
""")
        self.process = subprocess.Popen(["nginx", "-c", f"{p}/nginx.conf", "-p", p + "/", "-e", f"{p}/error.log"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for_port(self.port):
            self.stop()
            raise RuntimeError(f"nginx {name} did not start")

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def sent(self):
        """Body bytes sent since the log was last cleared."""
        try:
            with open(f"{self.prefix}/access.log") as f:
                return sum(int(line.split()[1]) for line in f if len(line.split()) >= 2)
        except FileNotFoundError:
            return 0

    def clear_log(self):
        open(f"{self.prefix}/access.log", "w").close()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()   # `master_process off` nginx ignores SIGTERM
            self.process.wait()


def sha256_of(path):
    if not os.path.exists(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def write_metalink(path, urls, size, sha, piece_hashes, whole_hash):
    """A Metalink 4 document of f.bin: the URLs with priorities 1, 2, ... in this order."""
    pieces = "".join(f"<hash>{h}</hash>" for h in piece_hashes)
    whole = f'<hash type="sha-256">{sha}</hash>' if whole_hash else ""
    sources = "".join(f'<url priority="{i + 1}">{url}</url>' for i, url in enumerate(urls))
    with open(path, "w") as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?><metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                f'<file name="f.bin"><size>{size}</size>{whole}'
                f'<pieces length="{1 << 20}" type="sha-256">{pieces}</pieces>{sources}</file></metalink>')


def piece_hashes(path):
    with open(path, "rb") as f:
        return [hashlib.sha256(block).hexdigest() for block in iter(lambda: f.read(1 << 20), b"")]


def run_tool(tool, binary, urls, sha, workdir, metalink=None):
    out = f"{workdir}/out"
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    if metalink and tool == "reachability":
        command = [binary, "download", "--quiet", "--state-dir", f"{workdir}/state", "-o", f"{out}/f.bin", "--metalink", metalink]
        shutil.rmtree(f"{workdir}/state", ignore_errors=True)
    elif metalink:
        command = ["aria2c", "--quiet=true", f"--metalink-file={metalink}", "--check-integrity=true", "-d", out,
                   "--allow-overwrite=true", "--auto-file-renaming=false", "--max-tries=3", "--retry-wait=1"]
    elif tool == "reachability":
        command = [binary, "download", "--quiet", "--state-dir", f"{workdir}/state", "-o", f"{out}/f.bin",
                   "--sha256", sha, urls[0]] + [arg for url in urls[1:] for arg in ("--mirror", url)]
        shutil.rmtree(f"{workdir}/state", ignore_errors=True)
    else:
        command = ["aria2c", "--quiet=true", f"--checksum=sha-256={sha}", "-d", out, "-o", "f.bin",
                   "--allow-overwrite=true", "--auto-file-renaming=false", "--max-tries=3", "--retry-wait=1"] + urls
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    return elapsed, result.returncode, sha256_of(f"{out}/f.bin"), (result.stderr or result.stdout).strip()[-200:]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/debug/reachability")
    parser.add_argument("--size-mib", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slow-rate", default="2m")
    parser.add_argument("--fast-rate", default=None, help="nginx limit_rate of the fast mirror (default: none)")
    parser.add_argument("--bad-rate", default=None, help="nginx limit_rate of the bad mirror (default: none)")
    parser.add_argument("--scenarios", default="bad-first,slow-first,dead-first,metalink,metalink-pieces")
    parser.add_argument("--seed", type=int, default=34)
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    for tool in ("nginx", "aria2c"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed")
    workdir = tempfile.mkdtemp(prefix="rch-mirror-bench-")
    servers = []
    try:
        fast, slow, bad = Nginx(workdir, "fast", args.fast_rate), Nginx(workdir, "slow", args.slow_rate), Nginx(workdir, "bad", args.bad_rate)
        servers = [fast, slow, bad]
        sha = random_file(f"{fast.root}/f.bin", args.size_mib, args.seed)
        shutil.copyfile(f"{fast.root}/f.bin", f"{slow.root}/f.bin")
        random_file(f"{bad.root}/f.bin", args.size_mib, args.seed + 1)
        stamp = 1_700_000_000
        for server in servers:
            os.utime(f"{server.root}/f.bin", (stamp, stamp))
        dead = f"http://127.0.0.1:{free_port()}/f.bin"
        orders = {"bad-first": [bad.url("f.bin"), fast.url("f.bin"), slow.url("f.bin")],
                  "slow-first": [slow.url("f.bin"), fast.url("f.bin")],
                  "dead-first": [dead, fast.url("f.bin")],
                  "metalink": [bad.url("f.bin"), fast.url("f.bin"), slow.url("f.bin")],
                  "metalink-pieces": [bad.url("f.bin"), fast.url("f.bin"), slow.url("f.bin")],
                  "spread": [fast.url("f.bin"), slow.url("f.bin"), bad.url("f.bin")],
                  "spread-metalink": [bad.url("f.bin"), fast.url("f.bin"), slow.url("f.bin")]}
        size = args.size_mib << 20
        hashes = piece_hashes(f"{fast.root}/f.bin")
        metalinks = {}
        for scenario, whole in (("metalink", True), ("metalink-pieces", False), ("spread-metalink", False)):
            metalinks[scenario] = f"{workdir}/{scenario}.meta4"
            write_metalink(metalinks[scenario], orders[scenario], size, sha, hashes, whole)
        print(f"file {args.size_mib} MiB, limit_rate fast {args.fast_rate} slow {args.slow_rate} bad {args.bad_rate}, "
              f"{args.runs} runs, binary {binary}")
        print(f"{'scenario':<15} {'tool':<13} {'run':>3} {'seconds':>8} {'exit':>4} {'file':<7} {'wasted MiB':>10} "
              f"{'fast/slow/bad MiB':>18}  load")
        results = {}
        random.seed(args.seed)
        for scenario in args.scenarios.split(","):
            plan = [(tool, run) for run in range(args.runs) for tool in ("reachability", "aria2c")]
            random.shuffle(plan)
            for tool, run in plan:
                for server in servers:
                    server.clear_log()
                elapsed, status, digest, tail = run_tool(tool, binary, orders[scenario], sha, workdir, metalinks.get(scenario))
                sent = [server.sent() for server in (fast, slow, bad)]
                wasted = sum(sent) - size
                verdict = "right" if digest == sha else ("none" if digest is None else "WRONG")
                shares = "/".join(f"{b / 1048576:.1f}" for b in sent)
                print(f"{scenario:<15} {tool:<13} {run + 1:>3} {elapsed:>8.2f} {status:>4} {verdict:<7} "
                      f"{wasted / 1048576:>10.1f} {shares:>18}  {load()}" + (f"  ({tail})" if status != 0 else ""), flush=True)
                results.setdefault((scenario, tool), []).append((elapsed, wasted, verdict))
                if status == 0 and digest != sha:
                    print("  FAILURE: exit 0 with a file that is not the right one", flush=True)
        if args.runs >= 5:
            print("\nsummary (worst / median):")
            for (scenario, tool), rows in results.items():
                times = sorted(r[0] for r in rows)
                waste = sorted(r[1] for r in rows)
                verdicts = ", ".join(f"{v} {sum(1 for r in rows if r[2] == v)}" for v in sorted({r[2] for r in rows}))
                print(f"{scenario:<15} {tool:<13} seconds {times[-1]:.2f} / {times[len(times) // 2]:.2f}  "
                      f"wasted MiB {waste[-1] / 1048576:.1f} / {waste[len(waste) // 2] / 1048576:.1f}  file: {verdicts}", flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
