#!/usr/bin/env bash
# Builds the Debian package from this tree with dpkg-buildpackage and debian/:
#   .build/debian/reachability_VERSION_ARCH.deb        the package
#   .build/debian/reachability-dbgsym_VERSION_ARCH.deb  its debugging symbols
#   .build/debian/reachability_VERSION_ARCH.{buildinfo,changes}
# Needs the Swift toolchain on PATH and the build packages (./scripts/setup.sh --package).
# Runs lintian on the result unless --no-lintian is given. Prints the .deb's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /opt/swift/usr/bin ] && ! command -v swift >/dev/null 2>&1 && export PATH="/opt/swift/usr/bin:$PATH"

lint=yes
for argument in "$@"; do
  case "$argument" in
    --no-lintian) lint=no ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-deb: unknown option '$argument' (try --help)" >&2; exit 64 ;;
  esac
done
for tool in dpkg-buildpackage dh swift; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "build-deb: '$tool' is missing: run ./scripts/setup.sh --package (and put the Swift toolchain on PATH)" >&2; exit 1; }
done

out="$PWD/.build/debian"
rm -rf "$out"
mkdir -p "$out"
version=$(dpkg-parsechangelog -SVersion)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
stem="$out/reachability_${version}_${arch}"
# The .deb, .buildinfo and .changes go to .build/debian instead of the parent directory.
REACHABILITY_DEB_DIR="$out" dpkg-buildpackage --build=binary --unsigned-source --unsigned-changes \
  --buildinfo-file="$stem.buildinfo" --buildinfo-option="-u$out" \
  --changes-file="$stem.changes" --changes-option="-u$out" >&2

if [ "$lint" = yes ]; then
  command -v lintian >/dev/null 2>&1 || { echo "build-deb: lintian is missing (./scripts/setup.sh --package)" >&2; exit 1; }
  # Errors fail the build; warnings and notes are printed for whoever reads the log.
  lintian --fail-on error --info "$stem.changes" >&2
fi
echo "$stem.deb"
