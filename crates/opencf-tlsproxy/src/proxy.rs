//! The daemon: one listener per instance, one task per connection.
//!
//! A connection's first flight is read (bounded by the handshake timeout) until the ClientHello
//! is complete; [`InstanceTls::decide`] then either hands the bytes, untouched, to the fallback
//! port, or feeds them to a rustls [`Acceptor`] and completes the handshake with the chosen
//! configuration, after which clear text is relayed to `127.0.0.1:proxy_port` in both
//! directions with back-pressure (`copy_bidirectional`), after a PROXY protocol header where
//! the instance asks for one ([`crate::proxy_header`]). With `idle_timeout`, a relay (served or
//! fallback) that carries no byte either way for that long is closed.
//!
//! `SIGHUP` re-reads the file: changed instances get their new TLS state for new connections,
//! new ones start listening, removed ones stop listening; established connections keep going.
//!
//! With `workers = N > 1` this runs in each worker process ([`crate::workers`]): listeners are
//! bound with `SO_REUSEPORT`, so that the kernel spreads new connections over the workers.

use crate::clienthello::{peek, Peek, MAX_FIRST_FLIGHT};
use crate::config::{Config, Instance, DEFAULT_DRAIN_TIMEOUT};
use crate::proxy_header;
use crate::stats::{self, inc, Active};
use crate::tickets::TicketSecret;
use crate::tls::{resumption_key, subject_cn, suite_name, Decision, InstanceTls, Resumption};
use crate::token::{default_module, Module};
use crate::Result;
use rustls::server::{Accepted, AcceptedAlert, Acceptor};
use rustls::ServerConfig;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_rustls::StartHandshake;

/// How long connecting to the clear-text service or the fallback port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long sending close_notify to a client may take when the relay ends on an error.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a connection needs of its instance (replaced as a whole on reload).
pub struct State {
    pub inst: Instance,
    pub tls: InstanceTls,
}

struct Running {
    tx: watch::Sender<Arc<State>>,
    task: JoinHandle<()>,
    res: Resumption,
}

/// The running instances of a process.
pub struct Proxy {
    module: Arc<Module>,
    only: Option<String>,
    running: HashMap<(Option<String>, u16), Running>,
    reuseport: bool,
    secret: TicketSecret,
    /// `drain_timeout` of the file last applied.
    drain_timeout: Duration,
}

/// How a process runs the instances.
pub struct Options<'a> {
    /// The instance file, re-read on `SIGHUP`.
    pub config: &'a Path,
    /// Serve only the instance with this name.
    pub only: Option<String>,
    /// Listen with `SO_REUSEPORT` (a worker among several).
    pub reuseport: bool,
    /// What ticket keys derive from.
    pub secret: TicketSecret,
}

/// Binds a listener; with `reuseport`, other processes of the same user may bind the same
/// address and the kernel spreads connections over them.
async fn listen(addr: &str, reuseport: bool) -> Result<TcpListener> {
    let err = |e: io::Error| format!("listen on {addr}: {e}");
    if !reuseport {
        return TcpListener::bind(addr).await.map_err(err);
    }
    let sa = tokio::net::lookup_host(addr)
        .await
        .map_err(err)?
        .next()
        .ok_or_else(|| format!("listen on {addr}: no address"))?;
    let sock = if sa.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    sock.set_reuseaddr(true).map_err(err)?;
    sock.set_reuseport(true).map_err(err)?;
    sock.bind(sa).map_err(err)?;
    sock.listen(1024).map_err(err)
}

impl Proxy {
    /// Opens the PKCS#11 module named by the file (or the default one).
    pub fn new(cfg: &Config, opts: &Options) -> Result<Proxy> {
        let path = cfg.module.clone().unwrap_or_else(default_module);
        Ok(Proxy {
            module: Module::open(&path)?,
            only: opts.only.clone(),
            running: HashMap::new(),
            reuseport: opts.reuseport,
            secret: opts.secret.clone(),
            drain_timeout: Duration::from_secs(DEFAULT_DRAIN_TIMEOUT),
        })
    }

