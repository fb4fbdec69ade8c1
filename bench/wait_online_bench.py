#!/usr/bin/env python3
"""`reachability wait` as a wait-online: how soon it exits after the kernel message that makes
its condition true, whether it ever exits 0 before, and what it costs while it waits.

Part 1 (always; root, namespaces rchW<pid>-*, always removed). For each scenario, RUNS times:
start `reachability wait --netns C --json ...`, read its first `waiting` event (it is waiting),
then make the condition true with one `ip` command. The peer is `ip monitor` in the same
namespace, started once: the time its line for that change arrives is the reference (it only
prints, so it is the kernel message's earliest observable time). Reported: the wait's exit minus
that line (p50, p90, worst), and how many runs exited before the change (0 or 1 = early).
  route    : `wait` (default), the default route is added to an up, addressed veth
  carrier  : `wait --interface eth1:carrier`, eth1's peer is set up (carrier arrives)
  ipv6     : `wait --ipv6`, an IPv6 default route is added
  late     : `wait`, the default route arrives after --late seconds (30 by default), once
Idle: `wait` (unsatisfied, for ever) and `watch` side by side for --idle seconds with no change:
CPU seconds and voluntary context switches of each, from /proc.

Part 2 (--networkd; needs debootstrap and systemd-nspawn: ./scripts/setup.sh --package): the
same machine state seen by systemd-networkd-wait-online (systemd 252, networkd running under
systemd as PID 1 in a Debian container booted with systemd-nspawn, as scripts/test-deb.sh does)
and by `reachability wait` (the host's build, entering the container's network namespace with
nsenter -n), both started before the change. Scenarios, each RUNS times:
  route-late  : rch0 is configured by networkd (static 10.78.0.2/24, gateway .1); its peer comes up
                (carrier) and networkd adds the address and the default route; `wait` vs
                `systemd-networkd-wait-online` (default: every managed link)
  second-nic  : as route-late, plus rch1 managed by networkd whose peer stays down (an unplugged
                NIC); `wait` vs networkd-wait-online with default arguments and with --any
  dns-silent  : a default route but resolv.conf's server never answers; `wait` (default), `wait
                --dns` and networkd-wait-online: who says online
  late        : as route-late, the peer comes up --late seconds after both started (once)
For each waiter: time from the kernel's default-route message (ip monitor in the container's
namespace) to its exit, its exit status, or 'never' within --timeout.

Usage: bench/wait_online_bench.py [--binary PATH] [--runs 50] [--late 30] [--idle 20] [--networkd]
"""
import argparse
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PREFIX = f"rchW{os.getpid()}"
NAMESPACES = []
CHILDREN = []


def sh(*args, input=None, check=True):
    done = subprocess.run(args, input=input, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()[:500]}")
    return done.stdout


def namespace(suffix):
    name = f"{PREFIX}-{suffix}"
    sh("ip", "netns", "add", name)
    NAMESPACES.append(name)
    sh("ip", "-n", name, "link", "set", "lo", "up")
    return name


class Monitor:
    """`ip monitor` in a namespace (or under a command prefix); each line with its arrival time."""

    def __init__(self, prefix, objects=("link", "address", "route")):
        self.process = subprocess.Popen(prefix + ["ip", "monitor", *objects], stdout=subprocess.PIPE, text=True, bufsize=1)
        CHILDREN.append(self.process)
        self.lines = []
        self.lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            now = time.monotonic()
            with self.lock:
                self.lines.append((now, line.rstrip("\n")))
                self.lock.notify_all()

    def mark(self):
        with self.lock:
            return len(self.lines)

    def first_after(self, mark, pattern, timeout=10):
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for when, line in self.lines[mark:]:
                    if re.search(pattern, line):
                        return when
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.lock.wait(left)


