#!/usr/bin/env python3
"""An HTTP server for the upload and exchange tests (and bench/upload_bench.py).

Speaks draft-ietf-httpbis-resumable-upload-05 (Upload-Draft-Interop-Version 6) under /ietf/,
plain PUT/POST under /plain/, and echoes any request under /echo. Every body byte it reads is
counted (GET /_stats), so a test can tell bytes sent twice; --lie makes it misreport offsets;
--reset-after N resets the first connection that reads past body byte N of an upload (once), so
a client on loopback, its path up, has to ask the offset (and meets the lie); --fail-after N
answers the first creation request that reads past body byte N with 503 (once), keeping what it
read, as a server that fails mid-upload but holds the upload; --busy-after-reset answers every
request after that reset with 503 (counted in the stats' "busy_answers"), as a server that stays
overloaded, so an upload fails until it gives up.

    upload_server.py --port 0 --directory DIR [--lie MODE] [--reset-after N [--busy-after-reset]]
                     [--fail-after N] [--rate BPS]

Prints "port N" on stdout once it listens. Files land in DIR/<upload id>.
"""
import argparse
import hashlib
import json
import os
import socket
import struct
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {"body_bytes": 0, "requests": [], "busy_answers": 0}
UPLOADS = {}  # id -> {"offset": int, "complete": bool, "length": int or None}


STATS_FILE = None


