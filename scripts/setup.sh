#!/usr/bin/env bash
# Installs what reachability needs to build, test and benchmark on Debian/Ubuntu.
# Idempotent and quiet when everything is already there; uses sudo when not root.
set -euo pipefail

packages=(
  pkg-config
  libnl-3-dev libnl-route-3-dev          # CNetlink
  libcurl4-openssl-dev libssl-dev        # CCurl (libcurl + libcrypto for SHA-256)
  iproute2 iptables procps kmod util-linux  # namespaces, cut links, setpriv
  nginx-light openssl                    # integration tests start their own nginx (TLS too)
  squid                                  # the site-cache tests (and bench/fleet_bench.py) start their own squid
  python3                                # holds tun devices open in the VPN test
  python3-prometheus-client              # the real OpenMetrics/Prometheus parser the metrics tests use
  libsystemd-dev                         # CSystemdBus (sd-bus headers; libsystemd0 is loaded at run time)
  dbus-daemon python3-dbusmock python3-dbus  # a private system bus with mocked NetworkManager/ModemManager
  python3-gi gir1.2-glib-2.0             # GLib's Gio.NetworkMonitor, the peer the NetworkManager tests agree with
  systemd                                # systemd-socket-activate (the agent's socket activation test)
  python3-pip                            # installs aiohttp-tus below (PyPI only)
)
for option in "$@"; do
  case "$option" in
    --bench) packages+=(curl wget aria2 time valgrind) ;;  # peers measured by bench/; callgrind for bench/hot_text.py
    --package) packages+=(dpkg-dev debhelper lintian debootstrap systemd-container) ;;  # scripts/build-deb.sh, scripts/test-deb.sh
    *) echo "setup: unknown option '$option' (--bench, --package)" >&2; exit 64 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# aiohttp-tus is on PyPI only: the real tus 1.0 server the upload tests run (tuspy, the tus
# client bench/upload_bench.py measures against, with --bench). PIP_BREAK_SYSTEM_PACKAGES lets
# pip install beside Debian's packages (PEP 668), PIP_ROOT_USER_ACTION keeps it quiet as root;
# older pips ignore both.
python_packages=(aiohttp_tus:aiohttp-tus)
for option in "$@"; do [ "$option" = --bench ] && python_packages+=(tusclient:tuspy); done
for entry in "${python_packages[@]}"; do
  module=${entry%%:*} package=${entry#*:}
  if ! python3 -c "import $module" >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "setup: installing $package (pip)" >&2
    $sudo env PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "$package" >/dev/null
  fi
done

# The Debian nginx package starts a system nginx on port 80; tests start their own and do not
# need it, so stop it when this script is what installed it.
if [[ " ${missing[*]} " == *" nginx-light "* ]] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now nginx >/dev/null 2>&1 || true
fi
# The same for squid: the site-cache tests and bench/fleet_bench.py start their own.
if [[ " ${missing[*]} " == *" squid "* ]] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now squid >/dev/null 2>&1 || true
fi

# `swift run` and `swift test` after this script need swift on PATH in the caller's shell, which a
# script cannot change: a toolchain found elsewhere is named, with the line that fixes it.
if ! command -v swift >/dev/null 2>&1; then
  for candidate in /opt/swift/usr/bin /usr/share/swift/usr/bin "$HOME"/.local/share/swiftly/bin; do
    if [ -x "$candidate/swift" ]; then
      echo "setup: the Swift toolchain is in $candidate but not on PATH, so 'swift run' and 'swift test' would fail." >&2
      echo "setup: run   export PATH=\"$candidate:\$PATH\"   (add it to ~/.profile to keep it), then this command again." >&2
      exit 1
    fi
  done
  echo "setup: the Swift toolchain (6.0 or newer) is not on PATH; install it from swift.org and put its usr/bin on PATH" >&2
  exit 1
fi
