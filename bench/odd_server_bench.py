#!/usr/bin/env python3
"""Odd servers (issue 21): `reachability download` beside curl, wget and aria2c, in one run.

Every server is scripted here, on 127.0.0.1 (no namespace, no root needed), and counts what the
client did to it: connections, requests, body bytes sent. Scenarios:

  short N     every connection is closed after N body bytes (a proxy or mobile link that cuts
              connections short); strong ETag and Last-Modified, Range honoured. Time to finish.
  limit R     a fast server; each tool gets --limit-rate R. Achieved rate (file size over the time
              from start to exit) and connections.
  tarpit      the first connection is accepted and never answered; later ones are honest.
              Time from the first connection to a fresh one, and to finish.
  drip        the first connection's response head is sent one byte a second; later ones are
              honest. Same measures.
  bursty      a per-second rate limiter: Q bytes at once, then silence for P seconds (the shape of
              lighttpd's connection.kbytes-per-second and nginx's limit_rate). Requests.
  nginx       nginx with limit_rate (when /usr/sbin/nginx exists). Requests, from its access log.

Peer flags (their best for this job, as in bench/outage_bench.py: retry forever, no waits, a
3-second stall detector since they cannot know better); reachability runs with its defaults:
  curl   -C - --retry 1000 --retry-all-errors --retry-delay 1 --speed-limit 1 --speed-time 3
         (a fixed 1 s: --retry-delay 0 is curl's doubling backoff; with -C - curl resumes every retry
         from the offset it had at launch, so against short connections it never finishes: one
         run, stopped at the scenario's time limit)
  wget   -c --tries=0 --retry-connrefused --waitretry=0 --read-timeout=3
  wget*  -c --tries=0 (its defaults otherwise: waitretry up to 10 s, read-timeout 900 s)
  aria2c -c --max-tries=0 --retry-wait=0 --timeout=3 -x1 -s1 --file-allocation=none

Usage: bench/odd_server_bench.py [--binary PATH] [--runs N] [--scenarios short,limit,tarpit,drip,bursty,nginx]
                                 [--tools reachability,curl,wget,aria2c] [--size-mib 1]
The tables in docs/benchmarks.md: bench/odd_server_bench.py --binary .build/release/reachability
"""
import argparse
import email.utils
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT = 120


