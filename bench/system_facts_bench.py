#!/usr/bin/python3
"""What NetworkManager's and ModemManager's facts cost, and whether they agree with GLib (issue 19).

startup:   `reachability status` wall time and peak RSS of the build before this change (--before,
           default: main's install build, built in a temporary worktree) beside this one, runs
           interleaved, in three settings: no system bus (servers, containers), a private bus
           without NetworkManager, and a private bus with python-dbusmock's NetworkManager.
agreement: GLib's Gio.NetworkMonitor (this process) and `reachability status --json` side by side
           on the same mocked NetworkManager and ModemManager, step by step: GLib's
           network-metered against our isExpensive, with what we say beyond it; and the latency
           from a Metered change to `reachability watch --json`'s line.

Runs with Debian's /usr/bin/python3, which has python3-dbusmock and python3-gi (scripts/setup.sh
installs them with dbus-daemon). Needs root (a network namespace named rchN<pid>, always removed).
Every number comes from the README's install build (release, static Swift stdlib), built here
unless --after is given.

Usage: sudo bench/system_facts_bench.py [--only startup|agreement] [--before PATH] [--after PATH]
                                        [--before-ref main] [--runs 30] [--flips 50]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = f"rchN{os.getpid()}"
INSTALL_BUILD = ["swift", "build", "-c", "release", "--static-swift-stdlib", "--product", "reachability"]
NM = "org.freedesktop.NetworkManager"
MM = "org.freedesktop.ModemManager1"
DEVICE = "org.freedesktop.NetworkManager.Device"
PROPS = "org.freedesktop.DBus.Properties"
MOCK = "org.freedesktop.DBus.Mock"
CHILDREN = []
CLEANUPS = []


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def sh(*args, **kwargs):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kwargs).stdout


def build(directory):
    log("building the install build in", directory)
    subprocess.run(INSTALL_BUILD, cwd=directory, check=True, stdout=sys.stderr)
    path = sh(*INSTALL_BUILD[:-2], "--show-bin-path", cwd=directory).strip()
    return os.path.join(path, "reachability")


def build_ref(ref):
    directory = tempfile.mkdtemp(prefix="rchN-before-")
    shutil.rmtree(directory)
    subprocess.run(["git", "worktree", "add", "--detach", directory, ref], cwd=ROOT, check=True,
                   stdout=sys.stderr, stderr=sys.stderr)
    CLEANUPS.append(lambda: subprocess.run(["git", "worktree", "remove", "--force", directory], cwd=ROOT))
    return build(directory)


def run_measured(args, env):
    """(wall seconds, CPU seconds, peak RSS KiB) of one run: wall from here, CPU (user + system)
    and the peak from /usr/bin/time, since a child forked from Python would report Python's
    resident set as its high-water mark."""
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        child = subprocess.Popen(["/usr/bin/time", "-q", "-f", "%M", "-o", report.name] + args, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # wait4's accounting is the scheduler's, to the microsecond (time(1) prints 10 ms ticks),
        # and includes time(1)'s reaped child.
        _, _, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = 0
        peak = report.read().split()[-1]
    return elapsed, usage.ru_utime + usage.ru_stime, int(peak)


class Bus:
    """A private system bus with mocked services."""

    TEMPLATE = os.path.join(ROOT, "Tests", "IntegrationTests", "SystemBusLab.swift")

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="rchN-bus-")
        socket = os.path.join(self.directory, "system_bus_socket")
        with open(os.path.join(self.directory, "bus.conf"), "w") as conf:
            conf.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={socket}</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>""")
        with open(os.path.join(self.directory, "mm_template.py"), "w") as template:
            template.write(self.modem_manager_template())
        self.daemon = subprocess.Popen(["dbus-daemon", f"--config-file={self.directory}/bus.conf", "--nofork",
                                        "--print-address=1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        CHILDREN.append(self.daemon)
        self.daemon.stdout.readline()
        self.address = "unix:path=" + socket
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = self.address
        import dbus
        import dbus.bus
        self.dbus = dbus
        # A connection of its own: dbus.SystemBus() is a process-wide singleton that would
        # outlive this bus's daemon.
        self.connection = dbus.bus.BusConnection(self.address)
        self.services = {}

    @staticmethod
    def modem_manager_template():
        # The same template the integration tests load (SystemBusLab.modemManagerTemplate).
        text = open(Bus.TEMPLATE).read()
        start = text.index("static let modemManagerTemplate = #\"\"\"") + len("static let modemManagerTemplate = #\"\"\"")
        body = text[start:text.index("\"\"\"#", start)]
        lines = body.split("\n")[1:]
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        return "\n".join(line[indent:] for line in lines)

    def start(self, name, template, namespace=None):
        command = ([] if namespace is None else ["ip", "netns", "exec", namespace]) + \
            ["/usr/bin/python3", "-m", "dbusmock", "--system", "--template", template]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.address))
        CHILDREN.append(process)
        self.services[name] = process
        deadline = time.monotonic() + 20
        while not self.connection.name_has_owner(name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.01)

    def stop(self, name):
        process = self.services.pop(name)
        process.kill()
        process.wait()
        while self.connection.name_has_owner(name):
            time.sleep(0.005)

    def network_manager(self, namespace=None):
        self.start(NM, "networkmanager", namespace)
        self.add_property("/org/freedesktop/NetworkManager", NM, "Metered", 4)

    def modem_manager(self, namespace=None):
        self.start(MM, os.path.join(self.directory, "mm_template.py"), namespace)

    def obj(self, service, path):
        return self.connection.get_object(service, path, introspect=False)

    def device(self, name, kind, interface, metered):
        mock = self.dbus.Interface(self.obj(NM, "/org/freedesktop/NetworkManager"), MOCK)
        path = str(mock.AddWiFiDevice(name, interface, 100) if kind == "wifi" else mock.AddEthernetDevice(name, interface, 100))
        self.add_property(path, DEVICE, "Metered", metered)
        self.set(path, DEVICE, "Metered", metered)
        return path

    def add_property(self, path, interface, name, value, service=NM):
        self.dbus.Interface(self.obj(service, path), MOCK).AddProperty(interface, name, self.dbus.UInt32(value))

    def set(self, path, interface, name, value, service=NM):
        self.dbus.Interface(self.obj(service, path), PROPS).Set(interface, name, self.dbus.UInt32(value, variant_level=1))

    def metered(self, path, value):
        self.set(path, DEVICE, "Metered", value)
        self.set("/org/freedesktop/NetworkManager", NM, "Metered", value)

    def modem(self, number, port, registration):
        mock = self.dbus.Interface(self.obj(MM, "/org/freedesktop/ModemManager1"), MOCK)
        return str(mock.AddModem(str(number), port, self.dbus.UInt32(registration), self.dbus.UInt32(1 << 14)))

    def close(self):
        for process in list(self.services.values()) + [self.daemon]:
            process.kill()
            process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def startup(before, after, runs):
    print("## `reachability status` start-up, before and after (interleaved runs; CPU is user + system)\n")
    base = {k: v for k, v in os.environ.items() if k != "DBUS_SYSTEM_BUS_ADDRESS"}
    if os.path.exists("/run/dbus/system_bus_socket"):
        log("note: this machine has a system bus; the 'no system bus' rows use it as 'automatic' finds it")
    bus = Bus()
    settings = [("no system bus (servers, containers)", base, None)]
    try:
        settings.append(("system bus, NetworkManager not running", dict(base, DBUS_SYSTEM_BUS_ADDRESS=bus.address), None))
        settings.append(("system bus, NetworkManager with 2 devices", dict(base, DBUS_SYSTEM_BUS_ADDRESS=bus.address), "nm"))
        print("| setting | build | wall min | wall median | CPU median | peak RSS median |")
        print("|---|---|---|---|---|---|")
        for label, env, services in settings:
            if services == "nm":
                bus.network_manager()
                bus.device("wlan0", "wifi", "wlan0", 3)
                bus.device("eth0", "ethernet", "eth0", 4)
            samples = {"before": [], "after": []}
            for _ in range(runs):
                for name, binary in (("before", before), ("after", after)):
                    samples[name].append(run_measured([binary, "status"], env))
            for name in ("before", "after"):
                walls = [s[0] for s in samples[name]]
                cpu = statistics.median(s[1] for s in samples[name])
                rss = statistics.median(s[2] for s in samples[name])
                print(f"| {label} | {name} | {min(walls) * 1000:.1f} ms | {statistics.median(walls) * 1000:.1f} ms | "
                      f"{cpu * 1000:.1f} ms | {rss / 1024:.1f} MiB |")
    finally:
        bus.close()
    print()


