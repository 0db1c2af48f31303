#!/usr/bin/env python3
"""Robustness checks against a running opencf-tlsproxy instance (used by run.sh).

  robust.py fuzz  PORT CAFILE       malformed, truncated and random first flights, and
                                    mutations of a real ClientHello: every connection must be
                                    closed by the proxy (bounded wait), none may hang
  robust.py stall PORT SECONDS      a client that stops mid-handshake is dropped after the
                                    handshake timeout (SECONDS), not before, not much later
  robust.py idle  PORT N CAFILE PID [CMD…]
                                    opens N TLS connections through the proxy (to an echo
                                    service), holds them idle, prints the proxy's RSS (PID and
                                    its worker processes, summed), checks
                                    that a new connection and CMD (a request elsewhere) work
                                    meanwhile, that every one still echoes, and that a new
                                    connection works after they are closed
  robust.py echo  PORT              an echo service (a line `die` resets that connection);
                                    ends with its parent
  robust.py backend PORT BACK_PORT OTHER_PORT CAFILE
                                    the application behind PORT is down, resets a connection,
                                    is killed: that client is closed cleanly and quickly, the
                                    others keep working
  robust.py hold  PORT CAFILE CMD…   a TLS connection is made, CMD runs (a reload), then the
                                    connection must still carry an HTTP request and its answer
  robust.py proxyproto PORT CAFILE BACK_PORT v1|v2 [OFFER WANT]
                                    the application on BACK_PORT (served here) must receive a
                                    PROXY protocol header of that version first, naming this
                                    client's address and port and the instance's, then the
                                    client's bytes; a v2 header must also carry the TLS fields
                                    (the server name, PP2_TYPE_SSL with the version and the
                                    suite, and the application protocol). With OFFER (ALPN
                                    names, comma-separated) the client offers them, and the
                                    protocol chosen, seen by the client and in the header,
                                    must be WANT
  robust.py clientcert PORT CAFILE BACK_PORT CERT KEY CN RESUMES [CMD…]
                                    an instance with client certificates and a PROXY v2 header
                                    in front of BACK_PORT (served here): a connection with
                                    CERT/KEY (or none, "-") must reach the application with
                                    PP2_TYPE_SSL's flags, verify field and common name CN saying
                                    so; then CMD runs (a reload), and a connection resuming the
                                    first one's session must be resumed (RESUMES "yes", the
                                    header then saying the certificate came with the session),
                                    or ("refused") must not resume and be refused, within 5 s
  robust.py drain PORT CAFILE PID SECONDS close|hold
                                    a graceful stop (SIGQUIT to PID, a daemon in front of the
                                    echo service with drain_timeout = SECONDS): the port closes
                                    at once while two open connections keep echoing; one is
                                    closed, then the other ("close": the daemon must exit within
                                    1 s of it) or kept ("hold": the daemon must exit about
                                    SECONDS after the signal, ending it)
  robust.py bighello PORT          large ClientHellos (a padding extension, or one byte per
                                    record): one whose records hold up to 64 KiB is answered
                                    with a ServerHello, one beyond that is closed
  robust.py reneg PORT CAFILE       a TLS 1.2 client in front of the echo service asks to
                                    renegotiate (s_client's R): the proxy's no_renegotiation
                                    alert must come at once, not with the application's next
                                    bytes
  robust.py idletimeout PORT CAFILE SECONDS
                                    with idle_timeout = SECONDS in front of the echo service: an
                                    idle connection is closed cleanly after SECONDS (not much
                                    before, not much after); one that sends a byte every
                                    SECONDS/2 stays open past it
  robust.py ends PORT CAFILE BACK_PORT
                                    the ends of a relayed connection, with an application
                                    served here on BACK_PORT: a client that half-closes with a
                                    TCP FIN and no close_notify gets the application's whole
                                    answer to its request, then close_notify; an application
                                    that resets its connection after part of an answer ends the
                                    client's connection without close_notify (the client can
                                    tell the answer was cut short)
Every wait is bounded; exit status 0 on success.
"""
import asyncio
import os
import random
import socket
import ssl
import struct
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