    /// Names of the instances listening now.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .keys()
            .map(|(a, p)| a.as_ref().map_or(p.to_string(), |a| format!("{a}-{p}")))
            .collect();
        v.sort();
        v
    }

    /// Brings the running instances in line with `cfg`. Every instance is built, and every
    /// new listener bound, before any running instance changes; on error nothing changes.
    /// A new listener whose socket overlaps one of an instance that leaves (the same port, its
    /// address now all addresses or the reverse) can only be bound once that one is closed:
    /// such listeners are closed first, and bound again if the reload fails. Returns what was
    /// started, updated and stopped.
    pub async fn apply(&mut self, cfg: &Config) -> Result<(usize, usize, usize)> {
        if cfg.module.as_ref().is_some_and(|m| *m != self.module.path) {
            crate::log_line!("a new module path takes effect at restart only");
        }
        let wanted: Vec<&Instance> = cfg.served(self.only.as_deref()).collect();
        if let Some(o) = &self.only {
            if wanted.is_empty() {
                return Err(format!("no instance named {o}"));
            }
        }
        let mut built = Vec::new();
        for inst in &wanted {
            let key = (inst.address.clone(), inst.port);
            let rkey = resumption_key(inst)?;
            let res = match self.running.get(&key) {
                Some(r) if r.res.key == rkey => r.res.clone(),
                _ => Resumption::with_key(inst, &self.secret, rkey),
            };
            let module = self.module.clone();
            let i2 = (*inst).clone();
            let r2 = res.clone();
            // Building talks to the token (blocking calls): keep it off the reactor threads.
            let tls = tokio::task::spawn_blocking(move || InstanceTls::build(&module, &i2, &r2))
                .await
                .map_err(|e| e.to_string())??;
            built.push((key, (*inst).clone(), tls, res));
        }
        let gone: Vec<_> = self
            .running
            .keys()
            .filter(|k| !wanted.iter().any(|i| i.is(k.0.as_deref(), k.1)))
            .cloned()
            .collect();
        // Listeners of leaving instances closed to make way for a new one, with their state.
        let mut closed: Vec<((Option<String>, u16), Running)> = Vec::new();
        let mut listeners = HashMap::new();
        for (key, inst, _, _) in &built {
            if self.running.contains_key(key) {
                continue;
            }
            for k in &gone {
                let overlaps = self
                    .running
                    .get(k)
                    .is_some_and(|r| r.tx.borrow().inst.overlap(inst).is_some());
                if overlaps {
                    let mut r = self.running.remove(k).expect("running instance");
                    r.task.abort();
                    // The listener is closed once its task is dropped.
                    let _ = (&mut r.task).await;
                    closed.push((k.clone(), r));
                }
            }
            match listen(&inst.listen_addr(), self.reuseport).await {
                Ok(l) => {
                    listeners.insert(key.clone(), l);
                }
                Err(e) => {
                    drop(listeners);
                    self.reopen(closed).await;
                    return Err(e);
                }
            }
        }
        for (k, _) in &closed {
            crate::log_line!(
                "instance {} stopped listening to make way for a new instance on its port",
                k.0.as_ref()
                    .map_or(k.1.to_string(), |a| format!("{a}-{}", k.1))
            );
        }
        let (mut started, mut updated) = (0, 0);
        for (key, inst, tls, res) in built {
            let state = Arc::new(State { inst, tls });
            match listeners.remove(&key) {
                None => {
                    let r = self.running.get_mut(&key).expect("running instance");
                    r.tx.send_replace(state);
                    r.res = res;
                    updated += 1;
                }
                Some(l) => {
                    crate::log_line!(
                        "instance {} listening on {} (clear text to 127.0.0.1:{})",
                        state.inst.name(),
                        l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
                        state.inst.proxy_port
                    );
                    let (tx, rx) = watch::channel(state);
                    let task = tokio::spawn(accept_loop(l, rx));
                    self.running.insert(key, Running { tx, task, res });
                    started += 1;
                }
            }
        }
        for k in &gone {
            if let Some(r) = self.running.remove(k) {
                r.task.abort();
            }
        }
        self.drain_timeout =
            Duration::from_secs(cfg.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT));
        crate::token::set_max_offloaded_signatures(
            cfg.max_offloaded_signatures
                .unwrap_or(crate::token::DEFAULT_MAX_OFFLOADED_SIGNATURES),
        );
        Ok((started, updated, gone.len()))
    }

    /// Binds again the listeners closed by a reload that then failed, with the state they had.
    async fn reopen(&mut self, closed: Vec<((Option<String>, u16), Running)>) {
        for (key, mut r) in closed {
            let addr = r.tx.borrow().inst.listen_addr();
            match listen(&addr, self.reuseport).await {
                Ok(l) => {
                    r.task = tokio::spawn(accept_loop(l, r.tx.subscribe()));
                    self.running.insert(key, r);
                }
                Err(e) => crate::log_line!(
                    "instance {} no longer listens: {e}",
                    r.tx.borrow().inst.name()
                ),
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, rx: watch::Receiver<Arc<State>>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let st = rx.borrow().clone();
                tokio::spawn(handle(stream, st));
            }
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                crate::log_line!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection, from the first byte to the end of the relay.
pub async fn handle(mut stream: TcpStream, st: Arc<State>) {
    let _active = Active::new();
    let s = stats::get();
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + Duration::from_secs(st.inst.handshake_timeout);
    let mut buf = Vec::with_capacity(1024);
    let hello = loop {
        match peek(&buf) {
            Peek::Hello(h) => break h,
            Peek::Invalid(_) => {
                inc(s.malformed);
                return;
            }
            Peek::Incomplete if buf.len() >= MAX_FIRST_FLIGHT => {
                inc(s.malformed);
                return;
            }
            Peek::Incomplete => {}
        }
        match timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Err(_) => {
                inc(s.handshake_timeouts);
                return;
            }
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
        }
    };
    match st.tls.decide(&hello) {
        Decision::Reject(_) => {
            inc(s.rejected);
            inc(s.alerts_sent);
            // Fatal alert unrecognized_name (112).
            let _ = stream.write_all(&[21, 3, 3, 0, 2, 2, 112]).await;
        }
        Decision::Fallback(_) => {
            inc(s.fallbacks);
            if let Some(port) = st.inst.fallback_port {
                fallback(stream, &buf, port, &st.inst).await;
            }
        }
        Decision::Serve(cfg) => serve(stream, &buf, cfg, &st.inst, deadline).await,
    }
}

/// When the last byte passed through a relay, for `idle_timeout`.
struct LastByte {
    start: Instant,
    /// Milliseconds from `start`.
    at: AtomicU64,
}

impl LastByte {
    fn new() -> Arc<LastByte> {
        Arc::new(LastByte {
            start: Instant::now(),
            at: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        self.at
            .store(self.start.elapsed().as_millis() as u64, Relaxed);
    }

    /// Returns once no byte has passed for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let end = self.start + Duration::from_millis(self.at.load(Relaxed)) + idle;
            if Instant::now() >= end {
                return;
            }
            tokio::time::sleep_until(end).await;
        }
    }
}

/// Relays between `a` (the client's side, counted) and `b` until both ends close, one fails,
/// or, with an idle timeout, no byte has passed for that long (counted, and an error).
async fn relay<A, B>(a: &mut Counted<A>, b: &mut B, idle: u64) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + PendingWrites + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let Some(last) = (idle > 0).then(LastByte::new) else {
        return tokio::io::copy_bidirectional(a, b).await.map(|_| ());
    };
    a.last = Some(last.clone());
    tokio::select! {
        r = tokio::io::copy_bidirectional(a, b) => r.map(|_| ()),
        _ = last.idle_for(Duration::from_secs(idle)) => {
            inc(stats::get().idle_timeouts);
            Err(io::ErrorKind::TimedOut.into())
        }
    }
}

