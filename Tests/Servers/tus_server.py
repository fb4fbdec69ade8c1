#!/usr/bin/env python3
"""A real tus 1.0 server for the upload tests: aiohttp-tus (PyPI, installed by scripts/setup.sh)
serving /uploads, storing files in DIRECTORY. Prints "port N" once it listens.

    tus_server.py --directory DIR [--port 0]
"""
import argparse
import asyncio
import socket
from pathlib import Path

from aiohttp import web
from aiohttp_tus import setup_tus


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--directory", required=True)
    arguments = parser.parse_args()
    app = setup_tus(web.Application(client_max_size=1 << 30), upload_path=Path(arguments.directory),
                    upload_url="/uploads", allow_overwrite_files=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((arguments.address, arguments.port))
    print("port %d" % listener.getsockname()[1], flush=True)
    web.run_app(app, sock=listener, print=None, access_log=None)


if __name__ == "__main__":
    main()