def procs(pid):
    """PID and its child processes (the workers of a supervisor)."""
    out = [pid]
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def one_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid):
    """VmRSS of PID and its workers, summed."""
    return sum(one_rss_kib(p) for p in procs(pid))


def per_process(pid):
    """`PID: RSS KiB, descriptors` for the supervisor and each worker."""
    parts = []
    for p in procs(pid):
        try:
            fds = len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            fds = -1
        parts.append(f"{p}: {one_rss_kib(p)} KiB, {fds} fds")
    return "; ".join(parts)


async def echo_server(port):
    """An echo service; a connection that sends a line `die` is reset (SO_LINGER 0), as when the
    application crashes in the middle of a connection."""

    async def echo(reader, writer):
        try:
            while data := await reader.read(4096):
                if b"die\n" in data:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass  # the peer went away, or the test is over
        finally:
            writer.close()

    server = await asyncio.start_server(echo, HOST, port, backlog=4096)
    # Ends with its parent (the test), whatever happens to it.
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(0.5)
    server.close()


def start_echo(port):
    import subprocess

    p = subprocess.Popen([sys.executable, __file__, "echo", str(port)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"echo server on {port} did not start")


async def idle(port, n, cafile, pid, during_cmd):
    """N idle connections through the proxy to the echo service (run by the caller, in another
    process: with 10,000 connections each side needs 10,000 descriptors)."""
    ctx = ssl.create_default_context(cafile=cafile)
    sem = asyncio.Semaphore(64)
    before = rss_kib(pid)

    async def connect():
        async with sem:
            return await asyncio.wait_for(
                asyncio.open_connection(HOST, port, ssl=ctx, server_hostname="localhost"), 30
            )

    async def ping(i, rw):
        reader, writer = rw
        msg = f"ping {i}\n".encode()
        writer.write(msg)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(msg)), 30) == msg

    start = time.monotonic()
    conns = await asyncio.gather(*[connect() for _ in range(n)], return_exceptions=True)
    ok = [c for c in conns if not isinstance(c, BaseException)]
    errs = [c for c in conns if isinstance(c, BaseException)]
    took = time.monotonic() - start
    await asyncio.sleep(2.0)
    during = rss_kib(pid)
    print(f"idle: {len(ok)}/{n} TLS connections open in {took:.1f}s; proxy RSS {before} KiB before, "
          f"{during} KiB with them open ({(during - before) / max(1, len(ok)):.1f} KiB each; "
          f"{len(procs(pid))} process(es), summed)")
    print(f"idle: per process: {per_process(pid)}")
    for e in errs[:3]:
        print(f"  error: {e!r}")
    async def one_more(when):
        try:
            extra = await connect()
            good = await ping(-1, extra)
            extra[1].close()
            return good
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
            print(f"  new connection {when}: {e!r}")
            return False

    # While they are open: a new connection through the same instance, and the caller's request.
    fresh_ok = await one_more(f"while {len(ok)} are open")
    cmd_ok = True
    if during_cmd:
        proc = await asyncio.create_subprocess_exec(*during_cmd)
        try:
            cmd_ok = await asyncio.wait_for(proc.wait(), 30) == 0
        except asyncio.TimeoutError:
            proc.kill()
            cmd_ok = False
    print(f"idle: while open: a new connection echoes: {fresh_ok}; request through another "
          f"instance: {cmd_ok}")
    # Every idle connection is still open and relaying.
    async with asyncio.timeout(120):
        answers = await asyncio.gather(*[ping(i, rw) for i, rw in enumerate(ok)], return_exceptions=True)
    good = sum(1 for a in answers if a is True)
    print(f"idle: {good}/{len(ok)} still echo after idling; proxy RSS {rss_kib(pid)} KiB")
    for _, w in ok:
        w.close()
    await asyncio.sleep(1.0)
    after_ok = await one_more("after closing them")
    print(f"idle: closed; proxy RSS {rss_kib(pid)} KiB; a new connection echoes: {after_ok}")
    return len(ok) == n and good == n and fresh_ok and cmd_ok and after_ok


