#!/usr/bin/env python3
"""Control-protocol fuzz against a running agent (issue 29).

Clients, each its own process (the agent caps one program at 8 connections), open connection
after connection of a random kind for DURATION seconds:
  random    random bytes and random lines, read back whatever comes
  truncated a valid request cut short, then closed (or left for the request deadline)
  pipelined a batch of `add` requests with unique client keys written at once, replies read as
            they come; a batch cut short by a reset or a refusal is sent again on a new
            connection with the same keys (the agent must answer with the first jobs)
  neverread `status` requests written and never read, held for a random while
One more process is an honest client: `status` every 50 ms, timed from connect to reply.

Afterwards (the caller checks `queue list` too) it prints one JSON object: every client key with
the job ids it was answered with, how many well-formed pipelined requests went unanswered, and
the honest client's latencies (max, p99, count). Nothing here waits on a fixed sleep for an
event: the pauses pace the load.

Usage: control_fuzz.py SOCKET [--clients 12] [--duration 20] [--seed 29] [--url-base http://127.0.0.1:9/]
"""
import argparse
import json
import os
import random
import socket
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15)
    s.connect(path)
    return s


def request(command, ident, **fields):
    body = {"version": 1, "id": ident, "command": command}
    body.update(fields)
    return json.dumps(body).encode() + b"\n"


def read_replies(sock, wanted, deadline):
    """Reads reply lines until every id in `wanted` is answered, the connection ends or the
    deadline passes; returns {id: reply} and whether the connection ended early."""
    answers, buffer = {}, b""
    while len(answers) < len(wanted) and time.time() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except (socket.timeout, ConnectionResetError, BrokenPipeError, OSError):
            return answers, True
        if not chunk:
            return answers, True
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if reply.get("id") in wanted:
                answers[reply["id"]] = reply
            elif reply.get("id") is None and not reply.get("ok", True):
                # Refused (too many connections) or a deadline: this connection is over.
                return answers, True
    return answers, False


def pipelined(path, rng, name, batch, url_base, keys):
    """A batch of adds; resent with the same keys on a new connection until each is answered."""
    todo = {f"{name}-{batch}-{n}": n for n in range(rng.randint(5, 60))}
    unanswered = 0
    for attempt in range(8):
        if not todo:
            break
        try:
            sock = connect(path)
            ids = {}
            lines = b""
            for key, n in todo.items():
                ident = f"{key}#{attempt}"
                ids[ident] = key
                lines += request("add", ident, url=url_base + key, clientKey=key)
            if rng.random() < 0.2 and attempt == 0:
                # Reset before reading a single reply: the retry must find the same jobs.
                sock.sendall(lines)
                sock.close()
                continue
            sock.sendall(lines)
            answers, _ = read_replies(sock, set(ids), time.time() + 60)
            sock.close()
        except OSError:
            continue
        for ident, reply in answers.items():
            key = ids[ident]
            if reply.get("ok"):
                keys.setdefault(key, set()).add(reply["download"]["id"])
                todo.pop(key, None)
            else:
                keys.setdefault(key + "!error", set()).add(reply.get("error", {}).get("message", "?"))
                todo.pop(key, None)
        if todo:
            time.sleep(0.05 * (attempt + 1))
    unanswered += len(todo)
    return unanswered


def random_bytes(path, rng):
    sock = connect(path)
    try:
        kind = rng.random()
        if kind < 0.4:
            data = rng.randbytes(rng.randint(1, 4096))
        elif kind < 0.8:
            data = b"".join(rng.choice([b"{", b"}", b"[1,2]", b'{"version":1}', b'{"version":1,"command":"nope"}',
                                        b'{"version":1,"command":"add","url":"ftp://x"}', b"\xff\xfe", b"null"])
                            + b"\n" for _ in range(rng.randint(1, 50)))
        else:
            data = b"x" * rng.randint(60000, 70000) + b"\n"   # around the line limit
        sock.sendall(data)
        sock.settimeout(0.5)
        while sock.recv(1 << 16):
            pass
    except OSError:
        pass
    finally:
        sock.close()


def truncated(path, rng):
    sock = connect(path)
    try:
        line = request("status", 1)
        sock.sendall(line[: rng.randint(1, len(line) - 2)])
        if rng.random() < 0.3:
            sock.settimeout(12)
            sock.recv(4096)   # the agent answers at the request deadline and closes
    except OSError:
        pass
    finally:
        sock.close()


def never_read(path, rng, held):
    try:
        sock = connect(path)
        sock.setblocking(False)
        sock.send(request("status", None) * rng.randint(10, 3000))
        held.append((time.time() + rng.uniform(0.5, 12), sock))
    except OSError:
        pass


def client(path, index, duration, seed, url_base, out):
    rng = random.Random(seed * 1000 + index)
    keys, unanswered, batch, held = {}, 0, 0, []
    end = time.time() + duration
    while time.time() < end:
        now = time.time()
        for entry in [e for e in held if e[0] < now]:
            entry[1].close()
            held.remove(entry)
        choice = rng.random()
        try:
            if choice < 0.35:
                unanswered += pipelined(path, rng, f"c{index}", batch, url_base, keys)
                batch += 1
            elif choice < 0.6:
                random_bytes(path, rng)
            elif choice < 0.8:
                truncated(path, rng)
            elif len(held) < 1:
                never_read(path, rng, held)
        except OSError:
            pass
        time.sleep(rng.uniform(0.01, 0.1))
    for _, sock in held:
        sock.close()
    with open(out, "w") as f:
        json.dump({"keys": {k: sorted(v) for k, v in keys.items()}, "unanswered": unanswered}, f)


def honest(path, duration, out):
    latencies, failures = [], []
    end = time.time() + duration
    while time.time() < end:
        started = time.monotonic()
        try:
            sock = connect(path)
            sock.sendall(request("status", 1))
            answers, _ = read_replies(sock, {1}, time.time() + 10)
            sock.close()
            if not answers.get(1, {}).get("ok"):
                failures.append(str(answers))
        except OSError as error:
            failures.append(repr(error))
        latencies.append(time.monotonic() - started)
        time.sleep(0.05)
    with open(out, "w") as f:
        json.dump({"latencies": latencies, "failures": failures[:5], "failureCount": len(failures)}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--url-base", default="http://127.0.0.1:9/")
    parser.add_argument("--scratch", default="/tmp")
    args = parser.parse_args()
    children = []
    outputs = []
    for index in range(args.clients + 1):
        out = os.path.join(args.scratch, f"fuzz-{os.getpid()}-{index}.json")
        outputs.append(out)
        pid = os.fork()
        if pid == 0:
            try:
                if index == args.clients:
                    honest(args.socket, args.duration, out)
                else:
                    client(args.socket, index, args.duration, args.seed, args.url_base, out)
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    keys, unanswered = {}, 0
    for out in outputs[:-1]:
        with open(out) as f:
            result = json.load(f)
        os.unlink(out)
        keys.update(result["keys"])
        unanswered += result["unanswered"]
    with open(outputs[-1]) as f:
        honest_result = json.load(f)
    os.unlink(outputs[-1])
    latencies = sorted(honest_result["latencies"])
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else None
    print(json.dumps({
        "keys": keys,
        "unanswered": unanswered,
        "honest": {"count": len(latencies), "max": latencies[-1] if latencies else None, "p99": p99,
                   "failures": honest_result["failures"], "failureCount": honest_result["failureCount"]},
    }))


if __name__ == "__main__":
    main()
