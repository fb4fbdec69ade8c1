#!/usr/bin/env bash
# Builds the Debian package and installs it the way an administrator would, on a fresh Debian 12
# root made by debootstrap from the configured mirror, then checks it (root; CI runs it after
# the suite, see .ci/run):
#   1. scripts/build-deb.sh, lintian --fail-on error included;
#   2. `apt-get install ./reachability_*.deb` in the new root: the Depends resolve from the mirror;
#   3. `reachability --version`, and `reachability status` in a network namespace with an uplink
#      (exit 0, wired) and in an empty one (exit 1);
#   4. when systemd-nspawn can boot the root (systemd as PID 1 in a container): the system unit
#      starts (Type=notify), the commands its header documents work as written
#      (DynamicUser's /var/lib/reachability link included), reload and stop; a user's socket
#      (enabled by the package for everyone) starts that user's agent on the first
#      `reachability queue list`; the wait-online unit (installed, not enabled) once enabled orders
#      network-online.target after it, and a service After=network-online.target starts only once
#      a default route appears (issue 33);
#   5. `apt-get purge`: nothing of the package is left.
# Where nspawn cannot boot, step 4 says so and checks the units with systemd-analyze verify.
# Usage: scripts/test-deb.sh [--deb FILE]   (an already built .deb: skips step 1)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "test-deb: needs root (debootstrap, chroot, namespaces)" >&2; exit 77; }

deb=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb="$2"; shift 2 ;;
    *) echo "test-deb: unknown option '$1'" >&2; exit 64 ;;
  esac
done

started=$(date +%s)
step() { echo "test-deb: [$(( $(date +%s) - started )) s] $*" >&2; }
fail() { echo "test-deb: FAILED: $*" >&2; exit 1; }

for tool in debootstrap chroot ip; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is missing: run ./scripts/setup.sh --package"
done

if [ -z "$deb" ]; then
  step "building the package"
  deb=$(./scripts/build-deb.sh)
fi
[ -f "$deb" ] || fail "no package at $deb"
deb=$(realpath "$deb")

work=$(mktemp -d /var/tmp/rchD.XXXXXX)
root="$work/root"
namespaces=()
nspawn_pid=""
cleanup() {
  set +e
  [ -n "$nspawn_pid" ] && kill "$nspawn_pid" 2>/dev/null && wait "$nspawn_pid" 2>/dev/null
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  for mountpoint in $(awk -v r="$root" '$2 ~ "^"r {print $2}' /proc/mounts | sort -r); do umount -l "$mountpoint"; done
  rm -rf "$work"
}
trap cleanup EXIT

# The mirror apt already uses (deb822 sources or sources.list), else Debian's.
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")

step "debootstrap $suite from $mirror (minbase + systemd, dbus, libpam-systemd: what a Debian install with systemd has)"
debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,libpam-systemd "$suite" "$root" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
echo "rchtest" > "$root/etc/hostname"
in_root() { chroot "$root" "$@"; }

step "apt-get install ./$(basename "$deb") in the new root"
cp "$deb" "$root/tmp/"
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")" > "$work/install.log" 2>&1 \
  || { tail -30 "$work/install.log" >&2; fail "apt-get install"; }
grep -E "^(Setting up|Created symlink)" "$work/install.log" | sed 's/^/  /' >&2

version=$(dpkg-deb -f "$deb" Version)
mount -t proc proc "$root/proc"
[ "$(in_root reachability --version)" = "$version" ] || fail "reachability --version is not the package's $version"
umount "$root/proc"

# status in namespaces of our own: an uplink named like a NIC (wired), and nothing at all.
up="rchD$$-up"; empty="rchD$$-empty"
ip netns add "$up"; namespaces+=("$up")
ip netns add "$empty"; namespaces+=("$empty")
ip -n "$up" link add eth0 type veth peer name peer0
ip -n "$up" addr add 10.200.0.2/24 dev eth0
ip -n "$up" link set peer0 up
ip -n "$up" link set eth0 up
ip -n "$up" link set lo up
ip -n "$up" route add default via 10.200.0.1 dev eth0
# `ip netns exec` gives the command its own mount namespace with that namespace's /sys; the
# root's /proc and /sys are mounted inside it and vanish with it.
status_in() {
  ip netns exec "$1" sh -c 'mount -t proc proc "$0/proc" && mount -t sysfs sysfs "$0/sys" && exec chroot "$0" reachability status' "$root"
}
for attempt in 1 2 3 4 5 6 7 8 9 10; do   # carrier on a fresh veth pair takes a moment
  if output=$(status_in "$up" 2>&1); then break; fi
  sleep 0.5
done
echo "  status (uplink): $output" >&2
[[ "$output" == "reachable via wired (eth0, 10.200.0.2, gw 10.200.0.1)"* ]] || fail "status with an uplink: $output"
set +e; output=$(status_in "$empty" 2>&1); code=$?; set -e
echo "  status (empty namespace, exit $code): $output" >&2
[ "$code" -eq 1 ] && [[ "$output" == unreachable* ]] || fail "status without an uplink: exit $code, $output"