def tls_to(port, cafile):
    """A TLS connection to the proxy on `port`, trusting `cafile`, ragged EOFs reported."""
    ctx = ssl.create_default_context(cafile=cafile)
    s = socket.create_connection((HOST, port), timeout=10)
    return ctx.wrap_socket(s, server_hostname="localhost", suppress_ragged_eofs=False)


def echoes(t, msg=b"ping\n"):
    """Whether `msg` comes back whole on `t` (an echo service behind the proxy)."""
    try:
        t.settimeout(10)
        t.sendall(msg)
        got = b""
        while len(got) < len(msg):
            chunk = t.recv(len(msg) - len(got))
            if not chunk:
                return False
            got += chunk
        return got == msg
    except (OSError, ssl.SSLError):
        return False


def end_of(t, wait=5.0):
    """How the proxy ended a TLS connection: `close_notify`, `FIN` (TCP close without
    close_notify), `reset`, `hang` (nothing within `wait` seconds), or `data`."""
    start = time.monotonic()
    t.settimeout(wait)
    try:
        while True:
            data = t.recv(4096)
            if not data:
                kind = "close_notify"
                break
            if time.monotonic() - start > wait:
                kind = "data"
                break
    except ssl.SSLEOFError:
        kind = "FIN"
    except (ConnectionResetError, BrokenPipeError):
        kind = "reset"
    except socket.timeout:
        kind = "hang"
    except (OSError, ssl.SSLError) as e:
        kind = f"error {e!r}"
    return kind, time.monotonic() - start


def backend(port, back_port, other_port, cafile):
    """The application behind the instance on PORT (its clear-text port BACK_PORT) is down, dies
    mid-connection, or resets one connection: that client's TLS connection ends cleanly
    (close_notify, or a TCP close), quickly; the other clients, and the instance on OTHER_PORT
    (another application), keep working."""
    clean = ("close_notify", "FIN")
    results = []

    def tls(p):
        return tls_to(p, cafile)

    def expect(name, ok, detail=""):
        results.append(ok)
        print(f"backend: {'ok ' if ok else 'BAD'} {name}{': ' + detail if detail else ''}")

    def ended(name, t):
        kind, took = end_of(t)
        expect(name, kind in clean and took < 3, f"{kind} after {took:.2f}s")
        t.close()

    # 1. Nothing listening on the clear-text port.
    ended("application port closed: handshake, then the proxy closes", tls(port))
    t = tls(port)
    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
    ended("application port closed: request sent at once, then the proxy closes", t)
    # 2. The application resets one connection: only that client is closed.
    echo = start_echo(back_port)
    try:
        a, b, c, d = tls(port), tls(port), tls(port), tls(other_port)
        expect("four connections relaying (three to the application, one elsewhere)",
               all(echoes(x) for x in (a, b, c, d)))
        a.sendall(b"die\n")
        ended("the application resets one connection: that client", a)
        expect("the other clients still relay", all(echoes(x) for x in (b, c, d)))
        # 3. The application dies (SIGKILL) with connections open.
        echo.kill()
        echo.wait(10)
        ended("the application is killed: a client of it", b)
        ended("the application is killed: another client of it", c)
        expect("a client of another application still relays", echoes(d))
        d.close()
        e = tls(other_port)
        expect("a new connection to another instance relays", echoes(e))
        e.close()
        ended("a new connection to the dead application's instance: closed", tls(port))
    finally:
        echo.kill()
        echo.wait(10)
    return all(results)


