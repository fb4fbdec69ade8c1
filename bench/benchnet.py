"""Shared by the benchmarks that run a client namespace behind a /32 uplink and a server
namespace with nginx (bench/urlsession_outage_bench.py, bench/background_bench.py; the helpers also
serve bench/segment_bench.py): the same layout as Tests/IntegrationTests/DownloadOutageTests.swift
(an onlink default route, the server on a bridge kept up by a second veth pair, nginx logging each
request's status and body bytes).
"""
import hashlib
import json
import os
import random
import subprocess
import threading
import time


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def ip(command):
    run("ip", *command.split())


def wait_for_port(port, timeout=10, host="127.0.0.1"):
    """True once `host:port` accepts a connection, false at the deadline."""
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def sha256_file(path):
    """The sha256 (hex) of the file at `path`, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def random_file(path, mib, seed):
    """Writes `mib` MiB of seeded random bytes to `path`; returns their sha256 (hex)."""
    generator = random.Random(seed)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(mib):
            block = generator.randbytes(1 << 20)
            digest.update(block)
            f.write(block)
    return digest.hexdigest()


class Network:
    """Namespaces PREFIX-TAGc (client, 10.x.0.2/32) and PREFIX-TAGs (server, nginx on 10.x.0.1:80,
    serving WORKDIR/www at `rate` per connection)."""

    def __init__(self, prefix, tag, workdir, rate, subnet="10.88.0", worker_connections=64):
        self.client, self.server, self.workdir = f"{prefix}-{tag}c", f"{prefix}-{tag}s", workdir
        self.address = f"{subnet}.1"
        self.nginx = None
        for ns in (self.client, self.server):
            ip(f"netns add {ns}")
            ip(f"-n {ns} link set lo up")
            run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
        s = self.server
        ip(f"-n {s} link add br0 type bridge")
        ip(f"-n {s} addr add {self.address}/24 dev br0")
        ip(f"-n {s} link add keep0 type veth peer name keep1")
        ip(f"-n {s} link set keep0 master br0")
        for name in ("keep0", "keep1", "br0"):
            ip(f"-n {s} link set {name} up")
        ip(f"link add eth1 netns {self.client} type veth peer name peth1 netns {s}")
        ip(f"-n {s} link set peth1 master br0")
        ip(f"-n {s} link set peth1 up")
        ip(f"-n {self.client} addr add {subnet}.2/32 dev eth1")
        ip(f"-n {self.client} link set eth1 up")
        self.route()
        prefix_dir = f"{workdir}/nginx"
        os.makedirs(f"{prefix_dir}/tmp", exist_ok=True)
        os.makedirs(f"{workdir}/www", exist_ok=True)
        with open(f"{prefix_dir}/nginx.conf", "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1;
error_log {prefix_dir}/error.log warn; pid {prefix_dir}/nginx.pid;
events {{ worker_connections {worker_connections}; }}
http {{
    log_format bytes '$status $body_bytes_sent';
    access_log {prefix_dir}/access.log bytes;
    client_body_temp_path {prefix_dir}/tmp/b; proxy_temp_path {prefix_dir}/tmp/p; fastcgi_temp_path {prefix_dir}/tmp/f;
    uwsgi_temp_path {prefix_dir}/tmp/u; scgi_temp_path {prefix_dir}/tmp/s;
    default_type application/octet-stream; send_timeout 2s;
    server {{ listen {self.address}:80; root {workdir}/www; limit_rate {rate}; }}
}}
""")
        self.nginx = subprocess.Popen(["ip", "netns", "exec", s, "nginx", "-c", f"{prefix_dir}/nginx.conf", "-p", prefix_dir + "/"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not run("ip", "netns", "exec", s, "ss", "-Hltn", "sport = :80").strip():
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not start")
            time.sleep(0.02)

    def route(self):
        ip(f"-n {self.client} route add default via {self.address} dev eth1 onlink")

    def cut(self):
        ip(f"-n {self.client} link set eth1 down")

    def restore(self):
        ip(f"-n {self.client} link set eth1 up")
        self.route()

    def serve(self, name, content):
        with open(f"{self.workdir}/www/{name}", "wb") as f:
            f.write(content)

    def requests(self):
        """Body bytes of each request nginx logged (a request is logged when it ends)."""
        try:
            with open(f"{self.workdir}/nginx/access.log") as f:
                return [int(line.split()[1]) for line in f if len(line.split()) == 2]
        except FileNotFoundError:
            return []

    def bytes_sent(self):
        """Body bytes nginx logged, once no connection is left that could still send."""
        deadline = time.monotonic() + 15
        while run("ip", "netns", "exec", self.server, "ss", "-Htn", "state", "established", "sport = :80").strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return sum(self.requests())

    def bytes_after(self, count, timeout=20):
        """Body bytes sent, once `count` requests are logged (idle keep-alive connections may stay)."""
        deadline = time.monotonic() + timeout
        while len(self.requests()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return sum(self.requests())

    def close(self):
        if self.nginx:
            self.nginx.kill()
            self.nginx.wait()
        for ns in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Probe:
    """A probe program in the client namespace; its NDJSON stdout lines kept with their arrival
    time (`urlsession-probe`, `background-probe`: Tests/ProbeSupport's lines)."""

    def __init__(self, network, arguments, env=None):
        self.lines = []
        # Reentrant: a wait_for predicate may look at the other lines (calls()) while it runs.
        self.lock = threading.RLock()
        self.process = subprocess.Popen(["ip", "netns", "exec", network.client] + arguments, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for text in self.process.stdout:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            with self.lock:
                self.lines.append((time.monotonic(), line))

    def calls(self, name):
        with self.lock:
            return [line for _, line in self.lines if line.get("call") == name]

    def wait_for(self, predicate, timeout):
        """(arrival, line) of the first line `predicate` accepts, or (None, None) at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for arrival, line in self.lines:
                    if predicate(line):
                        return arrival, line
            time.sleep(0.002)
        return None, None

    def wait_line(self, predicate, timeout):
        return self.wait_for(predicate, timeout)[1]

    def send(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