async fn fallback(stream: TcpStream, first: &[u8], port: u16, inst: &Instance) {
    let s = stats::get();
    let mut up = match timeout(CONNECT_TIMEOUT, TcpStream::connect(("127.0.0.1", port))).await {
        Ok(Ok(u)) => u,
        _ => {
            inc(s.backend_errors);
            return;
        }
    };
    let _ = up.set_nodelay(true);
    if up.write_all(first).await.is_err() {
        return;
    }
    s.fallback_bytes.fetch_add(first.len() as u64, Relaxed);
    let mut counted = Counted {
        inner: stream,
        read: s.fallback_bytes,
        written: s.fallback_bytes,
        last: None,
    };
    let _ = relay(&mut counted, &mut up, inst.idle_timeout).await;
}

/// The first flight given to rustls.
// Made once per connection and taken apart at once: boxing the large variant would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
enum FirstFlight<'a> {
    /// The ClientHello, and the bytes that followed it.
    Accepted(Accepted, &'a [u8]),
    /// Not a ClientHello rustls reads.
    Malformed,
    /// A ClientHello rustls refuses, with the alert to send.
    Refused(AcceptedAlert),
}

/// Feeds the first flight (a whole ClientHello, as [`peek`] found it, maybe followed by more)
/// to a rustls [`Acceptor`] a piece at a time, asking for the ClientHello after each: rustls
/// holds at most one record's worth (about 18 KiB) of bytes it has not looked at, and takes a
/// handshake message of up to 64 KiB once it has seen its start, so a large ClientHello (a
/// padding extension, post-quantum key shares, or many small records) must not be given to
/// it at once.
fn accept_first_flight(first: &[u8]) -> FirstFlight<'_> {
    let mut acceptor = Acceptor::default();
    let mut rd = first;
    while !rd.is_empty() {
        if !matches!(acceptor.read_tls(&mut rd), Ok(n) if n > 0) {
            return FirstFlight::Malformed;
        }
        match acceptor.accept() {
            Ok(Some(a)) => return FirstFlight::Accepted(a, rd),
            Ok(None) => {}
            Err((_, alert)) => return FirstFlight::Refused(alert),
        }
    }
    FirstFlight::Malformed
}