class Waiter:
    """A running wait-online command; `exited_at` is the monotonic time its exit was seen."""

    def __init__(self, arguments):
        self.process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        CHILDREN.append(self.process)
        self.exited_at = None
        self.status = None
        self.first_line = None
        self.ready = threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self):
        self.status = self.process.wait()
        self.exited_at = time.monotonic()

    def wait_for_first_line(self, timeout=10):
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        self.first_line = self.process.stdout.readline() if ready else None
        self.online_at = None
        threading.Thread(target=self._read_rest, daemon=True).start()
        return self.first_line

    def _read_rest(self):
        # The `online` event's arrival: the decision, before the process winds down and exits.
        for line in self.process.stdout:
            if '"online"' in line and self.online_at is None:
                self.online_at = time.monotonic()

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        while self.exited_at is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if self.exited_at is None:
            self.process.kill()
            self.process.wait()
        return self.exited_at


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def ms(seconds):
    return f"{seconds * 1000:.2f} ms"


def uplink(client, router, name, subnet, address=True):
    sh("ip", "link", "add", name, "netns", client, "type", "veth", "peer", "name", f"up{subnet}", "netns", router)
    sh("ip", "-n", router, "addr", "add", f"10.77.{subnet}.1/24", "dev", f"up{subnet}")
    sh("ip", "-n", router, "addr", "add", f"2001:db8:{subnet}::1/64", "dev", f"up{subnet}", "nodad")
    if address:
        sh("ip", "-n", client, "addr", "add", f"10.77.{subnet}.2/24", "dev", name)
        sh("ip", "-n", client, "addr", "add", f"2001:db8:{subnet}::2/64", "dev", name, "nodad")


