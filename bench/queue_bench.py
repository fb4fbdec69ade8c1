#!/usr/bin/env python3
"""The agent's queue at scale (issue 29), beside `aria2c -i` in the same run.

N small files from nginx (a server namespace, no rate limit) to a client namespace:
  aria2c    `aria2c -i LIST -j C`: wall time, peak RSS (/usr/bin/time).
  agent     `reachability agent --max-concurrent C` in the client namespace; one client writes N
            `add` lines on one connection (reading replies as they come: adds/s, first and last
            thousand, and each successive thousand: a per-add cost growing with the queue shows as
            a falling series), while an honest
            client (a process of its own) times `status` every 50 ms, `queue list` (its default page: the first 100
            unfinished and the latest 100 finished, `"rows": 100`) every 500 ms and
            `queue list --all` every 2 s. Time from the first
            add to the N-th `completed` line; peak RSS (VmHWM) of the agent.
Every file is checked (size) afterwards. Judge by the worst of --runs, not the median.

Needs root (namespaces rchQ<pid>-*, BENCH_NETNS_PREFIX replaces rchQ; always removed), nginx,
aria2c and a release build (`swift build -c release --product reachability`).
After the runs, one `summary` line per tool: worst and median time, and the agent's worst ratio
to aria2c's time in the same run.
Usage: bench/queue_bench.py [--build .build/release] [--files 10000] [--size 4096] [--concurrent 4] [--runs 1]
       [--tools aria2c,agent] [--agent-env NAME=VALUE ...]
"""
import argparse
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnet import Network  # noqa: E402


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * fraction) - 1)] if ordered else float("nan")


def run_aria2c(network, urls, directory, concurrent):
    listing = os.path.join(directory, "list.txt")
    with open(listing, "w") as f:
        f.write("\n".join(urls) + "\n")
    out = os.path.join(directory, "aria2c")
    os.makedirs(out)
    started = time.monotonic()
    result = subprocess.run(["ip", "netns", "exec", network.client, "/usr/bin/time", "-f", "%M",
                             "aria2c", "-i", listing, "-d", out, "-j", str(concurrent), "--file-allocation=none",
                             "--console-log-level=error", "--summary-interval=0", "--download-result=hide",
                             "--max-connection-per-server=1", "--split=1"],
                            capture_output=True, text=True)
    elapsed = time.monotonic() - started
    rss_kib = int(result.stderr.strip().split("\n")[-1])
    done = len(os.listdir(out))
    return {"seconds": elapsed, "rssMiB": rss_kib / 1024, "files": done, "status": result.returncode}


def timed_request(path, command, **fields):
    """One request on a new connection, as `reachability agent status` makes it: (seconds, reply)."""
    started = time.monotonic()
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(30)
    sock.connect(path)
    sock.sendall(json.dumps(dict({"version": 1, "id": 1, "command": command}, **fields)).encode() + b"\n")
    reply = sock.makefile("rb").readline()
    sock.close()
    return time.monotonic() - started, json.loads(reply)


def honest_client(path, stop, results):
    """The honest client, in a process of its own (as `agent status` is): `status` every 50 ms,
    a `queue list` page every 500 ms, the whole list every 2 s. In the bench's own process its
    latencies included waiting for Python's GIL, held by the threads reading 10,000 add replies
    and the agent's event lines."""
    status, pages, lists = [], [], []
    next_list = next_page = time.monotonic()
    while not stop.is_set():
        status.append(timed_request(path, "status")[0])
        if time.monotonic() >= next_page:
            pages.append(timed_request(path, "list", rows=100)[0])
            next_page = time.monotonic() + 0.5
        if time.monotonic() >= next_list:
            latency, reply = timed_request(path, "list")
            lists.append((latency, len(reply.get("downloads", []))))
            next_list = time.monotonic() + 2
        time.sleep(0.05)
    results.put((status, pages, lists))


