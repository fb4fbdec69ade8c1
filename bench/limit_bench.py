#!/usr/bin/env python3
"""The agent's one bandwidth limit (issue 32 item 2), beside aria2c's --max-overall-download-limit
in the same run.

16 files from nginx (a server namespace, no per-connection limit) to a client namespace, each over
one connection (16 connections), under an overall limit of 1, 4 and 16 MiB/s:
  aria2c    `aria2c -i LIST -j 16 --split=1 --max-overall-download-limit=R --enable-rpc`: bytes from
            its RPC (`aria2.tellActive` completedLength), sampled every 100 ms.
  agent     `reachability agent --max-concurrent 16` with `limit-rate=R` in agent.conf, 16
            `queue add --connections 1`: bytes from the control socket's `list`, every 100 ms.
Accuracy: the achieved rate over 10 s, after 2 s to settle, as a share of the limit.
Live change: from 4 to 16 MiB/s, then from 16 to 1 MiB/s (aria2.changeGlobalOption; `agent limit`):
how long until the rate over the last 500 ms is within 10 % of the new limit.
Judge by the worst of --runs; each line carries the load average (uptime) it ran under.

Needs root (namespaces PREFIX<pid>-* (rchL by default), always removed), nginx, aria2c and a build of reachability.
Usage: bench/limit_bench.py [--build .build/release] [--rates 1,4,16] [--runs 1] [--tools aria2c,agent] [--prefix rchL]
"""
import argparse
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnet import Network  # noqa: E402

MIB = 1 << 20
FILES = 16
FILE_MIB = 24
CLONE_NEWNET = 0x40000000