# Step 4: systemd as PID 1 in the new root.
systemd_checked=no
if command -v systemd-nspawn >/dev/null 2>&1; then
  step "booting the root with systemd-nspawn"
  # --register=no and --keep-unit: no machined or host systemd needed; --private-network: the
  # container has only its own loopback.
  systemd-nspawn --register=no --keep-unit --quiet --private-network -D "$root" --boot > "$work/boot.log" 2>&1 &
  nspawn_pid=$!
  init=""
  for attempt in $(seq 100); do
    init=$(pgrep -P "$nspawn_pid" 2>/dev/null | head -1 || true)
    [ -n "$init" ] && [ "$(cat /proc/"$init"/comm 2>/dev/null)" = systemd ] && break
    init=""
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -n "$init" ]; then
    in_container() { nsenter -t "$init" -m -u -i -n -p -r -w "$@"; }
    # systemctl answers once PID 1 has made its private socket; --wait then lasts until boot ends.
    state=""
    for attempt in $(seq 300); do
      state=$(in_container timeout 60 systemctl is-system-running --wait 2>/dev/null || true)
      [ -n "$state" ] && break
      sleep 0.1
    done
    echo "  container: $state" >&2
    [ "$state" = running ] || [ "$state" = degraded ] || fail "the container did not boot ($state): $(tail -5 "$work/boot.log")"

    step "system unit: start, the documented commands, reload, stop"
    in_container systemctl start reachability-agent || fail "systemctl start reachability-agent: $(in_container journalctl -u reachability-agent --no-pager | tail -5)"
    [ "$(in_container systemctl is-active reachability-agent)" = active ] || fail "the system agent is not active"
    in_container systemctl show -p StatusText --value reachability-agent | sed 's/^/  StatusText: /' >&2
    [ "$(in_container readlink /var/lib/reachability)" = private/reachability ] || fail "/var/lib/reachability is not DynamicUser's link"
    in_container reachability agent status | sed 's/^/  /' >&2 || fail "sudo reachability agent status"
    added=$(in_container reachability queue add http://127.0.0.1:9/x.iso -o /var/lib/reachability/files/NAME) \
      || fail "the unit's documented 'queue add URL -o /var/lib/reachability/files/NAME' was refused"
    echo "  $added" >&2
    [[ "$added" == *"/var/lib/private/reachability/files/NAME"* ]] || fail "queue add landed elsewhere: $added"
    in_container systemctl reload reachability-agent
    [ "$(in_container systemctl is-active reachability-agent)" = active ] || fail "inactive after reload"
    in_container systemctl stop reachability-agent
    [ "$(in_container systemctl is-active reachability-agent || true)" = inactive ] || fail "still running after stop"
    in_container journalctl -u reachability-agent --no-pager -o cat | grep -F '"event":"stopped","checkpointed":true' >/dev/null \
      || fail "the agent did not stop cleanly: $(in_container journalctl -u reachability-agent --no-pager | tail -5)"
    [ -e "$root/usr/share/man/man1/reachability.1.gz" ] || fail "Documentation=man:reachability(1) is not installed"

    step "wait-online unit: orders network-online.target, holds back an After=network-online.target service until the route"
    [ "$(in_container systemctl is-enabled reachability-wait-online.service || true)" = disabled ] \
      || fail "the package enabled reachability-wait-online.service (it must only be installed)"
    [ -f "$root/etc/reachability/wait-online.conf" ] || fail "/etc/reachability/wait-online.conf is not installed"
    grep -qx /etc/reachability/wait-online.conf "$root/var/lib/dpkg/info/reachability.conffiles" \
      || fail "/etc/reachability/wait-online.conf is not a conffile"
    in_container systemctl enable reachability-wait-online.service 2>&1 | sed 's/^/  /' >&2
    in_container systemctl show -p After --value network-online.target | tr ' ' '\n' | grep -x reachability-wait-online.service >/dev/null \
      || fail "network-online.target is not ordered after reachability-wait-online.service"
    in_container systemctl show -p Wants --value network-online.target | tr ' ' '\n' | grep -x reachability-wait-online.service >/dev/null \
      || fail "network-online.target does not pull in reachability-wait-online.service once enabled"
    # The container has only loopback (--private-network): no default route, so the wait waits.
    # RemainAfterExit: a finished oneshot without it is unloaded, and its timestamps read 0 again.
    printf '[Unit]\nWants=network-online.target\nAfter=network-online.target\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n' \
      > "$root/etc/systemd/system/rchonline.service"
    in_container systemctl daemon-reload
    in_container systemctl start --no-block rchonline.service
    for attempt in $(seq 100); do   # until the wait runs (the journal has its first waiting line at 5 s)
      [ "$(in_container systemctl show -p ActiveState --value reachability-wait-online.service)" = activating ] && break
      sleep 0.1
    done
    [ "$(in_container systemctl show -p ActiveState --value reachability-wait-online.service)" = activating ] \
      || fail "reachability-wait-online did not start: $(in_container journalctl -u reachability-wait-online --no-pager | tail -3)"
    [ "$(in_container systemctl show -p ExecMainStartTimestampMonotonic --value rchonline.service)" = 0 ] \
      || fail "an After=network-online.target service started before the network was online"
    # The network arrives: a link with an address and a default route, made from the host.
    nsenter -t "$init" -n ip link add rch0 type veth peer name rch1
    nsenter -t "$init" -n ip addr add 10.201.0.2/24 dev rch0
    nsenter -t "$init" -n ip link set rch1 up
    nsenter -t "$init" -n ip link set rch0 up
    nsenter -t "$init" -n ip route add default via 10.201.0.1 dev rch0
    for attempt in $(seq 100); do
      [ "$(in_container systemctl show -p ExecMainStartTimestampMonotonic --value rchonline.service)" != 0 ] && break
      sleep 0.1
    done
    waited=$(in_container systemctl show -p ExecMainExitTimestampMonotonic --value reachability-wait-online.service)
    started_after=$(in_container systemctl show -p ExecMainStartTimestampMonotonic --value rchonline.service)
    [ "$(in_container systemctl show -p Result --value reachability-wait-online.service)" = success ] \
      || fail "reachability-wait-online failed: $(in_container journalctl -u reachability-wait-online --no-pager | tail -3)"
    [ "$started_after" != 0 ] && [ "$started_after" -ge "$waited" ] \
      || fail "rchonline.service started at $started_after, the wait ended at $waited"
    echo "  the wait ended at ${waited} us, the After=network-online.target service started at ${started_after} us" >&2
    in_container journalctl -u reachability-wait-online --no-pager -o cat | sed 's/^/  journal: /' >&2
    in_container systemctl disable reachability-wait-online.service 2>/dev/null
    rm -f "$root/etc/systemd/system/rchonline.service"

    step "user units: the socket the package enabled starts the user's agent"
    in_container useradd --create-home --shell /bin/sh rchtester
    uid=$(in_container id -u rchtester)
    in_container loginctl enable-linger rchtester
    as_user() { in_container runuser -u rchtester -- env XDG_RUNTIME_DIR=/run/user/"$uid" "$@"; }
    for attempt in $(seq 100); do
      [ "$(in_container systemctl is-active user@"$uid".service || true)" = active ] && break
      sleep 0.1
    done
    socket_state=$(as_user systemctl --user is-active reachability-agent.socket || true)
    [ "$socket_state" = active ] || fail "reachability-agent.socket is $socket_state for a new user"
    [ "$(as_user systemctl --user is-active reachability-agent.service || true)" = inactive ] || fail "the user agent ran before any command"
    as_user reachability queue list || fail "the first queue list of a user"
    [ "$(as_user systemctl --user is-active reachability-agent.service || true)" = active ] || fail "the socket did not start the user's agent"
    as_user reachability agent status | sed 's/^/  /' >&2
    user_status=$(as_user reachability agent status) || fail "the user's agent status"
    [[ "$user_status" == *"on /home/rchtester/.local/state/reachability,"* ]] || fail "the user agent's state directory: $user_status"
    as_user systemctl --user stop reachability-agent.service reachability-agent.socket
    systemd_checked=yes
    in_container systemctl poweroff >/dev/null 2>&1 || true
    wait "$nspawn_pid" 2>/dev/null || true
    nspawn_pid=""
  else
    echo "test-deb: systemd-nspawn could not boot the root: $(tail -3 "$work/boot.log" | tr '\n' ' ')" >&2
    wait "$nspawn_pid" 2>/dev/null || true
    nspawn_pid=""
  fi
fi
if [ "$systemd_checked" = no ]; then
  echo "test-deb: systemd as PID 1 unavailable here: units checked with systemd-analyze verify only" >&2
  mount -t proc proc "$root/proc"
  in_root systemd-analyze verify /lib/systemd/system/reachability-agent.service || fail "system unit"
  in_root systemd-analyze verify /lib/systemd/system/reachability-wait-online.service || fail "wait-online unit"
  umount "$root/proc"
fi

step "apt-get purge"
DEBIAN_FRONTEND=noninteractive in_root apt-get purge -y -q reachability > "$work/purge.log" 2>&1 \
  || { tail -20 "$work/purge.log" >&2; fail "apt-get purge"; }
package_status=$(in_root dpkg-query -W -f='${Status}' reachability 2>/dev/null || true)
[ -z "$package_status" ] || [[ "$package_status" == *not-installed ]] || fail "after purge dpkg says: $package_status"
# Everything named reachability, but the user's own state (users' homes are never touched).
left=$(cd "$root" && find . -xdev -name '*reachability*' -not -path './home/*' -not -path './tmp/*' -not -path './var/cache/apt/*' | sort)
[ -z "$left" ] || fail "left after purge: $left"
step "passed: built, installed with its dependencies from $mirror, ran, $( [ "$systemd_checked" = yes ] && echo "started under systemd (system and user units)" || echo "units verified"), purged clean"