def fin_client(port, cafile, request, wait=10.0):
    """A TLS client over a memory BIO: sends `request`, then a TCP FIN without close_notify,
    and reads to the end. Returns the bytes of application data received and how the proxy
    ended the connection (`close_notify`, `FIN`, `reset`, `hang`)."""
    ctx = ssl.create_default_context(cafile=cafile)
    sock = socket.create_connection((HOST, port), timeout=wait)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    t = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")

    def flush():
        if data := outgoing.read():
            sock.sendall(data)

    try:
        while True:
            try:
                t.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                data = sock.recv(65536)
                if not data:
                    return 0, "FIN"
                incoming.write(data)
        flush()
        t.write(request)
        flush()
        sock.shutdown(socket.SHUT_WR)
        got = 0
        while True:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                return got, "hang"
            except ConnectionResetError:
                return got, "reset"
            if data:
                incoming.write(data)
            else:
                incoming.write_eof()
            try:
                while chunk := t.read(65536):
                    got += len(chunk)
                return got, "close_notify"
            except ssl.SSLWantReadError:
                if not data:
                    return got, "FIN"
            except ssl.SSLZeroReturnError:
                return got, "close_notify"
            except ssl.SSLEOFError:
                return got, "FIN"
    finally:
        sock.close()


def ends(port, cafile, back_port):
    answer = 300_000
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((HOST, back_port))
    srv.listen(4)
    srv.settimeout(20)
    seen = {}

    def app():
        # The first connection: the request to its end (the client's half-close), then the
        # whole answer and a normal close.
        c, _ = srv.accept()
        request = b""
        while chunk := c.recv(65536):
            request += chunk
        seen["request"] = len(request)
        c.sendall(b"A" * answer)
        c.close()
        # The second: part of an answer, then a reset.
        c, _ = srv.accept()
        c.recv(65536)
        c.sendall(b"B" * 100_000)
        time.sleep(0.3)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    import threading

    threading.Thread(target=app, daemon=True).start()
    results = []
    got, how = fin_client(port, cafile, b"REQUEST " * 100)
    ok = got == answer and how == "close_notify" and seen.get("request") == 800
    results.append(ok)
    print(f"ends: {'ok ' if ok else 'BAD'} a client's FIN without close_notify: the application "
          f"got {seen.get('request')} of 800 request bytes then the end; the client got {got} of "
          f"{answer} answer bytes, then {how}")
    t = tls_to(port, cafile)
    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
    how, _ = end_of(t, wait=10.0)
    t.close()
    ok = how in ("FIN", "reset")
    results.append(ok)
    print(f"ends: {'ok ' if ok else 'BAD'} the application resets in the middle of its answer: "
          f"the client's connection ends with {how} (not close_notify)")
    srv.close()
    return all(results)


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


V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def read_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_proxy_header_v1(conn):
    """The v1 line an application behind the proxy reads first: (src, sport, dst, dport)."""
    line = b""
    while not line.endswith(b"\r\n"):
        line += read_exactly(conn, 1)
        if len(line) > 107:  # the specification's longest line
            raise ValueError(f"v1 line too long: {line!r}")
    parts = line[:-2].decode().split(" ")
    if parts[0] != "PROXY" or parts[1] not in ("TCP4", "TCP6") or len(parts) != 6:
        raise ValueError(f"bad v1 line {line!r}")
    return parts[2], int(parts[4]), parts[3], int(parts[5])


