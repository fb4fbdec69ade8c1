#!/usr/bin/env python3
"""A real tus 1.0 server for the upload tests: aiohttp-tus (PyPI, installed by scripts/setup.sh)
serving /uploads, storing files in DIRECTORY. Prints "port N" once it listens. Every body byte
it reads is counted in DIRECTORY/_stats.json ({"body_bytes": N}, as upload_server.py), so a test
can tell bytes sent twice (aiohttp-tus keeps nothing of an append that breaks off).

    tus_server.py --directory DIR [--port 0]
"""
import argparse
import asyncio
import json
import os
import socket
from pathlib import Path

from aiohttp import web
from aiohttp_tus import setup_tus


STATS = {"body_bytes": 0}


def counting(stats_file):
    """A middleware that reads request bodies itself, counting each chunk as it arrives (also of a
    body cut off), then hands aiohttp-tus the whole body through aiohttp's read cache."""
    @web.middleware
    async def count_body(request, handler):
        if request.method in ("POST", "PATCH") and request.can_read_body:
            chunks = []
            try:
                while True:
                    chunk = await request.content.readany()
                    if not chunk:
                        break
                    chunks.append(chunk)
                    STATS["body_bytes"] += len(chunk)
            finally:
                with open(stats_file + ".tmp", "w") as out:
                    json.dump(STATS, out)
                os.replace(stats_file + ".tmp", stats_file)
            # aiohttp's request.read() returns this cache when it is set.
            request._read_bytes = b"".join(chunks)
        return await handler(request)
    return count_body


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--directory", required=True)
    arguments = parser.parse_args()
    stats_file = os.path.join(arguments.directory, "_stats.json")
    app = setup_tus(web.Application(client_max_size=1 << 30, middlewares=[counting(stats_file)]), upload_path=Path(arguments.directory),
                    upload_url="/uploads", allow_overwrite_files=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((arguments.address, arguments.port))
    print("port %d" % listener.getsockname()[1], flush=True)
    web.run_app(app, sock=listener, print=None, access_log=None)


if __name__ == "__main__":
    main()
