#!/usr/bin/env python3
"""A link cut under a URLSession download: ResumableURLSession against Foundation's URLSession,
in one run.

Both run the same program (`urlsession-probe`, Tests/URLSessionProbe; `--foundation` selects
Foundation's own URLSession from FoundationNetworking) inside a client namespace with a /32
address and an onlink default route; the server is nginx with limit_rate on a bridge kept up by
a second veth pair (as in Tests/IntegrationTests/DownloadOutageTests.swift). Once a quarter of
the file has arrived, the client link goes down. Measured: the time from the cut to
didCompleteWithError, its error code, whether it carried resume data; then, with the link back,
what finishing the file costs: for resume data, a new process resumes from it (the seed's
recipe: data written to disk while offline) and the bytes the server sent for it are counted
from nginx's log; without resume data the whole file must be fetched again.

With --data the same cut falls under a data task (`dataTask(with:)`, the body in memory):
measured are the time from the cut to didCompleteWithError and its code (a data task has no
resume data: the request is made again).

Needs root and a built probe (swift build). Namespaces are named rchU<pid>-*, always removed.
Usage: bench/urlsession_outage_bench.py [--probe .build/debug/urlsession-probe] [--size-mib 16]
                                        [--rate 2m] [--timeout 90] [--data]
"""
import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time

from benchnet import Network, Probe

PREFIX = f"rchU{os.getpid()}"
SERVER = "10.88.0.1"


def measure(name, foundation, args, content, digest, workdir):
    network = Network(PREFIX, name[:3], workdir, args.rate)
    try:
        network.serve("file.bin", content)
        saved = f"{workdir}/resume.data"
        common = ["--state-dir", f"{workdir}/session", "--exit-when-done"]
        first = Probe(network, [args.probe] + common + ["--url", f"http://{SERVER}/file.bin", "--save-resume-data", saved]
                      + (["--foundation"] if foundation else []) + (["--data"] if args.data else []))
        quarter = len(content) // 4
        progress = "received" if args.data else "wrote"
        _, reached = first.wait_for(lambda l: l.get("call") == progress and l.get("total", 0) >= quarter, 60)
        if reached is None:
            raise RuntimeError(f"{name}: never reached a quarter of the file")
        cut = time.monotonic()   # before the command: the probe can hear of it before `ip` exits
        network.cut()
        arrival, completed = first.wait_for(lambda l: l.get("call") == "completed", args.timeout)
        first.close()
        row = {"tool": name}
        if completed is None:
            row.update(error=f"none within {args.timeout} s", code="-", resume="-")
        else:
            row.update(error=f"{arrival - cut:.3f} s", code=str(completed.get("code", "none")),
                       resume=f"{completed['resumeData']} B" if completed.get("resumeData") else "nil")
        network.restore()
        if args.data:
            row["finish"] = f"{len(content):,} B (a data task is made again)"
        elif completed is not None and completed.get("resumeData") and os.path.exists(saved):
            before = network.bytes_sent()
            second = Probe(network, [args.probe] + common + ["--resume-data", saved])
            _, done = second.wait_for(lambda l: l.get("call") == "completed", 120)
            _, finished = second.wait_for(lambda l: l.get("call") == "finished", 1)
            _, resumed = second.wait_for(lambda l: l.get("call") == "resumed", 1)
            second.close()
            ok = done is not None and "code" not in done and finished is not None and finished.get("sha256") == digest
            row["finish"] = (f"{network.bytes_sent() - before:,} B (resumed at {resumed['offset']:,})"
                             if ok and resumed else "failed")
        else:
            row["finish"] = f"{len(content):,} B (starts over)"
        return row
    finally:
        network.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", default=".build/debug/urlsession-probe")
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--rate", default="2m")
    parser.add_argument("--timeout", type=int, default=90)
    parser.add_argument("--data", action="store_true", help="a data task instead of a download task")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    args.probe = os.path.abspath(args.probe)
    content = os.urandom(args.size_mib << 20)
    digest = hashlib.sha256(content).hexdigest()
    rows = []
    for name, foundation in (("ResumableURLSession", False), ("Foundation URLSession", True)):
        workdir = tempfile.mkdtemp(prefix="urlsession-bench-")
        try:
            rows.append(measure(name, foundation, args, content, digest, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    kind = "data task" if args.data else "download task"
    print(f"{args.size_mib} MiB at {args.rate}/s ({kind}), client link cut once a quarter has arrived:\n")
    print("| URLSession | cut -> didCompleteWithError | code | resume data | to finish after the link is back |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['tool']} | {row['error']} | {row['code']} | {row['resume']} | {row['finish']} |")


if __name__ == "__main__":
    main()