def read_proxy_header_v2_tlvs(conn):
    """A v2 header: ((src, sport, dst, dport), {type: value}) with PP2_TYPE_SSL (0x20) split
    into its client flags, verify field and sub-fields ({"client", "verify", 0x21: …})."""
    head = read_exactly(conn, 16)
    if head[:12] != V2_SIGNATURE or head[12] != 0x21:
        raise ValueError(f"bad v2 header {head!r}")
    fam, length = head[13], struct.unpack("!H", head[14:16])[0]
    body = read_exactly(conn, length)
    if fam == 0x11 and length >= 12:
        af, n = socket.AF_INET, 4
    elif fam == 0x21 and length >= 36:
        af, n = socket.AF_INET6, 16
    else:
        raise ValueError(f"unexpected v2 family {fam:#x}, length {length}")
    src, dst = socket.inet_ntop(af, body[0:n]), socket.inet_ntop(af, body[n:2 * n])
    sport, dport = struct.unpack("!HH", body[2 * n:2 * n + 4])

    def tlvs(b):
        out, i = {}, 0
        while i < len(b):
            if i + 3 > len(b):
                raise ValueError(f"truncated TLV at {i}: {b!r}")
            t, ln = b[i], struct.unpack("!H", b[i + 1:i + 3])[0]
            if i + 3 + ln > len(b):
                raise ValueError(f"TLV {t:#x} overruns the header")
            if t in out:
                raise ValueError(f"TLV {t:#x} twice")
            out[t] = b[i + 3:i + 3 + ln]
            i += 3 + ln
        return out

    fields = tlvs(body[2 * n + 4:])
    if 0x20 in fields:
        ssl_v = fields[0x20]
        sub = tlvs(ssl_v[5:])
        sub["client"] = ssl_v[0]
        sub["verify"] = struct.unpack("!I", ssl_v[1:5])[0]
        fields[0x20] = sub
    return (src, sport, dst, dport), fields


def answer_one(conn, version):
    """The application's side of one relayed connection: reads the PROXY header of `version`
    and the client's 6 bytes, answers `seen`. Returns what it read (`header`, with `tlvs` for
    v2, and `then`), or `error`."""
    got = {}
    with conn:
        try:
            conn.settimeout(10)
            if version == "v2":
                got["header"], got["tlvs"] = read_proxy_header_v2_tlvs(conn)
            else:
                got["header"] = read_proxy_header_v1(conn)
            got["then"] = read_exactly(conn, 6)
            conn.sendall(b"seen\n")
        except Exception as e:  # reported by the caller
            got["error"] = repr(e)
    return got


def proxyproto(port, cafile, back_port, version, offer=None, want_alpn=None):
    """The application behind PORT gets the PROXY header first, with this client's address
    (and, in version 2, what the handshake settled)."""
    import threading

    seen = {}
    srv = socket.create_server((HOST, back_port))
    srv.settimeout(20)

    def app():
        try:
            conn, _ = srv.accept()
        except OSError as e:  # reported below
            seen["error"] = repr(e)
            return
        seen.update(answer_one(conn, version))

    t = threading.Thread(target=app, daemon=True)
    t.start()
    ctx = ssl.create_default_context(cafile=cafile)
    if offer:
        ctx.set_alpn_protocols(offer.split(","))
    ok = False
    try:
        with socket.create_connection((HOST, port), timeout=10) as s:
            mine = s.getsockname()[:2]
            with ctx.wrap_socket(s, server_hostname="localhost") as tls:
                chosen = tls.selected_alpn_protocol()
                tls_version, suite = tls.version(), tls.cipher()[0]
                tls.sendall(b"hello\n")
                answer = tls.recv(64)
        t.join(15)
        want = (mine[0], mine[1], HOST, port)
        got = seen.get("header")
        ok = got == want and seen.get("then") == b"hello\n" and answer == b"seen\n"
        print(f"proxyproto {version}: application saw {got} then {seen.get('then')!r} "
              f"(client {want}){' error ' + seen['error'] if 'error' in seen else ''}")
        ok = ok and chosen == want_alpn
        if version == "v2":
            f = seen.get("tlvs", {})
            ssl_f = f.get(0x20, {})
            alpn = f.get(0x01)
            print(f"proxyproto v2 fields: ALPN {alpn!r} (the client got {chosen!r}), "
                  f"authority {f.get(0x02)!r}, SSL client flags {ssl_f.get('client')} "
                  f"verify {ssl_f.get('verify')} version {ssl_f.get(0x21)!r} "
                  f"cipher {ssl_f.get(0x23)!r} (the client's {tls_version} {suite})")
            ok = (ok and f.get(0x02) == b"localhost"
                  and alpn == (want_alpn.encode() if want_alpn else None)
                  and ssl_f.get("client") == 1 and ssl_f.get("verify") != 0
                  and ssl_f.get(0x21) == tls_version.encode()
                  and ssl_f.get(0x23, b"").startswith(b"TLS_")
                  # OpenSSL names TLS 1.3 suites by their IANA names, as the header does.
                  and (tls_version != "TLSv1.3" or ssl_f.get(0x23) == suite.encode())
                  and set(f) <= {0x01, 0x02, 0x20})
    finally:
        srv.close()
    return ok