/// Counts a handshake error: alerts received from the peer, or the fatal alert rustls sends.
fn handshake_error(e: &io::Error) {
    let s = stats::get();
    inc(s.handshake_failures);
    match e.get_ref().and_then(|x| x.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(_)) => inc(s.alerts_received),
        Some(_) => inc(s.alerts_sent),
        None => {}
    }
}

async fn serve(
    mut stream: TcpStream,
    first: &[u8],
    cfg: Arc<ServerConfig>,
    inst: &Instance,
    deadline: Instant,
) {
    let s = stats::get();
    // The client's address and the one it reached, for a PROXY protocol header (read only
    // where one is sent: two system calls per connection).
    let addrs = inst
        .proxy_protocol
        .and_then(|_| stream.peer_addr().ok().zip(stream.local_addr().ok()));
    let (accepted, rest) = match accept_first_flight(first) {
        FirstFlight::Accepted(a, rest) => (a, rest),
        FirstFlight::Malformed => {
            inc(s.malformed);
            return;
        }
        FirstFlight::Refused(mut alert) => {
            inc(s.handshake_failures);
            inc(s.alerts_sent);
            let mut out = Vec::new();
            if alert.write_all(&mut out).is_ok() {
                let _ = stream.write_all(&out).await;
            }
            return;
        }
    };
    // What the client sent after its ClientHello, in the same flight, goes to the
    // connection before any byte read from the socket.
    let mut whole = true;
    let accept = StartHandshake::from_parts(accepted, stream).into_stream_with(cfg, |conn| {
        let mut rd = rest;
        while !rd.is_empty() {
            if !matches!(conn.read_tls(&mut rd), Ok(n) if n > 0) {
                whole = false;
                break;
            }
        }
    });
    if !whole {
        inc(s.malformed);
        return;
    }
    let mut tls = match timeout_at(deadline, accept).await {
        Err(_) => {
            inc(s.handshake_timeouts);
            return;
        }
        Ok(Err(e)) => {
            handshake_error(&e);
            return;
        }
        Ok(Ok(t)) => t,
    };
    match tls.get_ref().1.handshake_kind() {
        Some(rustls::HandshakeKind::Resumed) => inc(s.handshakes_resumed),
        _ => inc(s.handshakes_full),
    }
    let backend = match timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect(("127.0.0.1", inst.proxy_port)),
    )
    .await
    {
        Ok(Ok(b)) => b,
        _ => {
            // The application is not there: close_notify, then the connection is closed.
            inc(s.backend_errors);
            let _ = timeout(CLOSE_TIMEOUT, tls.shutdown()).await;
            return;
        }
    };
    let _ = backend.set_nodelay(true);
    let mut backend = Watched {
        inner: backend,
        failed: false,
    };
    if let Some(v) = inst.proxy_protocol {
        let conn = tls.get_ref().1;
        let peer = conn.peer_certificates().and_then(|c| c.first());
        let client_cn = peer.and_then(subject_cn);
        let cipher = conn
            .negotiated_cipher_suite()
            .map(|s| suite_name(&s).replacen("TLS13_", "TLS_", 1))
            .unwrap_or_default();
        let facts = proxy_header::TlsFacts {
            version: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLSv1.3",
            },
            cipher: &cipher,
            alpn: conn.alpn_protocol(),
            sni: conn.server_name(),
            client_cert: match (peer, conn.handshake_kind()) {
                (None, _) => proxy_header::ClientCert::None,
                (Some(_), Some(rustls::HandshakeKind::Resumed)) => {
                    proxy_header::ClientCert::Session
                }
                (Some(_), _) => proxy_header::ClientCert::Connection,
            },
            client_cn: client_cn.as_deref(),
        };
        let head = proxy_header::header(v, addrs, Some(&facts));
        if backend.write_all(&head).await.is_err() {
            inc(s.backend_errors);
            let _ = timeout(CLOSE_TIMEOUT, tls.shutdown()).await;
            return;
        }
    }
    let mut counted = Counted {
        inner: tls,
        read: s.bytes_in,
        written: s.bytes_out,
        last: None,
    };
    if relay(&mut counted, &mut backend, inst.idle_timeout)
        .await
        .is_err()
        && !backend.failed
    {
        // The client's side failed, or the connection was idle too long: the client still
        // gets a close_notify where its socket takes one, then the close. Where the
        // application's side failed (it reset its connection or died), the connection is
        // closed without one: close_notify says that no data was cut short (RFC 8446 §6.1),
        // and the client could not tell an answer cut short from a whole one.
        let _ = timeout(CLOSE_TIMEOUT, counted.inner.shutdown()).await;
    }
}