class Server:
    """A threaded HTTP/1.1 server on 127.0.0.1 whose every answer is `behaviour(index, range_start)`."""

    def __init__(self, content, behaviour):
        self.content = content
        self.behaviour = behaviour
        self.lock = threading.Lock()
        self.accepts = []
        self.requests = []
        self.sent = 0
        self.stopped = False
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.modified = email.utils.formatdate(time.time() - 3600, usegmt=True)
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.port}/file.bin"

    def accept_loop(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                index = len(self.accepts)
                self.accepts.append(time.monotonic())
            threading.Thread(target=self.serve, args=(client, index), daemon=True).start()

    def stop(self):
        self.stopped = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def send(self, client, data):
        client.sendall(data)
        with self.lock:
            self.sent += len(data)

    def head(self, start):
        size = len(self.content)
        status = "206 Partial Content" if start else "200 OK"
        lines = [f"HTTP/1.1 {status}", 'ETag: "odd-1"', f"Last-Modified: {self.modified}",
                 f"Date: {email.utils.formatdate(usegmt=True)}", f"Content-Length: {size - start}", "Connection: close"]
        if start:
            lines.append(f"Content-Range: bytes {start}-{size - 1}/{size}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def serve(self, client, index):
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = client.recv(4096)
                if not chunk:
                    return
                request += chunk
            start = 0
            if_range = None
            for line in request.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name, value = name.strip().lower(), value.strip().decode()
                if name == b"range" and value.startswith("bytes="):
                    start = int(value[6:].split("-")[0] or 0)
                if name == b"if-range":
                    if_range = value
            if if_range is not None and if_range not in ('"odd-1"', self.modified):
                start = 0
            with self.lock:
                self.requests.append(start)
            self.behaviour(self, client, index, min(start, len(self.content)))
        except OSError:
            pass
        finally:
            try:
                client.close()
            except OSError:
                pass


def honest(server, client, _index, start):
    server.send(client, server.head(start) + server.content[start:])


def cut_after(limit):
    def behaviour(server, client, _index, start):
        server.send(client, server.head(start) + server.content[start:start + limit])
    return behaviour


def first_silent(server, client, index, start):
    if index == 0:
        while not server.stopped:
            time.sleep(0.1)
        return
    honest(server, client, index, start)


def first_dripped(server, client, index, start):
    if index == 0:
        for byte in server.head(start):
            if server.stopped:
                return
            server.send(client, bytes([byte]))
            time.sleep(1)
        server.send(client, server.content[start:])
        return
    honest(server, client, index, start)


def bursts(quota, period):
    def behaviour(server, client, _index, start):
        server.send(client, server.head(start))
        body = server.content[start:]
        for offset in range(0, len(body), quota):
            server.send(client, body[offset:offset + quota])
            if offset + quota < len(body):
                time.sleep(period)
    return behaviour


def command(tool, binary, url, output, workdir, rate=None):
    if tool == "reachability":
        arguments = [binary, "download", "-q", "--state-dir", os.path.join(workdir, "state"), "-o", output, url]
        return arguments + (["--limit-rate", rate] if rate else [])
    if tool == "curl":
        arguments = ["curl", "-sS", "-o", output, "-C", "-", "--retry", "1000", "--retry-all-errors", "--retry-delay", "1",
                     "--speed-limit", "1", "--speed-time", "3", url]
        return arguments + (["--limit-rate", rate] if rate else [])
    if tool == "wget":
        arguments = ["wget", "-q", "-c", "--tries=0", "--retry-connrefused", "--waitretry=0", "--read-timeout=3", "-O", output, url]
        return arguments + ([f"--limit-rate={rate}"] if rate else [])
    if tool == "wget*":
        arguments = ["wget", "-q", "-c", "--tries=0", "-O", output, url]
        return arguments + ([f"--limit-rate={rate}"] if rate else [])
    if tool == "aria2c":
        arguments = ["aria2c", "-q", "-c", "--max-tries=0", "--retry-wait=0", "--timeout=3", "--connect-timeout=3", "-x1", "-s1",
                     "--file-allocation=none", "--allow-overwrite=true", "-d", os.path.dirname(output),
                     "-o", os.path.basename(output), url]
        return arguments + ([f"--max-download-limit={rate}"] if rate else [])
    raise ValueError(tool)


def run_tool(tool, binary, server, content, rate=None, timeout=TIMEOUT):
    workdir = tempfile.mkdtemp(prefix="rch-odd-")
    output = os.path.join(workdir, "out.bin")
    started = time.monotonic()
    try:
        result = subprocess.run(command(tool, binary, server.url(), output, workdir, rate), capture_output=True,
                                timeout=timeout, cwd=workdir)
        code = result.returncode
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - started
    ok = os.path.exists(output) and hashlib.sha256(open(output, "rb").read()).digest() == hashlib.sha256(content).digest()
    have = os.path.getsize(output) if os.path.exists(output) else 0
    if not ok and os.path.exists(output + ".part"):
        have = os.path.getsize(output + ".part")
    shutil.rmtree(workdir, ignore_errors=True)
    accepts = list(server.accepts)
    fresh = accepts[1] - accepts[0] if len(accepts) > 1 else None
    return {"tool": tool, "ok": ok, "code": code, "seconds": elapsed, "connections": len(accepts),
            "requests": len(server.requests), "sent": server.sent, "have": have, "fresh": fresh}


def nginx_run(tool, binary, content, rate):
    prefix = tempfile.mkdtemp(prefix="rch-odd-nginx-")
    os.makedirs(os.path.join(prefix, "www"))
    os.makedirs(os.path.join(prefix, "tmp"))
    with open(os.path.join(prefix, "www", "file.bin"), "wb") as handle:
        handle.write(content)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    config = f"""daemon off; master_process off; worker_processes 1;
error_log {prefix}/error.log warn; pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    log_format requests '$status $body_bytes_sent';
    access_log {prefix}/access.log requests;
    client_body_temp_path {prefix}/tmp/b; proxy_temp_path {prefix}/tmp/p; fastcgi_temp_path {prefix}/tmp/f;
    uwsgi_temp_path {prefix}/tmp/u; scgi_temp_path {prefix}/tmp/s;
    default_type application/octet-stream;
    server {{ listen 127.0.0.1:{port}; root {prefix}/www; limit_rate {rate}; }}
}}
"""
    with open(os.path.join(prefix, "nginx.conf"), "w") as handle:
        handle.write(config)
    nginx = subprocess.Popen(["/usr/sbin/nginx", "-c", os.path.join(prefix, "nginx.conf"), "-p", prefix + "/",
                              "-e", os.path.join(prefix, "error.log")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.02)

    class Shim:
        accepts = []
        requests = []
        sent = 0

        def url(self):
            return f"http://127.0.0.1:{port}/file.bin"

    shim = Shim()
    row = run_tool(tool, binary, shim, content)
    nginx.kill()
    nginx.wait()
    lines = open(os.path.join(prefix, "access.log")).read().split("\n") if os.path.exists(os.path.join(prefix, "access.log")) else []
    lines = [line for line in lines if line.strip()]
    row["requests"] = len(lines)
    row["connections"] = len(lines)
    row["sent"] = sum(int(line.split()[1]) for line in lines)
    shutil.rmtree(prefix, ignore_errors=True)
    return row


def median(values):
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def summarise(rows):
    ok = sum(1 for row in rows if row["ok"])
    return {"ok": f"{ok}/{len(rows)}", "seconds": median([row["seconds"] for row in rows if row["ok"]]),
            "connections": median([row["connections"] for row in rows]), "requests": median([row["requests"] for row in rows]),
            "fresh": median([row["fresh"] for row in rows]), "have": median([row["have"] for row in rows]),
            "sent": median([row["sent"] for row in rows])}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--binary", default=os.path.join(here, "..", ".build", "debug", "reachability"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mib", type=float, default=1)
    parser.add_argument("--scenarios", default="short,limit,tarpit,drip,bursty,nginx")
    parser.add_argument("--tools", default="reachability,curl,wget,aria2c")
    arguments = parser.parse_args()
    binary = os.path.abspath(arguments.binary)
    tools = [tool for tool in arguments.tools.split(",") if tool == "reachability" or shutil.which(tool.rstrip("*"))]
    scenarios = arguments.scenarios.split(",")
    content = os.urandom(int(arguments.size_mib * (1 << 20)))
    size = len(content)
    print(f"# odd_server_bench: {size} bytes, {arguments.runs} runs each, median; binary {binary}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}; peers: {', '.join(tools[1:])}")

    def runs(tool, behaviour, rate=None, data=content, count=None, timeout=TIMEOUT):
        rows = []
        # wget with its defaults waits up to 10 s between retries: one run is enough to show it.
        for _ in range(count or (1 if tool == "wget*" else arguments.runs)):
            server = Server(data, behaviour)
            rows.append(run_tool(tool, binary, server, data, rate, timeout))
            server.stop()
        return summarise(rows)

    if "short" in scenarios:
        print("\n## Short connections: every connection closed after N body bytes; time to finish (30 s at most)\n")
        print("| N | tool | ok | seconds | connections | body bytes sent | bytes on disk at the end |")
        print("|---|---|---|---|---|---|---|")
        for cut in (16, 32, 64):
            for tool in tools + (["wget*"] if "wget" in tools else []):
                row = runs(tool, cut_after(cut << 10), count=1 if tool in ("curl", "wget*") else None, timeout=30)
                print(f"| {cut} KiB | {tool} | {row['ok']} | {fmt(row['seconds'])} | {fmt(row['connections'], 0)} | {fmt(row['sent'], 0)} | {fmt(row['have'], 0)} |",
                      flush=True)

    if "limit" in scenarios:
        print("\n## --limit-rate: achieved rate (size / time to exit) and connections\n")
        print("| limit | tool | ok | seconds | KiB/s | connections |")
        print("|---|---|---|---|---|---|")
        for rate, kib in (("256k", 256), ("1m", 1024)):
            data = os.urandom(max(size, kib << 12))   # about four seconds at the limit
            for tool in tools:
                row = runs(tool, honest, rate=rate, data=data)
                achieved = len(data) / 1024 / row["seconds"] if row["seconds"] else None
                print(f"| {rate} ({len(data) >> 20} MiB) | {tool} | {row['ok']} | {fmt(row['seconds'])} | {fmt(achieved, 0)} | {fmt(row['connections'], 0)} |",
                      flush=True)

    for name, behaviour, title, count, limit in (
            ("tarpit", first_silent, "Tarpit: the first connection is accepted and never answered", None, TIMEOUT),
            ("drip", first_dripped, "Dripped head: the first response head comes a byte a second (one run, 60 s at most)", 1, 60)):
        if name not in scenarios:
            continue
        print(f"\n## {title}; time from the first connection to a fresh one, and to finish\n")
        print("| tool | ok | fresh connection after s | seconds | connections |")
        print("|---|---|---|---|---|")
        for tool in tools:
            row = runs(tool, behaviour, count=count, timeout=limit)
            print(f"| {tool} | {row['ok']} | {fmt(row['fresh'], 2)} | {fmt(row['seconds'])} | {fmt(row['connections'], 0)} |", flush=True)

    if "bursty" in scenarios:
        print("\n## Per-second rate limiter (scripted): 256 KiB at once, then 1 s of silence, 2 MiB; requests\n")
        print("| tool | ok | seconds | requests | connections |")
        print("|---|---|---|---|---|")
        data = os.urandom(2 << 20)
        for tool in tools:
            row = runs(tool, bursts(256 << 10, 1.0), data=data)
            print(f"| {tool} | {row['ok']} | {fmt(row['seconds'])} | {fmt(row['requests'], 0)} | {fmt(row['connections'], 0)} |", flush=True)

    if "nginx" in scenarios and os.path.exists("/usr/sbin/nginx"):
        print("\n## nginx limit_rate 1m, 8 MiB; requests (access log)\n")
        print("| tool | ok | seconds | requests | body bytes sent |")
        print("|---|---|---|---|---|")
        data = os.urandom(8 << 20)
        for tool in tools:
            rows = [nginx_run(tool, binary, data, "1m") for _ in range(arguments.runs)]
            row = summarise(rows)
            print(f"| {tool} | {row['ok']} | {fmt(row['seconds'])} | {fmt(row['requests'], 0)} | {fmt(row['sent'], 0)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