class Watch:
    """`reachability watch --json` with each line's arrival time."""

    def __init__(self, binary, namespace, env):
        self.process = subprocess.Popen(["ip", "netns", "exec", namespace, binary, "watch", "--json"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        CHILDREN.append(self.process)
        self.lines = []
        self.condition = threading.Condition()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            with self.condition:
                self.lines.append((time.monotonic(), json.loads(line)))
                self.condition.notify_all()

    def wait(self, predicate, after, timeout=10):
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                for arrival, path in self.lines:
                    if arrival >= after and predicate(path):
                        return arrival, path
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no matching watch line")
                self.condition.wait(remaining)

    def close(self):
        self.process.kill()
        self.process.wait()


def agreement(binary, flips):
    namespace = PREFIX
    sh("ip", "netns", "add", namespace)
    CLEANUPS.append(lambda: subprocess.run(["ip", "netns", "del", namespace]))
    for name, subnet, metric in (("wlrch0", 1, 10), ("enrch1", 2, 20), ("rchmodem0", 3, 30)):
        sh("ip", "-n", namespace, "link", "add", name, "type", "veth", "peer", "name", f"p{name}"[:15])
        sh("ip", "-n", namespace, "addr", "add", f"10.66.{subnet}.2/24", "dev", name)
        for link in (name, f"p{name}"[:15]):
            sh("ip", "-n", namespace, "link", "set", link, "up")
        sh("ip", "-n", namespace, "route", "add", "default", "via", f"10.66.{subnet}.1", "dev", name, "metric", str(metric))
    bus = Bus()
    try:
        bus.network_manager(namespace)
        wifi = bus.device("wlan0", "wifi", "wlrch0", 4)
        wired = bus.device("eth1", "ethernet", "enrch1", 4)
        from gi.repository import Gio, GLib
        monitor = Gio.NetworkMonitor.get_default()
        glib_bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
        context = GLib.MainContext.default()

        def glib():
            # A round trip to NetworkManager on GLib's connection, then an idle main context: GLib
            # has seen every signal sent before. Three times: a restarted NetworkManager makes
            # GLib's proxy ask for all properties from the main context, and that answer needs
            # a round trip and an iteration of its own.
            for _ in range(3):
                while context.pending():
                    context.iteration(False)
                try:
                    glib_bus.call_sync(NM, "/org/freedesktop/NetworkManager", PROPS, "Get",
                                       GLib.Variant("(ss)", (NM, "Metered")), None, Gio.DBusCallFlags.NONE, 2000, None)
                except GLib.Error:
                    pass
            while context.pending():
                context.iteration(False)
            return monitor.get_network_metered()

        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address)

        def ours(*extra):
            out = subprocess.run(["ip", "netns", "exec", namespace, binary, "status", "--json", "--all-interfaces", *extra],
                                 capture_output=True, text=True, env=env).stdout
            return json.loads(out)

        rows = []

        def row(step, nm_says, *extra):
            theirs = glib()
            path = ours(*extra)
            primary = next((i for i in path["interfaces"] if i["name"] == path["interface"]), {})
            more = []
            for interface in path["interfaces"]:
                if interface["name"] != path["interface"] and interface["isExpensive"]:
                    more.append(f"{interface['name']} expensive ({interface['costReason']})")
            if path["isRoaming"]:
                cellular = primary.get("cellular") or {}
                more.append(f"roaming ({cellular.get('registration')}, {'+'.join(cellular.get('accessTechnologies', []))})")
            agree = "yes" if theirs == path["isExpensive"] else "**no**"
            rows.append(f"| {step} | {nm_says} | {str(theirs).lower()} | {str(path['isExpensive']).lower()} | {agree} | "
                        f"{path['interface']}: {primary.get('costReason', '-')} | {'; '.join(more) or '-'} |")

        log("GLib's network monitor:", type(monitor).__name__)
        row("wifi, no hint", "Metered=guess-no")
        for value, name in ((3, "guess-yes"), (2, "no"), (1, "yes"), (0, "unknown"), (3, "guess-yes")):
            bus.metered(wifi, value)
            row(f"wifi Metered={name}", f"Metered={name}")
        bus.set("/org/freedesktop/NetworkManager", NM, "Connectivity", 1)
        row("NetworkManager's Connectivity=none, route still there", "Metered=guess-yes, Connectivity=none")
        bus.set("/org/freedesktop/NetworkManager", NM, "Connectivity", 4)
        bus.metered(wifi, 1)
        row("wifi Metered=yes, --classify wlrch0=wifi", "Metered=yes", "--classify", "wlrch0=wifi")
        bus.metered(wifi, 4)
        bus.set(wired, DEVICE, "Metered", 1)
        row("second uplink marked metered, not the primary", "global Metered=guess-no")
        bus.stop(NM)
        row("NetworkManager gone", "(not on the bus)")
        bus.network_manager(namespace)
        wifi = bus.device("wlan0", "wifi", "wlrch0", 3)
        bus.metered(wifi, 3)
        row("NetworkManager back, wifi Metered=guess-yes", "Metered=guess-yes")
        bus.modem_manager(namespace)
        modem = bus.modem(0, "rchmodem0", 5)
        sh("ip", "-n", namespace, "route", "add", "default", "via", "10.66.3.1", "dev", "rchmodem0", "metric", "1")
        row("modem primary, roaming (ModemManager)", "global Metered=guess-yes (wifi)")
        bus.set(modem, "org.freedesktop.ModemManager1.Modem.Modem3gpp", "RegistrationState", 1, service=MM)
        row("modem back home", "global Metered=guess-yes (wifi)")
        sh("ip", "-n", namespace, "route", "del", "default", "via", "10.66.3.1", "dev", "rchmodem0", "metric", "1")

        print("## Beside GLib's GNetworkMonitor on the same mocked NetworkManager\n")
        print("| step | NetworkManager says | GLib `network-metered` | `isExpensive` | agree | why (ours) | what we say beyond GLib |")
        print("|---|---|---|---|---|---|---|")
        for line in rows:
            print(line)
        print()

        watch = Watch(binary, namespace, env)
        try:
            watch.wait(lambda path: True, 0)
            latencies = []
            value = 3
            for _ in range(flips):
                value = 4 if value == 3 else 3
                start = time.monotonic()
                bus.metered(wifi, value)
                arrival, _ = watch.wait(lambda path, expensive=(value == 3): path["isExpensive"] == expensive, start)
                latencies.append((arrival - start) * 1000)
            latencies.sort()
            print(f"Latency from the Metered change (the driver's D-Bus call) to `watch --json`'s line, {flips} flips: "
                  f"median {statistics.median(latencies):.1f} ms, p90 {latencies[int(len(latencies) * 0.9)]:.1f} ms, "
                  f"max {latencies[-1]:.1f} ms\n")
        finally:
            watch.close()
    finally:
        bus.close()


def cleanup():
    for process in CHILDREN:
        if process.poll() is None:
            process.kill()
    for step in reversed(CLEANUPS):
        step()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["startup", "agreement"])
    parser.add_argument("--before")
    parser.add_argument("--before-ref", default="main")
    parser.add_argument("--after")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--flips", type=int, default=50)
    arguments = parser.parse_args()
    try:
        after = arguments.after or build(ROOT)
        if arguments.only != "agreement":
            before = arguments.before or build_ref(arguments.before_ref)
            startup(before, after, arguments.runs)
        if arguments.only != "startup":
            agreement(after, arguments.flips)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
