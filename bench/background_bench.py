#!/usr/bin/env python3
"""Background sessions (issue 17) beside the foreground session, in one run.

1. Killed mid-download: a program downloading one file is SIGKILLed halfway, then run again to get
   the file. Foreground: `urlsession-probe` on a default session (the transfer dies with the
   process, which leaves no resume data, so the next run starts over). Background:
   `background-probe` (the agent keeps transferring; the next run attaches and takes the file).
   Measured from nginx's log: bytes the server sent beyond the file's size (re-fetched).
2. Attach to first replayed delegate call: 100 tasks finish while nobody is attached; a new
   process makes the session (time 0 is just before `ResumableURLSession(configuration:)`) and we
   time its first didFinishDownloadingTo and its urlSessionDidFinishEvents after all 100.
3. 100 sessions x 10 tasks in one agent: the agent's RSS, CPU time, threads and the control
   socket's latency (`status` and `list` round trips, p50/p99) with 100 programs attached, then
   with all of them gone, against the same agent holding nothing.

The client and its agent run in a namespace behind a /32 uplink; nginx with limit_rate serves
from a second namespace (as bench/urlsession_outage_bench.py). Needs root and `swift build`.
Namespaces are named rchB<pid>-*, always removed.
Usage: bench/background_bench.py [--build .build/debug] [--size-mib 8] [--rate 2m] [--sessions 100] [--tasks 10]
       [--phases 1,2,3]
(3,000 tasks in one session, issue 29: --phases 3 --sessions 1 --tasks 3000.)
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time

from benchnet import Network, Probe

QUIET = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent"}

PREFIX = f"rchB{os.getpid()}"
SERVER = "10.89.0.1"
SUBNET = "10.89.0"


class Agent:
    """The agent of a state directory (started on demand by a probe): pid, control requests."""

    def __init__(self, state):
        self.state = state

    def pid(self):
        try:
            with open(f"{self.state}/agent.lock") as f:
                pid = int(f.read().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def request(self, command, **fields):
        """One control request on a fresh connection; returns (reply, seconds)."""
        started = time.perf_counter()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)   # an agent that does not answer fails the run instead of hanging it
            sock.connect(f"{self.state}/agent.sock")
            sock.sendall((json.dumps({"version": 1, "id": 1, "command": command, **fields}) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        return json.loads(data), time.perf_counter() - started

    def session(self, identifier):
        reply, _ = self.request("status")
        for session in reply.get("status", {}).get("backgroundSessions") or []:
            if session["identifier"] == identifier:
                return session
        return None

    def wait_session(self, identifier, predicate, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            session = self.session(identifier)
            if session and predicate(session):
                return session
            time.sleep(0.05)
        raise RuntimeError(f"session {identifier} did not get there: {self.session(identifier)}")

    def usage(self):
        """(RSS in MiB, CPU seconds, threads)."""
        pid = self.pid()
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        return int(status["VmRSS"].split()[0]) / 1024, cpu, int(status["Threads"].strip())

    def latency(self, command, count=200):
        samples = sorted(self.request(command)[1] for _ in range(count))
        return statistics.median(samples) * 1000, samples[int(len(samples) * 0.99) - 1] * 1000

    def kill(self):
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGKILL)


def killed_mid_download(args, content):
    rows = []
    for name in ("foreground (default session)", "background session"):
        workdir = tempfile.mkdtemp(prefix="bg-bench-")
        network = Network(PREFIX, "k" + name[0], workdir, args.rate, subnet=SUBNET)
        agent = Agent(f"{workdir}/state")
        probes = []
        try:
            network.serve("file.bin", content)
            url = f"http://{SERVER}/file.bin"
            half = len(content) // 2
            if name.startswith("foreground"):
                common = [f"{args.build}/urlsession-probe", "--state-dir", f"{workdir}/session", "--exit-when-done"]
                first = Probe(network, env=QUIET, arguments=common + ["--url", url])
                probes.append(first)
                first.wait_line(lambda l: l.get("call") == "wrote" and l.get("total", 0) >= half, 60)
                first.close()
                # No resume data survives a killed process: the file is fetched again.
                second = Probe(network, env=QUIET, arguments=common + ["--url", url])
                probes.append(second)
                done = second.wait_line(lambda l: l.get("call") == "completed", 120)
                second.close()
                ok = done is not None and "code" not in done
                sent = network.bytes_after(2)
            else:
                common = [f"{args.build}/background-probe", "--state-dir", agent.state, "--session", "bench",
                          "--agent", f"{args.build}/reachability"]
                first = Probe(network, env=QUIET, arguments=common + ["--url", url])
                probes.append(first)
                first.wait_line(lambda l: l.get("call") == "wrote" and l.get("total", 0) >= half, 60)
                first.close()
                agent.wait_session("bench", lambda s: s["pendingEvents"] == 1)
                second = Probe(network, env=QUIET, arguments=common + ["--exit-after-events"])
                probes.append(second)
                done = second.wait_line(lambda l: l.get("call") == "finished", 60)
                second.process.wait(timeout=30)
                ok = done is not None
                sent = network.bytes_after(1)
            rows.append((name, ok, sent - len(content), len(network.requests())))
        finally:
            for probe in probes:
                probe.close()
            agent.kill()
            network.close()
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


def replay_latency(args):
    workdir = tempfile.mkdtemp(prefix="bg-bench-")
    network = Network(PREFIX, "r", workdir, "100m", subnet=SUBNET, worker_connections=1024)
    agent = Agent(f"{workdir}/state")
    probes = []
    try:
        count = 100
        for index in range(count):
            network.serve(f"f{index}.bin", os.urandom(16 << 10))
        common = [f"{args.build}/background-probe", "--state-dir", agent.state, "--session", "replay",
                  "--agent", f"{args.build}/reachability", "--no-launch-events"]
        # The tasks wait a second (earliestBeginDate), so they all end after the program is gone.
        urls = ["--not-before", "1"] + [arg for index in range(count) for arg in ("--url", f"http://{SERVER}/f{index}.bin")]
        results = []
        for _ in range(args.replays):
            first = Probe(network, env=QUIET, arguments=common + urls)
            probes.append(first)
            first.wait_line(lambda l: l.get("call") == "created" and len(first.calls("created")) >= count, 60)
            first.close()
            agent.wait_session("replay", lambda s: s["pendingEvents"] == count)
            second = Probe(network, env=QUIET, arguments=common + ["--exit-after-events"])
            probes.append(second)
            done = second.wait_line(lambda l: l.get("call") == "didFinishEvents", 60)
            second.process.wait(timeout=30)
            # The agent notices the exit a few ms after it: the next replay's first probe must not
            # attach before that (it would be refused as a second attach and create nothing).
            agent.wait_session("replay", lambda s: s.get("attachedPID") is None and s["pendingEvents"] == 0)
            launched = second.calls("launched")[0]
            finished = second.calls("finished")
            results.append(((finished[0]["us"] - launched["us"]) / 1000, (done["us"] - launched["us"]) / 1000, len(finished)))
        return results
    finally:
        # Probes first: an attached probe whose agent dies starts a new one.
        for probe in probes:
            probe.close()
        agent.kill()
        network.close()
        shutil.rmtree(workdir, ignore_errors=True)


def many_sessions(args):
    workdir = tempfile.mkdtemp(prefix="bg-bench-")
    network = Network(PREFIX, "m", workdir, "100m", subnet=SUBNET, worker_connections=1024)
    agent = Agent(f"{workdir}/state")
    rows = []
    probes = []
    try:
        network.serve("x.bin", b"x" * 1024)
        build = args.build
        # The agent alone (started by one probe that then leaves).
        starter = Probe(network, env=QUIET, arguments=[f"{build}/background-probe", "--state-dir", agent.state, "--session", "starter",
                                  "--agent", f"{build}/reachability"])
        starter.wait_line(lambda l: l.get("call") == "attached", 30)
        starter.send("invalidate")
        starter.process.wait(timeout=30)
        before = agent.usage()
        rows.append(("agent holding nothing", before, agent.latency("status"), agent.latency("list")))
        cpu_start = before[1]
        # Tasks wait an hour (earliestBeginDate): the agent holds them, transfers nothing.
        urls = [arg for _ in range(args.tasks) for arg in ("--url", f"http://{SERVER}/x.bin")]
        started = time.monotonic()
        for index in range(args.sessions):
            probe = Probe(network, env=QUIET, arguments=[f"{build}/background-probe", "--state-dir", agent.state, "--session", f"s{index}",
                                    "--agent", f"{build}/reachability", "--not-before", "3600", "--no-launch-events"] + urls)
            probe.wait_line(lambda l: l.get("call") == "created" and l.get("task") == args.tasks, 60 + args.tasks / 10)
            probes.append(probe)
        created = time.monotonic() - started
        print(f"(made {args.sessions} x {args.tasks} tasks in {created:.1f} s)", file=sys.stderr, flush=True)
        usage = agent.usage()
        rows.append((f"{args.sessions} programs attached, {args.sessions * args.tasks} tasks",
                     (usage[0], usage[1] - cpu_start, usage[2]), agent.latency("status"), agent.latency("list")))
        for probe in probes:
            probe.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply, _ = agent.request("status")
            sessions = reply["status"].get("backgroundSessions") or []
            if all(s.get("attachedPID") is None for s in sessions):
                break
            time.sleep(0.1)
        usage = agent.usage()
        rows.append((f"all detached, {args.sessions * args.tasks} tasks held", (usage[0], usage[1] - cpu_start, usage[2]),
                     agent.latency("status"), agent.latency("list")))
        idle_start = agent.usage()[1]
        time.sleep(10)
        idle = agent.usage()[1] - idle_start
        return rows, created, idle
    finally:
        for probe in probes:
            probe.close()
        agent.kill()
        network.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=".build/debug")
    parser.add_argument("--size-mib", type=int, default=8)
    parser.add_argument("--rate", default="2m")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--phases", default="1,2,3", help="comma-separated: which of the three parts to run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    args.build = os.path.abspath(args.build)

    phases = args.phases.split(",")
    if "1" in phases:
        killed_phase(args)
    if "2" in phases:
        replay_phase(args)
    if "3" in phases:
        sessions_phase(args)


def killed_phase(args):
    content = os.urandom(args.size_mib << 20)
    print(f"1. {args.size_mib} MiB at {args.rate}/s, the program SIGKILLed halfway, then run again for the file:\n")
    print("| session | file complete | bytes re-fetched | requests |")
    print("|---|---|---|---|")
    for name, ok, refetched, requests in killed_mid_download(args, content):
        print(f"| {name} | {'yes' if ok else 'NO'} | {refetched:,} | {requests} |")



def replay_phase(args):
    print("\n2. 100 events waiting; a new process makes the session (time 0) until its delegate calls:\n")
    results = replay_latency(args)
    print("| run | first didFinishDownloadingTo | urlSessionDidFinishEvents (after 100) |")
    print("|---|---|---|")
    for index, (first, last, count) in enumerate(results):
        print(f"| {index + 1} | {first:.1f} ms | {last:.1f} ms ({count} files) |")
    print(f"| median | {statistics.median(r[0] for r in results):.1f} ms | {statistics.median(r[1] for r in results):.1f} ms |")



def sessions_phase(args):
    rows, created, idle = many_sessions(args)
    print(f"\n3. {args.sessions} sessions x {args.tasks} tasks in one agent (made in {created:.1f} s; "
          f"idle afterwards: {idle:.2f} s CPU in 10 s):\n")
    print("| agent | RSS | CPU since start of phase | threads | status p50 / p99 | list p50 / p99 |")
    print("|---|---|---|---|---|---|")
    for name, (rss, cpu, threads), (status50, status99), (list50, list99) in rows:
        print(f"| {name} | {rss:.1f} MiB | {cpu:.2f} s | {threads} | {status50:.2f} / {status99:.2f} ms | {list50:.2f} / {list99:.2f} ms |")


if __name__ == "__main__":
    main()
