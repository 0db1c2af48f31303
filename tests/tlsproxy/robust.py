#!/usr/bin/env python3
"""Robustness checks against a running opencf-tlsproxy instance (used by run.sh).

  robust.py fuzz  PORT CAFILE       malformed, truncated and random first flights, and
                                    mutations of a real ClientHello: every connection must be
                                    closed by the proxy (bounded wait), none may hang
  robust.py stall PORT SECONDS      a client that stops mid-handshake is dropped after the
                                    handshake timeout (SECONDS), not before, not much later
  robust.py idle  PORT ECHO_PORT N CAFILE PID
                                    runs an echo server on 127.0.0.1:ECHO_PORT, opens N TLS
                                    connections through the proxy, holds them idle, prints the
                                    proxy's RSS, then checks every one still echoes
  robust.py hold  PORT CAFILE CMD…   a TLS connection is made, CMD runs (a reload), then the
                                    connection must still carry an HTTP request and its answer
Every wait is bounded; exit status 0 on success.
"""
import asyncio
import os
import random
import socket
import ssl
import sys
import time

HOST = "127.0.0.1"


def client_hello(server_name="localhost", tls12=False):
    """A real ClientHello, as Python's OpenSSL writes it."""
    ctx = ssl.create_default_context()
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def closed_by_peer(port, payload, wait=5.0, half_close=False):
    """Sends payload; True when the proxy closes the connection within `wait` seconds."""
    with socket.create_connection((HOST, port), timeout=wait) as s:
        try:
            s.sendall(payload)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            return True  # reset while sending: closed
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                if not s.recv(4096):
                    return True
            except socket.timeout:
                return False
            except OSError:
                return True
        return False


def fuzz(port, cafile):
    rnd = random.Random(1234)
    hello = client_hello()
    hello12 = client_hello(tls12=True)
    cases = [
        ("http request", b"GET / HTTP/1.0\r\n\r\n", False),
        ("zero-length record", bytes([22, 3, 1, 0, 0]), False),
        ("huge record length", bytes([22, 3, 1, 0xFF, 0xFF]) + b"\0" * 64, False),
        ("alert record", bytes([21, 3, 3, 0, 2, 2, 40]), False),
        ("server hello type", bytes([22, 3, 3, 0, 4, 2, 0, 0, 0]), False),
        ("sslv2 hello", bytes([0x80, 0x2E, 1, 3, 1]) + b"\0" * 43, False),
        ("empty hello", bytes([22, 3, 1, 0, 4, 1, 0, 0, 0]), False),
        ("truncated hello, then EOF", hello[: len(hello) // 2], True),
        ("header only, then EOF", hello[:5], True),
        ("hello then garbage", hello + os.urandom(200), True),
    ]
    for n in range(40):
        cases.append((f"random bytes {n}", bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 600))), True))
    # Mutation corpus: byte flips, length fields, truncations, insertions.
    for n in range(300):
        base = bytearray(hello if n % 2 else hello12)
        kind = n % 4
        if kind == 0:
            for _ in range(rnd.randrange(1, 8)):
                base[rnd.randrange(len(base))] = rnd.randrange(256)
        elif kind == 1:
            i = rnd.randrange(5, len(base) - 2)
            base[i : i + 2] = rnd.choice([b"\xff\xff", b"\x00\x00", b"\x00\x01", b"\x7f\xff"])
        elif kind == 2:
            base = base[: rnd.randrange(1, len(base))]
        else:
            i = rnd.randrange(len(base))
            base[i:i] = os.urandom(rnd.randrange(1, 40))
        cases.append((f"mutation {n}", bytes(base), True))
    bad = []
    start = time.monotonic()
    for name, payload, half in cases:
        if not closed_by_peer(port, payload, half_close=half):
            bad.append(name)
    print(f"fuzz: {len(cases)} connections in {time.monotonic() - start:.1f}s, {len(bad)} not closed")
    for b in bad[:10]:
        print(f"  not closed: {b}")
    # The proxy still serves a good handshake.
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection((HOST, port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            print(f"fuzz: good handshake after the corpus: {t.version()}")
    return not bad


def stall(port, seconds):
    hello = client_hello()
    with socket.create_connection((HOST, port), timeout=seconds * 3 + 5) as s:
        s.sendall(hello[:40])
        start = time.monotonic()
        try:
            data = s.recv(100)
        except OSError:
            data = b""
        took = time.monotonic() - start
    print(f"stall: closed after {took:.1f}s (handshake timeout {seconds}s), got {len(data)} bytes")
    return not data and seconds - 0.5 <= took <= seconds + 3


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


async def idle(port, echo_port, n, cafile, pid):
    async def echo(reader, writer):
        try:
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass  # the peer went away, or the test is over
        finally:
            writer.close()

    server = await asyncio.start_server(echo, HOST, echo_port, backlog=4096)
    ctx = ssl.create_default_context(cafile=cafile)
    sem = asyncio.Semaphore(64)
    before = rss_kib(pid)

    async def connect():
        async with sem:
            return await asyncio.wait_for(
                asyncio.open_connection(HOST, port, ssl=ctx, server_hostname="localhost"), 30
            )

    start = time.monotonic()
    conns = await asyncio.gather(*[connect() for _ in range(n)], return_exceptions=True)
    ok = [c for c in conns if not isinstance(c, BaseException)]
    errs = [c for c in conns if isinstance(c, BaseException)]
    took = time.monotonic() - start
    await asyncio.sleep(1.0)
    during = rss_kib(pid)
    print(f"idle: {len(ok)}/{n} TLS connections open in {took:.1f}s; proxy RSS {before} KiB before, "
          f"{during} KiB with them open ({(during - before) / max(1, len(ok)):.1f} KiB each)")
    for e in errs[:3]:
        print(f"  error: {e!r}")

    async def ping(i, rw):
        reader, writer = rw
        msg = f"ping {i}\n".encode()
        writer.write(msg)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(msg)), 30) == msg

    async with asyncio.timeout(120):
        answers = await asyncio.gather(*[ping(i, rw) for i, rw in enumerate(ok)], return_exceptions=True)
    good = sum(1 for a in answers if a is True)
    print(f"idle: {good}/{len(ok)} still echo after idling")
    for _, w in ok:
        w.close()
    server.close()
    return len(ok) == n and good == n


def hold(port, cafile, cmd):
    import subprocess

    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection((HOST, port), timeout=20) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            rc = subprocess.run(cmd, timeout=60).returncode
            time.sleep(0.5)
            t.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
            data = b""
            while chunk := t.recv(4096):
                data += chunk
    status = data.split(b"\r\n", 1)[0].decode(errors="replace")
    print(f"hold: command exit {rc}; request after it answered {status!r}")
    return rc == 0 and b" 200 " in data.split(b"\r\n", 1)[0]


def main():
    cmd = sys.argv[1]
    if cmd == "fuzz":
        ok = fuzz(int(sys.argv[2]), sys.argv[3])
    elif cmd == "stall":
        ok = stall(int(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "idle":
        a = sys.argv
        ok = asyncio.run(idle(int(a[2]), int(a[3]), int(a[4]), a[5], int(a[6])))
    elif cmd == "hold":
        ok = hold(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    else:
        sys.exit(f"unknown command {cmd}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