def record(method, path, count, busy=False):
    with LOCK:
        STATS["body_bytes"] += count
        STATS["requests"].append({"method": method, "path": path, "bytes": count})
        if busy:
            STATS["busy_answers"] += 1
        if STATS_FILE:
            # Also on disk, so a test reads it without an HTTP client of its own.
            with open(STATS_FILE + ".tmp", "w") as out:
                json.dump(STATS, out)
            os.replace(STATS_FILE + ".tmp", STATS_FILE)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    directory = "."
    lie = None
    rate = 0  # body bytes per second read, 0 for as fast as it comes
    reset_after = None  # an upload's body byte past which its connection is reset, once
    fail_after = None  # a creation's body byte past which it is answered 503, once
    busy_after_reset = False  # 503 to every request once --reset-after has reset its connection
    has_reset = False

    def log_message(self, *args):
        pass

    def parse_request(self):
        """Reads the request's head; once the server is busy, answers 503 without reading any
        body (the connection closes after it) and skips the method's handler."""
        if not super().parse_request():
            return False
        if not (Handler.busy_after_reset and Handler.has_reset):
            return True
        record(self.command, self.path, 0, busy=True)
        self.close_connection = True
        self.reply(503, [("Connection", "close")])
        return False

    # --- helpers ---
    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def interim_104(self, location):
        # http.server has no interim responses: written raw before the body is read.
        self.wfile.write(("HTTP/1.1 104 Upload Resumption Supported\r\n"
                          "Upload-Draft-Interop-Version: 6\r\nLocation: %s\r\n\r\n" % location).encode())
        self.wfile.flush()

    def read_body_into(self, path, offset, state=None):
        """Reads Content-Length bytes, appending each chunk to the file at once; returns the count.
        With an upload's `state`, its offset follows each chunk, and the read stops when a newer
        request for the same upload takes over (as tusd does), so a HEAD sees a settled offset."""
        length = int(self.headers.get("Content-Length", "0"))
        generation = None
        if state is not None:
            with LOCK:
                state["generation"] = state.get("generation", 0) + 1
                generation = state["generation"]
                state["readers"] = state.get("readers", 0) + 1
                state.setdefault("sockets", set()).add(self.connection)
        got = 0
        started = time.monotonic()
        try:
            got = self.copy_body(path, offset, length, state, generation, started)
        except OSError:
            # The connection broke (reset, killed): what was written stays, as a real server's.
            self.close_connection = True
            got = -1
        finally:
            if state is not None:
                with LOCK:
                    state["readers"] -= 1
                    state["sockets"].discard(self.connection)
        if got < 0:
            with LOCK:
                got = (state["offset"] - offset) if state is not None else 0
        record(self.command, self.path, got)
        return got, length

    def copy_body(self, path, offset, length, state, generation, started):
        got = 0
        with open(path, "r+b" if os.path.exists(path) else "wb") as out:
            out.seek(offset)
            out.truncate()
            while got < length:
                chunk = self.rfile.read1(min(65536, length - got)) if hasattr(self.rfile, "read1") else self.rfile.read(min(65536, length - got))
                if not chunk:
                    break
                if state is not None and state.get("generation") != generation:
                    break
                out.write(chunk)
                out.flush()
                got += len(chunk)
                if state is not None:
                    with LOCK:
                        state["offset"] = offset + got
                    if Handler.reset_after is not None and offset + got >= Handler.reset_after:
                        Handler.reset_after = None
                        Handler.has_reset = True
                        # SO_LINGER 0: the close sends RST, as a server that crashed or a
                        # middlebox would; the client sees its connection reset.
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        os.close(self.connection.detach())
                        raise OSError("reset by --reset-after")
                    if Handler.fail_after is not None and self.command == "POST" and offset + got >= Handler.fail_after:
                        Handler.fail_after = None
                        self.failed_midway = True
                        break
                if self.rate:
                    # Reading slowly lets TCP's window slow the client: an upload lasts long
                    # enough for a test to cut it in the middle.
                    due = started + got / self.rate
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
        return got

    def take_over(self, state):
        """A new request for an upload stops the one still reading it, and waits for it.

        A reader blocked on a connection whose client is gone (its reset lost with the link) would
        hold the offset until TCP gave up: its socket is shut down, as tusd v2 asks the lock's
        holder to release it, so the new request sees the settled offset at once."""
        with LOCK:
            state["generation"] = state.get("generation", 0) + 1
            stale = list(state.get("sockets", ()))
        for connection in stale:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while state.get("readers", 0) > 0 and time.monotonic() < deadline:
            time.sleep(0.005)

    def file_path(self, upload_id):
        return os.path.join(self.directory, upload_id)

    # --- stats and echo ---
    def do_GET(self):
        if self.path == "/_stats":
            with LOCK:
                body = json.dumps(STATS).encode()
            return self.reply(200, [("Content-Type", "application/json")], body)
        if self.path.startswith("/echo"):
            return self.echo()
        if self.path == "/hold":
            # Accepts and never answers (a request the path change must end).
            record(self.command, self.path, 0)
            time.sleep(60)
            return self.reply(204)
        if self.path.startswith("/files/"):
            name = os.path.basename(self.path)
            try:
                with open(self.file_path(name), "rb") as f:
                    data = f.read()
            except OSError:
                return self.reply(404)
            return self.reply(200, [], data)
        self.reply(404)

    def echo(self):
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length) if length else b""
        record(self.command, self.path, len(data))
        body = json.dumps({"method": self.command, "path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "length": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode()
        self.reply(200, [("Content-Type", "application/json"), ("X-Echo", "yes")], body)

    # --- IETF draft-05 ---
    def ietf_state(self):
        upload_id = self.path.rsplit("/", 1)[-1]
        with LOCK:
            return upload_id, UPLOADS.get(upload_id)

    def offset_fields(self, state):
        offset = state["offset"]
        if self.lie == "past-end" and not state["complete"]:
            offset = state["offset"] + 4096
        elif self.lie == "beyond":
            offset = 1 << 40
        elif self.lie == "forget" and offset > 0:
            # acknowledges what it had, then truncates: the next append does not match
            pass
        fields = [("Upload-Offset", str(offset)), ("Upload-Complete", "?1" if state["complete"] else "?0"),
                  ("Upload-Draft-Interop-Version", "6"), ("Cache-Control", "no-store")]
        if state.get("length") is not None:
            fields.append(("Upload-Length", str(state["length"])))
        return fields

    def do_POST(self):
        if self.path.startswith("/echo"):
            return self.echo()
        if self.path.startswith("/plain/"):
            return self.plain()
        if self.path.startswith("/ietf"):
            if self.headers.get("Upload-Draft-Interop-Version") != "6":
                return self.plain()
            upload_id = uuid.uuid4().hex
            complete = self.headers.get("Upload-Complete") == "?1"
            with LOCK:
                UPLOADS[upload_id] = {"offset": 0, "complete": False, "length": None}
            self.interim_104("/ietf/" + upload_id)
            state = UPLOADS[upload_id]
            got, length = self.read_body_into(self.file_path(upload_id), 0, state)
            with LOCK:
                state["complete"] = complete and got == length
            if getattr(self, "failed_midway", False):
                return self.fail_midway(state)
            if got < length:
                self.close_connection = True
                return
            return self.reply(201 if state["complete"] else 201,
                              [("Location", "/ietf/" + upload_id)] + self.offset_fields(state))
        self.reply(404)

    def fail_midway(self, state):
        """503 with what it holds, the rest of the body left unread: the answer goes out, then the
        write side closes and the unread body is drained (not stored, not counted), so the close
        does not reset the connection before the client reads the answer."""
        self.close_connection = True
        self.reply(503, self.offset_fields(state))
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(5)
            while self.connection.recv(65536):
                pass
        except OSError:
            pass

    def do_HEAD(self):
        if self.path.startswith("/ietf/"):
            upload_id, state = self.ietf_state()
            if state is None:
                return self.reply(404)
            self.take_over(state)
            return self.reply(204, self.offset_fields(state))
        self.reply(404)

    def do_PATCH(self):
        if self.path.startswith("/echo"):
            return self.echo()
        if not self.path.startswith("/ietf/"):
            return self.reply(404)
        upload_id, state = self.ietf_state()
        if state is None:
            return self.reply(404)
        if self.headers.get("Content-Type") != "application/partial-upload":
            return self.reply(415)
        offset = int(self.headers.get("Upload-Offset", "-1"))
        self.take_over(state)
        if self.lie == "forget" and state["offset"] > 0 and not state.get("forgotten"):
            with LOCK:
                state["forgotten"] = True
                state["offset"] = max(0, state["offset"] - 65536)
        if state["complete"] or offset != state["offset"]:
            length = int(self.headers.get("Content-Length", "0"))
            self.close_connection = length > 0
            return self.reply(409, self.offset_fields(state))
        complete = self.headers.get("Upload-Complete") == "?1"
        got, length = self.read_body_into(self.file_path(upload_id), offset, state)
        with LOCK:
            state["complete"] = complete and got == length
        if got < length:
            self.close_connection = True
            return
        fields = self.offset_fields(state)
        if self.lie == "backwards":
            # Acknowledges less than the offset this append started from.
            fields = [(n, str(offset - 1) if n == "Upload-Offset" else v) for n, v in fields]
        self.reply(201 if state["complete"] else 204, fields, b"stored\n" if state["complete"] else b"")

    def do_DELETE(self):
        if self.path.startswith("/echo"):
            return self.echo()
        self.reply(404)

    def do_OPTIONS(self):
        if self.path.startswith("/echo"):
            return self.echo()
        self.reply(404)

    # --- plain PUT/POST ---
    def plain(self):
        name = os.path.basename(self.path) or "plain"
        got, length = self.read_body_into(self.file_path(name), 0)
        if got < length:
            self.close_connection = True
            return
        self.reply(201, [("Content-Type", "text/plain")], b"stored %d bytes\n" % got)

    def do_PUT(self):
        if self.path.startswith("/echo"):
            return self.echo()
        return self.plain()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--directory", required=True)
    parser.add_argument("--rate", type=int, default=0)
    parser.add_argument("--lie", choices=["past-end", "backwards", "beyond", "forget"])
    parser.add_argument("--reset-after", type=int)
    parser.add_argument("--fail-after", type=int)
    parser.add_argument("--busy-after-reset", action="store_true")
    arguments = parser.parse_args()
    Handler.directory = arguments.directory
    global STATS_FILE
    STATS_FILE = os.path.join(arguments.directory, "_stats.json")
    Handler.lie = arguments.lie
    Handler.rate = arguments.rate
    Handler.reset_after = arguments.reset_after
    Handler.fail_after = arguments.fail_after
    Handler.busy_after_reset = arguments.busy_after_reset
    server = ThreadingHTTPServer((arguments.address, arguments.port), Handler)
    server.daemon_threads = True
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
