#!/usr/bin/env bash
# Benchmark: ResumableDownloads (download-bench) vs `curl -o` fetching a file from nginx on
# loopback, same run, same file. Prints wall time and max RSS of each and the ratios.
#
# Usage: bench/download.sh [SIZE_MIB] [RUNS]      (defaults: 1024 MiB, 3 runs, best of)
# Needs: nginx (/usr/sbin/nginx), curl, /usr/bin/time (Debian package `time`).
set -euo pipefail

SIZE_MIB=${1:-1024}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/download-bench.XXXXXX")
NGINX_PID=""
cleanup() {
    # nginx with master_process off ignores SIGTERM; it is our own child, killed by pid.
    if [[ -n "$NGINX_PID" ]]; then kill -9 "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in /usr/sbin/nginx curl /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install nginx-light curl time)" >&2; exit 1; }
done

echo "building download-bench (release)..." >&2
(cd "$ROOT" && swift build -c release --product download-bench >&2)
BENCH="$ROOT/.build/release/download-bench"

mkdir -p "$WORK/www" "$WORK/tmp"
echo "creating a ${SIZE_MIB} MiB random file..." >&2
head -c $((SIZE_MIB * 1048576)) /dev/urandom > "$WORK/www/file.bin"
SHA=$(sha256sum "$WORK/www/file.bin" | cut -d' ' -f1)

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
cat > "$WORK/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
error_log $WORK/error.log warn;
pid $WORK/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $WORK/tmp/body;
    proxy_temp_path $WORK/tmp/proxy;
    fastcgi_temp_path $WORK/tmp/fastcgi;
    uwsgi_temp_path $WORK/tmp/uwsgi;
    scgi_temp_path $WORK/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    server { listen 127.0.0.1:$PORT; root $WORK/www; }
}
CONF
/usr/sbin/nginx -c "$WORK/nginx.conf" -p "$WORK/" -e "$WORK/error.log" &
NGINX_PID=$!
for _ in $(seq 1 500); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.01; done
URL="http://127.0.0.1:$PORT/file.bin"

# measure NAME COMMAND...: prints "seconds kib" of the best run (lowest time; RSS of that run).
measure() {
    local best_time="" best_rss=""
    for run in $(seq 1 "$RUNS"); do
        rm -f "$WORK/out.bin" "$WORK/out.bin.part"
        /usr/bin/time -v -o "$WORK/time.txt" "$@" >/dev/null
        local wall rss seconds
        wall=$(grep 'Elapsed (wall clock)' "$WORK/time.txt" | awk '{print $NF}')
        rss=$(grep 'Maximum resident set size' "$WORK/time.txt" | awk '{print $NF}')
        seconds=$(python3 -c "p='$wall'.split(':'); print(sum(float(x)*60**i for i,x in enumerate(reversed(p))))")
        local got; got=$(sha256sum "$WORK/out.bin" | cut -d' ' -f1)
        [[ "$got" == "$SHA" ]] || { echo "checksum mismatch in run $run of $1" >&2; exit 1; }
        if [[ -z "$best_time" ]] || python3 -c "import sys; sys.exit(0 if $seconds < $best_time else 1)"; then
            best_time=$seconds; best_rss=$rss
        fi
    done
    echo "$best_time $best_rss"
}

read -r CURL_TIME CURL_RSS < <(measure curl -s -o "$WORK/out.bin" "$URL")
read -r OURS_TIME OURS_RSS < <(measure "$BENCH" "$URL" "$WORK/out.bin" --state "$WORK/state")
read -r SHA_TIME SHA_RSS < <(measure "$BENCH" "$URL" "$WORK/out.bin" --state "$WORK/state" --sha256 "$SHA")

python3 - "$SIZE_MIB" "$RUNS" "$CURL_TIME" "$CURL_RSS" "$OURS_TIME" "$OURS_RSS" "$SHA_TIME" "$SHA_RSS" <<'PY'
import sys
size, runs = int(sys.argv[1]), int(sys.argv[2])
ct, cr, ot, orss, st, sr = map(float, sys.argv[3:])
print(f"file: {size} MiB over loopback from nginx, best of {runs}")
print(f"{'':28}{'seconds':>10}{'MiB/s':>10}{'max RSS MiB':>14}")
for name, t, r in [("curl -o", ct, cr), ("ResumableDownloads", ot, orss), ("ResumableDownloads+sha256", st, sr)]:
    print(f"{name:28}{t:10.2f}{size / t:10.0f}{r / 1024:14.1f}")
print(f"time ratio ours/curl: {ot / ct:.2f}x   (with sha256 verify: {st / ct:.2f}x)")
print(f"RSS ratio ours/curl:  {orss / cr:.2f}x")
PY