def clientcert(port, cafile, back_port, cert, key, cn, resumes, cmd):
    """Client certificates as the application behind PORT learns them (PROXY v2), and
    whether a session made before CMD resumes after it."""
    import subprocess
    import threading

    seen = []
    srv = socket.create_server((HOST, back_port))
    srv.settimeout(30)
    stop = threading.Event()

    def app():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            got = answer_one(conn, "v2")
            seen.append(got if "error" in got else got["tlvs"])

    t = threading.Thread(target=app, daemon=True)
    t.start()
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    if cert != "-":
        ctx.load_cert_chain(cert, key)

    def one(session=None):
        with socket.create_connection((HOST, port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname="localhost", session=session) as tls:
                tls.sendall(b"hello\n")
                if tls.recv(64) != b"seen\n":
                    raise ValueError("no answer from the application")
                return tls.session, tls.session_reused

    def ssl_fields(n):
        # The application answers before it records what it read: give it a moment.
        until = time.monotonic() + 2
        while len(seen) <= n and time.monotonic() < until:
            time.sleep(0.01)
        f = seen[n].get(0x20, {}) if n < len(seen) else {}
        return f.get("client"), f.get("verify"), f.get(0x22)

    want_cn = None if cert == "-" else cn.encode()
    ok = False
    try:
        session, _ = one()
        first = ssl_fields(0)
        want_first = (1, 1, None) if cert == "-" else (7, 0, want_cn)
        print(f"clientcert: full handshake: flags, verify, CN {first} (want {want_first})")
        ok = first == want_first
        if cmd:
            rc = subprocess.run(cmd, timeout=30).returncode
            print(f"clientcert: the command between the two connections: exit {rc}")
            ok = ok and rc == 0
        # A reload takes effect a moment after the command: retry for up to 5 s until the
        # answer is the one wanted.
        deadline = time.monotonic() + 5
        while True:
            before = len(seen)
            try:
                _, reused = one(session)
                again, refused = ssl_fields(before), None
            except ssl.SSLError as e:
                reused, again, refused = False, None, e
            done = (refused is not None) if resumes == "refused" else reused
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if resumes == "refused":
            print(f"clientcert: with the first session: resumed {reused}, refused: {refused!r}")
            ok = ok and refused is not None and not reused
        else:
            want_again = (1, 1, None) if cert == "-" else (5, 0, want_cn)
            print(f"clientcert: with the first session: resumed {reused}, "
                  f"flags, verify, CN {again} (want {want_again})")
            ok = ok and reused and again == want_again
        errors = [x["error"] for x in seen if "error" in x]
        if errors:
            print(f"clientcert: application errors {errors}")
        ok = ok and not errors
    except (OSError, ssl.SSLError, ValueError) as e:
        print(f"clientcert: {e!r}")
        ok = False
    finally:
        stop.set()
        srv.close()
    return ok


def gone(pid):
    """Whether process PID has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def drain(port, cafile, pid, seconds, mode):
    """A graceful stop, seen from two clients and a newcomer."""
    import signal

    a, b = tls_to(port, cafile), tls_to(port, cafile)
    ok = echoes(a) and echoes(b)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGQUIT)
    refused_after = None
    while time.monotonic() - t0 < 3:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            time.sleep(0.05)
        except OSError:
            refused_after = time.monotonic() - t0
            break
    both_echo = echoes(a, b"still\n") and echoes(b, b"still\n")
    a.close()
    time.sleep(0.5)
    alive_with_one = not gone(pid)
    still = echoes(b, b"again\n")
    if mode == "close":
        b.close()
        t_close = time.monotonic()
    while not gone(pid) and time.monotonic() - t0 < seconds + 10:
        time.sleep(0.02)
    exited_after = time.monotonic() - t0
    print(f"drain ({mode}): new connections refused after "
          f"{refused_after if refused_after is None else round(refused_after, 2)} s; "
          f"open ones still echo: {both_echo}; the daemon alive with one open: {alive_with_one}, "
          f"which still echoes: {still}; exited {exited_after:.2f} s after SIGQUIT")
    ok = ok and refused_after is not None and refused_after < 1.5 and both_echo
    ok = ok and alive_with_one and still and gone(pid)
    if mode == "close":
        ok = ok and time.monotonic() - t_close < 10 and exited_after - (t_close - t0) < 1.0
    else:
        ended, _ = end_of(b)
        print(f"drain (hold): the connection kept open ended by {ended}")
        ok = ok and seconds - 0.5 <= exited_after <= seconds + 3
        ok = ok and ended in ("close_notify", "FIN", "reset")
        b.close()
    return ok


def idletimeout(port, cafile, seconds):
    """An idle relay is closed after `seconds`; one kept busy is not."""
    idle, busy = tls_to(port, cafile), tls_to(port, cafile)
    ok = echoes(idle) and echoes(busy)
    start = time.monotonic()
    # The busy one: a line every seconds/2 for 2·seconds, each echoed.
    while time.monotonic() - start < 2 * seconds:
        time.sleep(seconds / 2)
        ok = ok and echoes(busy)
    busy_ok = ok and echoes(busy)
    # The idle one was closed meanwhile: its end is already waiting to be read.
    kind, _ = end_of(idle, wait=seconds + 3)
    idle_ok = kind in ("close_notify", "FIN")
    # A fresh idle connection: closed after `seconds`, not before.
    fresh = tls_to(port, cafile)
    echoes(fresh)
    t0 = time.monotonic()
    kind2, took = end_of(fresh, wait=seconds + 3)
    took = time.monotonic() - t0
    timing_ok = kind2 in ("close_notify", "FIN") and seconds - 0.5 <= took <= seconds + 2.5
    print(f"idletimeout: busy connection still echoes after {2 * seconds}s: {busy_ok}; "
          f"idle one ended by {kind}; a fresh idle one ended by {kind2} after {took:.2f}s")
    for t in (idle, busy, fresh):
        t.close()
    return busy_ok and idle_ok and timing_ok


def padded_hello(pad, record):
    """A TLS 1.3 ClientHello (X25519, ECDSA P-256 SHA-256, TLS_AES_128_GCM_SHA256) with a
    padding extension of `pad` bytes (RFC 7685), in handshake records of at most `record`
    bytes."""
    def ext(t, body):
        return struct.pack("!HH", t, len(body)) + body
    name = b"localhost"
    exts = ext(0, struct.pack("!HBH", len(name) + 3, 0, len(name)) + name)
    exts += ext(10, struct.pack("!HH", 2, 0x001D))
    exts += ext(13, struct.pack("!HH", 2, 0x0403))
    exts += ext(43, bytes([2]) + struct.pack("!H", 0x0304))
    exts += ext(51, struct.pack("!HHH", 36, 0x001D, 32) + os.urandom(32))
    exts += ext(45, bytes([1, 1]))
    exts += ext(21, bytes(pad))
    body = b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32)
    body += struct.pack("!HH", 2, 0x1301) + b"\x01\x00" + struct.pack("!H", len(exts)) + exts
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"".join(b"\x16\x03\x01" + struct.pack("!H", len(hs[i:i + record])) + hs[i:i + record]
                    for i in range(0, len(hs), record))


def first_answer(port, flight):
    """What the server answers a first flight with: "ServerHello", "closed", or another."""
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(flight)
        try:
            head = s.recv(6, socket.MSG_WAITALL)
        except socket.timeout:
            return "nothing within 5 s"
        except OSError:
            return "closed"
    if not head:
        return "closed"
    if head[0] == 22 and len(head) == 6 and head[5] == 2:
        return "ServerHello"
    return f"record {head.hex()}"


def bighello(port):
    ok = True
    for pad, record, want in [(200, 16384, "ServerHello"), (40000, 16384, "ServerHello"),
                              (9000, 1, "ServerHello"), (65400, 16384, "closed")]:
        flight = padded_hello(pad, record)
        got = first_answer(port, flight)
        print(f"    a ClientHello with {pad} bytes of padding, in {len(flight)} bytes of records "
              f"of {record}: {got}")
        ok &= got == want
    return ok


def reneg(port, cafile):
    """s_client -tls1_2 through the proxy to the echo service: a line echoed, then R."""
    import selectors
    import subprocess
    p = subprocess.Popen(["openssl", "s_client", "-connect", f"{HOST}:{port}", "-servername",
                          "localhost", "-tls1_2", "-CAfile", cafile, "-msg"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    buf = b""

    def wait_for(pattern, seconds):
        nonlocal buf
        deadline = time.monotonic() + seconds
        while pattern not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return False
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                return pattern in buf
            buf += chunk
        return True

    try:
        p.stdin.write(b"renegotiation test\n")
        p.stdin.flush()
        if not wait_for(b"\nrenegotiation test\n", 5):
            print("    the line was not echoed")
            return False
        t0 = time.monotonic()
        p.stdin.write(b"R\n")
        p.stdin.flush()
        got = wait_for(b"no_renegotiation", 3)
        took = time.monotonic() - t0
        print(f"    no_renegotiation alert: {f'after {took * 1000:.0f} ms' if got else 'none within 3 s'}")
        return got and took < 1.5
    finally:
        p.kill()
        p.wait()


def main():
    cmd = sys.argv[1]
    if cmd == "fuzz":
        ok = fuzz(int(sys.argv[2]), sys.argv[3])
    elif cmd == "stall":
        ok = stall(int(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "idle":
        a = sys.argv
        ok = asyncio.run(idle(int(a[2]), int(a[3]), a[4], int(a[5]), a[6:]))
    elif cmd == "echo":
        asyncio.run(echo_server(int(sys.argv[2])))
        ok = True
    elif cmd == "backend":
        a = sys.argv
        ok = backend(int(a[2]), int(a[3]), int(a[4]), a[5])
    elif cmd == "hold":
        ok = hold(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    elif cmd == "proxyproto":
        a = sys.argv
        ok = proxyproto(int(a[2]), a[3], int(a[4]), a[5], *a[6:8])
    elif cmd == "clientcert":
        a = sys.argv
        ok = clientcert(int(a[2]), a[3], int(a[4]), a[5], a[6], a[7], a[8], a[9:])
    elif cmd == "drain":
        a = sys.argv
        ok = drain(int(a[2]), a[3], int(a[4]), float(a[5]), a[6])
    elif cmd == "bighello":
        ok = bighello(int(sys.argv[2]))
    elif cmd == "reneg":
        ok = reneg(int(sys.argv[2]), sys.argv[3])
    elif cmd == "ends":
        ok = ends(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    elif cmd == "idletimeout":
        ok = idletimeout(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