def part_one(binary, runs, late, idle):
    client, router = namespace("c"), namespace("r")
    uplink(client, router, "enp3s0", 1)
    sh("ip", "-n", router, "link", "set", "up1", "up")
    sh("ip", "-n", client, "link", "set", "enp3s0", "up")
    uplink(client, router, "eth1", 2)
    sh("ip", "-n", client, "link", "set", "eth1", "up")
    monitor = Monitor(["ip", "netns", "exec", client])
    time.sleep(0.3)  # ip monitor subscribes after it starts; nothing is measured before it has

    scenarios = {
        "route": ([], ["route", "add", "default", "via", "10.77.1.1", "dev", "enp3s0"], r"^default via 10\.77\.1\.1",
                  ["route", "del", "default"]),
        "carrier": (["--interface", "eth1:carrier"], None, r"eth1.*LOWER_UP", None),
        "ipv6": (["--ipv6"], ["-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "enp3s0"], r"^default via 2001:db8:1::1",
                 ["-6", "route", "del", "default"]),
    }
    rows = []
    for name, (arguments, change, pattern, undo) in scenarios.items():
        latencies, decisions, early, never = [], [], 0, 0
        for _ in range(runs):
            waiter = Waiter([binary, "wait", "--netns", client, "--json", "--timeout", "30"] + arguments)
            line = waiter.wait_for_first_line()
            if not line or '"waiting"' not in line:
                early += 1
                waiter.join(5)
                continue
            mark = monitor.mark()
            if name == "carrier":
                sh("ip", "-n", router, "link", "set", "up2", "up")
            else:
                sh("ip", "-n", client, *change)
            kernel = monitor.first_after(mark, pattern)
            exited = waiter.join(10)
            if exited is None or waiter.status != 0 or kernel is None:
                never += 1
            else:
                latencies.append(exited - kernel)
                for _ in range(100):   # the reader thread may see the line just after the exit
                    if waiter.online_at is not None:
                        break
                    time.sleep(0.001)
                if waiter.online_at is not None:
                    decisions.append(waiter.online_at - kernel)
            if name == "carrier":
                mark = monitor.mark()
                sh("ip", "-n", router, "link", "set", "up2", "down")
                monitor.first_after(mark, r"eth1.*NO-CARRIER", timeout=5)
            else:
                sh("ip", "-n", client, *undo)
        rows.append((name, latencies, early, never, decisions))

    # The network arriving late, once.
    if late > 0:
        waiter = Waiter([binary, "wait", "--netns", client, "--json", "--timeout", str(late + 60)])
        waiter.wait_for_first_line()
        time.sleep(late)
        early = 1 if waiter.exited_at is not None else 0
        mark = monitor.mark()
        sh("ip", "-n", client, "route", "add", "default", "via", "10.77.1.1", "dev", "enp3s0")
        kernel = monitor.first_after(mark, r"^default via 10\.77\.1\.1")
        exited = waiter.join(10)
        ok = exited is not None and waiter.status == 0 and kernel is not None
        rows.append((f"late ({late:g} s)", [exited - kernel] if ok else [], early, 0 if ok else 1, []))
        sh("ip", "-n", client, "route", "del", "default")

    print("exit: the process has exited; online: its `online` event arrived (the decision), both after ip monitor's line")
    print(f"{'scenario':<14} {'runs':>4} {'exit p50':>10} {'p90':>10} {'worst':>10} {'online p50':>11} {'worst':>10} {'early 0':>8} {'never':>6}")
    for name, latencies, early, never, decisions in rows:
        decided = (f"{ms(statistics.median(decisions)):>11} {ms(max(decisions)):>10}" if decisions else f"{'-':>11} {'-':>10}")
        if latencies:
            print(f"{name:<14} {len(latencies) + early + never:>4} {ms(statistics.median(latencies)):>10} "
                  f"{ms(percentile(latencies, 0.9)):>10} {ms(max(latencies)):>10} {decided} {early:>8} {never:>6}")
        else:
            print(f"{name:<14} {early + never:>4} {'-':>10} {'-':>10} {'-':>10} {decided} {early:>8} {never:>6}")

    if idle > 0:
        def stat(pid):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            switches = {}
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            switches[task] = int(line.split()[1])
            return cpu, switches
        wait = subprocess.Popen([binary, "wait", "--netns", client, "--timeout", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watch = subprocess.Popen([binary, "watch", "--netns", client], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        CHILDREN.extend([wait, watch])
        time.sleep(2)  # both past their start
        before = {p.pid: stat(p.pid) for p in (wait, watch)}
        time.sleep(idle)
        after = {p.pid: stat(p.pid) for p in (wait, watch)}
        print(f"\nidle {idle:g} s, nothing changing (wait is unsatisfied and prints a line every 5 s):")
        for label, process in (("wait --timeout 0", wait), ("watch", watch)):
            cpu = after[process.pid][0] - before[process.pid][0]
            # Wakeups of the threads alive at both ends (a thread that ended takes its count along).
            switches = sum(count - before[process.pid][1].get(task, count) for task, count in after[process.pid][1].items())
            print(f"  {label:<18} CPU {cpu:.3f} s, {switches} voluntary context switches")
        for process in (wait, watch):
            process.kill()
            process.wait()


def part_two(binary, runs, timeout, late):
    for tool in ("debootstrap", "systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            sys.exit(f"--networkd needs {tool}: ./scripts/setup.sh --package")
    work = tempfile.mkdtemp(prefix="rchW", dir="/var/tmp")
    root = os.path.join(work, "root")
    nspawn = None
    init = None
    try:
        mirror = "http://deb.debian.org/debian"
        for path in ("/etc/apt/sources.list.d/debian.sources",):
            if os.path.exists(path):
                found = re.search(r"^URIs:\s*(\S+)", open(path).read(), re.M)
                if found:
                    mirror = found.group(1)
        print(f"debootstrap bookworm from {mirror} ...", file=sys.stderr)
        # libnl: what the release binary links (--static-swift-stdlib; libcurl/libcrypto are dlopened
        # by downloads only), so the host's build runs inside as it is.
        sh("debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv,dbus,iproute2,libnl-3-200,libnl-route-3-200",
           "bookworm", root, mirror)
        shutil.copy(binary, os.path.join(root, "usr/local/bin/reachability"))
        binary = "/usr/local/bin/reachability"
        network = os.path.join(root, "etc/systemd/network")
        os.makedirs(network, exist_ok=True)
        with open(os.path.join(network, "20-rch0.network"), "w") as f:
            f.write("[Match]\nName=rch0\n[Network]\nAddress=10.78.0.2/24\nGateway=10.78.0.1\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n")
        with open(os.path.join(network, "21-rch1.network"), "w") as f:
            f.write("[Match]\nName=rch1\n[Network]\nAddress=10.78.1.2/24\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n")
        sh("chroot", root, "systemctl", "enable", "systemd-networkd.service")
        sh("chroot", root, "systemctl", "disable", "systemd-networkd-wait-online.service", check=False)
        nspawn = subprocess.Popen(["systemd-nspawn", "--register=no", "--keep-unit", "--quiet", "--private-network",
                                   "-D", root, "--boot"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        init = None
        for _ in range(200):
            children = sh("pgrep", "-P", str(nspawn.pid), check=False).split()
            if children and open(f"/proc/{children[0]}/comm").read().strip() == "systemd":
                init = children[0]
                break
            time.sleep(0.1)
        if init is None:
            sys.exit("systemd-nspawn could not boot the root")
        inside = ["nsenter", "-t", init, "-m", "-u", "-i", "-n", "-p", "-r", "-w"]
        net = ["nsenter", "-t", init, "-n"]
        for _ in range(300):
            state = sh(*inside, "systemctl", "is-system-running", check=False).strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.1)
        router = namespace("nr")
        monitor = Monitor(net, objects=("route",))
        time.sleep(0.3)
        version = sh(*inside, "systemctl", "--version").splitlines()[0]
        print(f"\ncontainer: {version}, systemd-networkd {sh(*inside, 'systemctl', 'is-active', 'systemd-networkd', check=False).strip()}")

        def links(second_nic):
            # rch0 (and rch1) in the container, their peers in the router namespace, all down.
            sh(*net, "ip", "link", "add", "rch0", "type", "veth", "peer", "name", "rp0")
            sh(*net, "ip", "link", "set", "rp0", "netns", router)
            sh("ip", "-n", router, "addr", "add", "10.78.0.1/24", "dev", "rp0")
            if second_nic:
                sh(*net, "ip", "link", "add", "rch1", "type", "veth", "peer", "name", "rp1")
                sh(*net, "ip", "link", "set", "rp1", "netns", router)

        def unlink():
            sh(*net, "ip", "link", "del", "rch0", check=False)
            sh(*net, "ip", "link", "del", "rch1", check=False)

        late_timeout = str(int(late) + 30)
        waiters_for = {
            "late": [("reachability wait", [binary, "wait", "--timeout", late_timeout]),
                     ("networkd-wait-online", ["/lib/systemd/systemd-networkd-wait-online", f"--timeout={late_timeout}"])],
            "route-late": [("reachability wait", [binary, "wait", "--timeout", str(timeout)]),
                           ("networkd-wait-online", ["/lib/systemd/systemd-networkd-wait-online", f"--timeout={timeout}"])],
            "second-nic": [("reachability wait", [binary, "wait", "--timeout", str(timeout)]),
                           ("networkd-wait-online", ["/lib/systemd/systemd-networkd-wait-online", f"--timeout={timeout}"]),
                           ("networkd-wait-online --any", ["/lib/systemd/systemd-networkd-wait-online", "--any", f"--timeout={timeout}"])],
            "dns-silent": [("reachability wait", [binary, "wait", "--timeout", str(timeout)]),
                           ("reachability wait --dns", [binary, "wait", "--dns", "--timeout", str(timeout)]),
                           ("networkd-wait-online", ["/lib/systemd/systemd-networkd-wait-online", f"--timeout={timeout}"])],
        }
        with open(os.path.join(root, "etc/resolv.conf"), "w") as f:
            f.write("nameserver 10.78.0.53\n")  # nobody answers there
        print(f"{'scenario':<12} {'waiter':<28} {'runs':>4} {'p50 exit after route':>22} {'worst':>10} {'exit 0 early':>13} {'exit 0':>7} {'never/failed':>13}")
        for scenario, waiters in waiters_for.items():
            results = {label: ([], 0, 0, 0) for label, _ in waiters}
            for _ in range(1 if scenario == "late" else runs):
                unlink()
                links(second_nic=(scenario == "second-nic"))
                if scenario == "dns-silent":
                    sh("ip", "-n", router, "link", "set", "rp0", "up")
                    sh(*net, "ip", "link", "set", "rch0", "up")
                time.sleep(0.5)  # networkd has seen the links (it configures them once they have carrier)
                started = []
                for label, command in waiters:
                    # Both inside the container: its namespaces, /sys and /etc/resolv.conf.
                    started.append((label, Waiter(inside + command)))
                # Every waiter is waiting (or already wrongly exited); "late": the network comes after `late` s.
                time.sleep(late if scenario == "late" else 0.5)
                mark = monitor.mark()
                # dns-silent has its route before the waiters start: there, exiting 0 is the answer, not early.
                early = {label: scenario != "dns-silent" and waiter.exited_at is not None and waiter.status == 0
                         for label, waiter in started}
                if scenario != "dns-silent":
                    sh("ip", "-n", router, "link", "set", "rp0", "up")
                    kernel = monitor.first_after(mark, r"^default via 10\.78\.0\.1", timeout=20)
                else:
                    kernel = time.monotonic()
                for label, waiter in started:
                    exited = waiter.join((int(late) + 35) if scenario == "late" else timeout + 5)
                    latencies, early_count, online, never = results[label]
                    if early[label]:
                        early_count += 1
                    elif exited is None or waiter.status != 0 or kernel is None:
                        never += 1
                    else:
                        online += 1
                        if scenario != "dns-silent":   # there the route came before the waiters
                            latencies.append(exited - kernel)
                    results[label] = (latencies, early_count, online, never)
            for label, (latencies, early_count, online, never) in results.items():
                p50 = ms(statistics.median(latencies)) if latencies else "-"
                worst = ms(max(latencies)) if latencies else "-"
                count = 1 if scenario == "late" else runs
                print(f"{scenario:<12} {label:<28} {count:>4} {p50:>22} {worst:>10} {early_count:>13} {online:>7} {never:>13}")
        unlink()
    finally:
        # The container's systemd first: SIGKILL to systemd-nspawn alone leaves it running,
        # orphaned in its own PID namespace with its root deleted below.
        if init is not None:
            subprocess.run(["kill", "-KILL", init], check=False)
        if nspawn is not None:
            nspawn.kill()
            nspawn.wait()
        for line in reversed(open("/proc/mounts").read().splitlines()):
            mountpoint = line.split()[1]
            if mountpoint.startswith(root):
                subprocess.run(["umount", "-l", mountpoint])
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/reachability")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--late", type=float, default=30)
    parser.add_argument("--idle", type=float, default=20)
    parser.add_argument("--networkd", action="store_true")
    parser.add_argument("--networkd-runs", type=int, default=10)
    parser.add_argument("--networkd-timeout", type=int, default=10)
    options = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    binary = os.path.abspath(options.binary)
    try:
        part_one(binary, options.runs, options.late, options.idle)
        if options.networkd:
            part_two(binary, options.networkd_runs, options.networkd_timeout, options.late)
    finally:
        for child in CHILDREN:
            if child.poll() is None:
                child.kill()
                child.wait()
        for name in NAMESPACES:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


if __name__ == "__main__":
    main()