class AgentRun:
    def __init__(self, build, network, state, concurrent, env=None):
        self.state = state
        os.makedirs(state, mode=0o700)
        self.completed = 0
        self.answered = {}
        self.lock = threading.Lock()
        self.process = subprocess.Popen(["ip", "netns", "exec", network.client, f"{build}/reachability", "agent",
                                         "--state-dir", state, "--max-concurrent", str(concurrent)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        env=dict(os.environ, **(env or {})))
        self.listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.listening.wait(20):
            raise RuntimeError("the agent did not start listening")

    def _read(self):
        for line in self.process.stdout:
            if '"event":"listening"' in line:
                self.listening.set()
            elif '"type":"download","event":"completed"' in line:
                with self.lock:
                    self.completed += 1
            elif '"answeredInMicroseconds"' in line:
                # The agent's own share of a round trip: from the accept to the reply written.
                event = json.loads(line)
                kind = event.get("command", "") + ("Page" if "rows" in event else "")
                with self.lock:
                    self.answered.setdefault(kind, []).append(event["answeredInMicroseconds"] / 1000)

    def connect(self):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(30)
        sock.connect(f"{self.state}/agent.sock")
        return sock


    def peak_rss_mib(self):
        # `ip netns exec` execs the agent in place: the child is the agent.
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run_agent(build, network, urls, directory, concurrent, env=None):
    agent = AgentRun(build, network, os.path.join(directory, "state"), concurrent, env)
    count = len(urls)
    add_times = []
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    watcher = context.Process(target=honest_client, args=(f"{agent.state}/agent.sock", stop, results))
    watcher.start()
    sock = agent.connect()
    sock.settimeout(None)   # 10,000 adds take longer than one request's timeout
    lines = [json.dumps({"version": 1, "id": i, "command": "add", "url": url, "clientKey": f"q{i}"}).encode() + b"\n"
             for i, url in enumerate(urls)]
    started = time.monotonic()
    writer = threading.Thread(target=lambda: sock.sendall(b"".join(lines)), daemon=True)
    writer.start()
    reader = sock.makefile("rb")
    failures = 0
    for _ in range(count):
        reply = json.loads(reader.readline())
        add_times.append(time.monotonic())
        failures += 0 if reply.get("ok") else 1
    sock.close()
    deadline = time.monotonic() + 3600
    while agent.completed < count and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    stop.set()
    status_latencies, page_latencies, list_latencies = results.get()
    watcher.join()
    rss = agent.peak_rss_mib()
    agent.stop()
    files = os.path.join(directory, "state", "files")
    done = len([n for n in os.listdir(files) if not n.endswith(".part")]) if os.path.isdir(files) else 0
    thousand = min(1000, count // 2)
    first = (add_times[thousand - 1] - started) if thousand else float("nan")
    last = (add_times[-1] - add_times[-thousand - 1]) if thousand else float("nan")
    big_lists = [latency for latency, size in list_latencies if size >= count]
    # Adds/s over each successive thousand: a per-add cost that grows with the queue shows as a
    # falling series (issue 29: "adds at a constant rate").
    marks = [started] + [add_times[i - 1] for i in range(1000, count + 1, 1000)]
    per_thousand = [round(1000 / (b - a)) if b > a else None for a, b in zip(marks, marks[1:])]
    return {"seconds": elapsed, "rssMiB": rss, "files": done, "addFailures": failures,
            "addsPerSecond": count / (add_times[-1] - started), "firstThousandAddsPerSecond": thousand / first,
            "lastThousandAddsPerSecond": thousand / last, "addsPerSecondPerThousand": per_thousand,
            "statusP99ms": percentile(status_latencies, 0.99) * 1000, "statusMaxMs": max(status_latencies) * 1000,
            "listPageP99ms": percentile(page_latencies, 0.99) * 1000, "listPageMaxMs": max(page_latencies) * 1000,
            "listP99ms": percentile([l for l, _ in list_latencies], 0.99) * 1000,
            "listOfAllP99ms": percentile(big_lists, 0.99) * 1000 if big_lists else float("nan"),
            "agentSideP99ms": {kind: round(percentile(values, 0.99), 2) for kind, values in sorted(agent.answered.items())},
            "statusSamples": len(status_latencies), "listPageSamples": len(page_latencies),
            "listSamples": len(list_latencies)}


def summarize(results):
    """Worst and median per tool; the agent's ratio to aria2c's time in the same run."""
    for name in sorted({r["tool"] for r in results}):
        mine = [r for r in results if r["tool"] == name]
        summary = {"summary": name, "runs": len(mine),
                   "secondsWorst": max(r["seconds"] for r in mine),
                   "secondsMedian": statistics.median(r["seconds"] for r in mine),
                   "rssMiBWorst": max(r["rssMiB"] for r in mine)}
        if name == "agent":
            summary.update({key + "Worst": max(r[key] for r in mine)
                            for key in ("statusP99ms", "statusMaxMs", "listPageP99ms", "listPageMaxMs", "listP99ms",
                                        "listOfAllP99ms")})
            peers = {r["run"]: r["seconds"] for r in results if r["tool"] == "aria2c"}
            ratios = [r["seconds"] / peers[r["run"]] for r in mine if r["run"] in peers]
            if ratios:
                summary.update({"ratioWorst": max(ratios), "ratioMedian": statistics.median(ratios)})
        print(json.dumps(summary), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=".build/release")
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--tools", default="aria2c,agent", help="comma-separated: aria2c, agent")
    parser.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the agent's environment (MALLOC_ARENA_MAX=2, ...)")
    args = parser.parse_args()
    agent_env = dict(item.split("=", 1) for item in args.agent_env)
    build = os.path.abspath(args.build)
    workdir = tempfile.mkdtemp(prefix="queue-bench-")
    # BENCH_NETNS_PREFIX: a prefix of one's own on a machine shared with others running benchmarks.
    network = Network(f"{os.environ.get('BENCH_NETNS_PREFIX', 'rchQ')}{os.getpid()}", "q", workdir, rate="0", subnet="10.89.0", worker_connections=1024)
    try:
        payload = os.urandom(args.size)
        urls = []
        for index in range(args.files):
            network.serve(f"f{index}.bin", payload)
            urls.append(f"http://{network.address}/f{index}.bin")
        tools = [("aria2c", lambda d: run_aria2c(network, urls, d, args.concurrent)),
                 ("agent", lambda d: run_agent(build, network, urls, d, args.concurrent, agent_env))]
        tools = [tool for tool in tools if tool[0] in args.tools.split(",")]
        results = []
        for run in range(args.runs):
            for name, measure in tools:
                directory = os.path.join(workdir, f"{name}-{run}")
                os.makedirs(directory)
                load = os.getloadavg()[0]
                result = measure(directory)
                result.update({"tool": name, "run": run, "filesQueued": args.files, "size": args.size,
                               "load": [round(load, 1), round(os.getloadavg()[0], 1)]})
                print(json.dumps(result), flush=True)
                results.append(result)
                shutil.rmtree(directory, ignore_errors=True)
        summarize(results)
    finally:
        network.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