/// The application's side of a connection, noting whether a read or a write on it failed.
struct Watched<S> {
    inner: S,
    failed: bool,
}

impl<S> Watched<S> {
    fn note<T>(&mut self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if matches!(r, Poll::Ready(Err(_))) {
            self.failed = true;
        }
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.note(r)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        self.note(r)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.note(r)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.note(r)
    }
}

/// A stream that adds what passes through it to two counters as it goes, and notes when the
/// last byte passed (with an idle timeout).
pub struct Counted<S> {
    pub inner: S,
    pub read: &'static AtomicU64,
    pub written: &'static AtomicU64,
    last: Option<Arc<LastByte>>,
}

/// A stream that can have bytes of its own to send after a read: rustls answers some records
/// itself (a `no_renegotiation` alert to a TLS 1.2 renegotiation attempt, its own
/// `KeyUpdate` to a TLS 1.3 one that asks for it) and queues the answer until the next write
/// or flush.
pub trait PendingWrites {
    fn has_pending_writes(&self) -> bool;
}

impl PendingWrites for TcpStream {
    fn has_pending_writes(&self) -> bool {
        false
    }
}

impl<IO> PendingWrites for tokio_rustls::server::TlsStream<IO> {
    fn has_pending_writes(&self) -> bool {
        self.get_ref().1.wants_write()
    }
}