def enter_namespace(name):
    """Moves this process into network namespace `name`, so its sockets and children are there."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    with open(f"/var/run/netns/{name}") as f:
        if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Aria2:
    def __init__(self, urls, directory, limit_mib):
        listing = os.path.join(directory, "list.txt")
        with open(listing, "w") as f:
            f.write("\n".join(urls) + "\n")
        self.port = 6800 + os.getpid() % 1000
        self.process = subprocess.Popen(
            ["aria2c", "-i", listing, "-d", os.path.join(directory, "out"), "-j", str(FILES), "--split=1",
             "--max-connection-per-server=1", f"--max-overall-download-limit={limit_mib}M", "--file-allocation=none",
             "--disk-cache=0", "--enable-rpc", f"--rpc-listen-port={self.port}", "--console-log-level=error",
             "--summary-interval=0", "--download-result=hide"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.call_id = 0

    def rpc(self, method, params=None):
        self.call_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": str(self.call_id), "method": method, "params": params or []})
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(f"POST /jsonrpc HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
                    data = b""
                    while chunk := sock.recv(65536):
                        data += chunk
                return json.loads(data.split(b"\r\n\r\n", 1)[1])["result"]
            except (ConnectionRefusedError, IndexError):
                time.sleep(0.05)
        raise RuntimeError("aria2c's RPC did not answer")

    def received(self):
        active = self.rpc("aria2.tellActive", [["completedLength"]])
        stopped = self.rpc("aria2.tellStopped", [0, FILES, ["completedLength"]])
        return sum(int(item["completedLength"]) for item in active + stopped)

    def set_limit(self, mib):
        self.rpc("aria2.changeGlobalOption", [{"max-overall-download-limit": f"{mib}M"}])

    def started(self):
        return self.received() > 0

    def close(self):
        self.process.kill()
        self.process.wait()


class Agent:
    def __init__(self, build, urls, directory, limit_mib):
        self.build = build
        self.state = os.path.join(directory, "state")
        os.makedirs(self.state, mode=0o700)
        out = os.path.join(directory, "out")
        os.makedirs(out)
        with open(os.path.join(self.state, "agent.conf"), "w") as f:
            f.write(f"limit-rate={limit_mib}M\ndownload-dir={out}\n")
        self.process = subprocess.Popen([f"{build}/reachability", "agent", "--state-dir", self.state,
                                         "--max-concurrent", str(FILES)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.process.stdout:
            if '"event":"listening"' in line:
                break
        subprocess.Popen(["cat"], stdin=self.process.stdout, stdout=subprocess.DEVNULL)   # keep draining events
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(os.path.join(self.state, "agent.sock"))
        self.reader = self.sock.makefile("r")
        self.request_id = 0
        for index, url in enumerate(urls):
            reply = self.request({"command": "add", "url": url, "output": os.path.join(out, f"f{index}.bin"), "connections": 1})
            if not reply.get("ok"):
                raise RuntimeError(f"add failed: {reply}")

    def request(self, fields):
        self.request_id += 1
        self.sock.sendall((json.dumps({"version": 1, "id": self.request_id, **fields}) + "\n").encode())
        return json.loads(self.reader.readline())

    def received(self):
        return sum(item["bytesReceived"] for item in self.request({"command": "list"})["downloads"])

    def set_limit(self, mib):
        subprocess.run([f"{self.build}/reachability", "agent", "limit", f"{mib}m", "--state-dir", self.state],
                       check=True, capture_output=True)

    def started(self):
        return self.received() > 0

    def close(self):
        self.sock.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_started(tool, timeout=20):
    deadline = time.monotonic() + timeout
    while not tool.started():
        if time.monotonic() > deadline:
            raise RuntimeError("no bytes arrived")
        time.sleep(0.05)


def accuracy(tool, limit_mib, settle=2.0, window=10.0):
    wait_started(tool)
    time.sleep(settle)
    start, before = time.monotonic(), tool.received()
    time.sleep(window)
    end, after = time.monotonic(), tool.received()
    rate = (after - before) / (end - start)
    return {"limitMiBps": limit_mib, "achievedMiBps": round(rate / MIB, 3), "errorPercent": round((rate / (limit_mib * MIB) - 1) * 100, 2)}


def time_to_show(tool, new_mib, timeout=15.0):
    """Seconds from the change until the rate over the last 500 ms is within 10 % of `new_mib`."""
    samples = [(time.monotonic(), tool.received())]
    changed = time.monotonic()
    tool.set_limit(new_mib)
    while time.monotonic() - changed < timeout:
        time.sleep(0.05)
        now = time.monotonic()
        samples.append((now, tool.received()))
        old = [s for s in samples if s[0] <= now - 0.5]
        if not old or old[-1][0] < changed:
            continue   # the window must lie after the change
        rate = (samples[-1][1] - old[-1][1]) / (now - old[-1][0])
        if abs(rate / (new_mib * MIB) - 1) <= 0.10:
            return round(now - changed, 3)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=".build/release")
    parser.add_argument("--rates", default="1,4,16")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--tools", default="aria2c,agent")
    parser.add_argument("--prefix", default="rchL", help="namespace name prefix (the pid is added)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    workdir = tempfile.mkdtemp(prefix="limit-bench-")
    network = Network(f"{args.prefix}{os.getpid()}", "l", workdir, rate="0", subnet="10.90.0")
    try:
        for index in range(FILES):
            network.serve(f"f{index}.bin", os.urandom(FILE_MIB * MIB))
        urls = [f"http://{network.address}/f{index}.bin" for index in range(FILES)]
        enter_namespace(network.client)
        makers = {"aria2c": lambda d, mib: Aria2(urls, d, mib), "agent": lambda d, mib: Agent(build, urls, d, mib)}
        tools = [name for name in ("aria2c", "agent") if name in args.tools.split(",")]
        for run in range(args.runs):
            for limit_mib in [int(r) for r in args.rates.split(",")]:
                for name in tools:
                    directory = tempfile.mkdtemp(dir=workdir)
                    tool = makers[name](directory, limit_mib)
                    try:
                        result = accuracy(tool, limit_mib)
                    finally:
                        tool.close()
                        shutil.rmtree(directory, ignore_errors=True)
                    print(json.dumps({"tool": name, "run": run, "connections": FILES, **result, "load": load()}), flush=True)
            for name in tools:
                directory = tempfile.mkdtemp(dir=workdir)
                tool = makers[name](directory, 4)
                try:
                    wait_started(tool)
                    time.sleep(2)
                    up = time_to_show(tool, 16)
                    time.sleep(1)
                    down = time_to_show(tool, 1)
                finally:
                    tool.close()
                    shutil.rmtree(directory, ignore_errors=True)
                print(json.dumps({"tool": name, "run": run, "liveChange": "4->16 MiB/s", "seconds": up,
                                  "thenChange": "16->1 MiB/s", "thenSeconds": down, "load": load()}), flush=True)
    finally:
        network.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