impl<S: AsyncRead + AsyncWrite + PendingWrites + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let mut r = Pin::new(&mut self.inner).poll_read(cx, buf);
        // A client that closes its side without close_notify (a TCP FIN): rustls reports an
        // unexpected end, which would end both directions and drop the application's answer
        // to what the client sent. It is taken as the client's half-close instead, passed on
        // to the application, whose answer is relayed in full (as nginx does, with OpenSSL's
        // SSL_OP_IGNORE_UNEXPECTED_EOF).
        if matches!(&r, Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof) {
            r = Poll::Ready(Ok(()));
        }
        let n = buf.filled().len() - before;
        self.read.fetch_add(n as u64, Relaxed);
        if n > 0 {
            if let Some(l) = &self.last {
                l.touch();
            }
        }
        // What the read made the stream answer goes out now: the relay flushes this side
        // only after it writes the application's bytes, which may never come (the peer waits
        // for the answer). A flush that cannot finish is woken by the socket; an error shows
        // at the next write.
        if self.inner.has_pending_writes() {
            let _ = Pin::new(&mut self.inner).poll_flush(cx);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            self.written.fetch_add(*n as u64, Relaxed);
            if let Some(l) = &self.last {
                l.touch();
            }
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Proxy {
    /// A graceful stop: the listeners close at once (new connections are refused), and the
    /// connections open go on until they end, `drain_timeout` passes, or `SIGTERM` or `SIGINT`
    /// says to stop now.
    async fn drain(&mut self, sig: &mut Signals) {
        for (_, r) in self.running.drain() {
            r.task.abort();
        }
        let active = stats::get().active;
        let deadline = Instant::now() + self.drain_timeout;
        crate::log_line!(
            "stopping gracefully: listeners closed; waiting up to {} s for the open connections ({})",
            self.drain_timeout.as_secs(),
            active.load(Relaxed)
        );
        loop {
            let open = active.load(Relaxed);
            if open == 0 {
                crate::log_line!("every connection ended; stopping");
                return;
            }
            if Instant::now() >= deadline {
                crate::log_line!("drain_timeout passed; stopping (open connections: {open})");
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = sig.term.recv() => break,
                _ = sig.int.recv() => break,
            }
        }
        crate::log_line!(
            "stopped during the drain (open connections dropped: {})",
            active.load(Relaxed)
        );
    }
}

/// Writes the pid file (atomically) and removes it when dropped.
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes a new file beside `path` and renames it over `path`. The new file is made
    /// with `O_EXCL` after any old one is removed: a link left at its name (a directory others
    /// can write to) is never followed, so the daemon, often root, writes nowhere else.
    pub fn create(path: &Path) -> Result<PidFile> {
        use std::io::Write;
        let tmp = path.with_extension("pid.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| writeln!(f, "{}", std::process::id()))
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the instances until SIGTERM or SIGINT, or SIGQUIT and the drain of the connections
/// open; SIGHUP reloads the file. `ready` is called once every instance listens (it writes the
/// pid file, or tells the supervisor).
pub async fn run(opts: Options<'_>, ready: impl FnOnce() -> Result<()>) -> Result<()> {
    let mut sig = stop_signals()?;
    let path = opts.config;
    let cfg = Config::load(path)?;
    let mut proxy = Proxy::new(&cfg, &opts)?;
    proxy.apply(&cfg).await?;
    if proxy.running.is_empty() {
        crate::log_line!("no instance in {}; waiting for SIGHUP", path.display());
    }
    ready()?;
    loop {
        tokio::select! {
            _ = sig.hup.recv() => {
                let r = match Config::load_existing(path) {
                    Ok(c) => proxy.apply(&c).await,
                    Err(e) => Err(e),
                };
                match r {
                    Ok((a, u, d)) => {
                        crate::log_line!("reloaded: {a} started, {u} updated, {d} stopped")
                    }
                    Err(e) => crate::log_line!("reload failed, nothing changed: {e}"),
                }
            }
            _ = sig.term.recv() => break,
            _ = sig.int.recv() => break,
            _ = sig.quit.recv() => {
                proxy.drain(&mut sig).await;
                break;
            }
        }
    }
    Ok(())
}

/// The signals a daemon process handles: `SIGHUP` reloads, `SIGTERM` and `SIGINT` stop at
/// once, `SIGQUIT` stops gracefully.
pub struct Signals {
    pub hup: tokio::signal::unix::Signal,
    pub term: tokio::signal::unix::Signal,
    pub int: tokio::signal::unix::Signal,
    pub quit: tokio::signal::unix::Signal,
}

/// Installs the handlers of [`Signals`] (before anything else starts).
pub fn stop_signals() -> Result<Signals> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k| signal(k).map_err(|e| format!("signal handler: {e}"));
    Ok(Signals {
        hup: sig(SignalKind::hangup())?,
        term: sig(SignalKind::terminate())?,
        int: sig(SignalKind::interrupt())?,
        quit: sig(SignalKind::quit())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clienthello::tests::{build, with_extension};

    /// A TLS 1.3 ClientHello handshake message padded (RFC 7685) with `pad` bytes, in records
    /// of at most `record` bytes.
    fn padded_hello(pad: usize, record: usize) -> Vec<u8> {
        let rec = build(&[0x1301], Some("localhost"), Some(&[0x0304]), &[0x0403]);
        let groups = with_extension(&rec, 10, &[0, 2, 0, 0x1d]);
        let mut share = vec![0, 36, 0, 0x1d, 0, 32];
        share.extend_from_slice(&[9; 32]);
        let shared = with_extension(&groups, 51, &share);
        let hs = with_extension(&shared, 21, &vec![0; pad])[5..].to_vec();
        let mut out = Vec::new();
        for chunk in hs.chunks(record) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    /// A link left where the pid file's temporary file goes is removed, not followed: the
    /// file it points to keeps its content, and the pid file holds the pid.
    #[test]
    fn the_pid_file_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        let pid = dir.path().join("proxy.pid");
        std::os::unix::fs::symlink(&victim, pid.with_extension("pid.tmp")).unwrap();
        let made = PidFile::create(&pid).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert_eq!(
            std::fs::read_to_string(&pid).unwrap(),
            format!("{}\n", std::process::id())
        );
        assert!(!std::fs::symlink_metadata(&pid).unwrap().is_symlink());
        drop(made);
        assert!(!pid.exists(), "removed when dropped");
    }

    #[test]
    fn large_first_flights_are_accepted() {
        for (pad, record) in [(100, 16384), (30_000, 16384), (60_000, 16384), (9_000, 1)] {
            let flight = padded_hello(pad, record);
            assert!(
                matches!(peek(&flight), Peek::Hello(_)),
                "{pad} in records of {record}"
            );
            match accept_first_flight(&flight) {
                FirstFlight::Accepted(a, rest) => {
                    assert_eq!(a.client_hello().server_name(), Some("localhost"));
                    assert!(rest.is_empty());
                }
                _ => panic!("{pad} bytes of padding in records of {record}: not accepted"),
            }
        }
        // Bytes after the ClientHello that rustls has not read yet are handed back, to go to
        // the connection.
        let mut flight = padded_hello(20_000, 16384);
        let after: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        flight.extend_from_slice(&after);
        match accept_first_flight(&flight) {
            FirstFlight::Accepted(_, rest) => {
                assert!(!rest.is_empty() && after.ends_with(rest), "{}", rest.len())
            }
            _ => panic!("not accepted"),
        }
        assert!(matches!(
            accept_first_flight(&padded_hello(100, 16384)[..50]),
            FirstFlight::Malformed
        ));
    }
}
