//! `tls-bench`: a TLS handshake load generator (and the trivial HTTP application behind the
//! servers under test), for `make bench-tls` (scripts/bench-tls.sh, docs/PERFORMANCE.md).
//!
//! `tls-bench run` keeps N connections' worth of clients busy for a fixed time: each client
//! connects, completes a TLS handshake (rustls, ring), sends one HTTP/1.1 request with
//! `Connection: close`, reads the answer to the end and starts again. Every handshake's latency
//! (TCP connect to handshake done) and every request's (connect to the end of the answer) is
//! recorded; the first `--warmup` seconds are left out. Without `--resume` every handshake is a
//! full one; with it the clients share a session cache (tickets, and TLS 1.2 session IDs).
//!
//! `tls-bench backend` answers every HTTP request on a port with a fixed 200 response.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

#[derive(Parser)]
#[command(name = "tls-bench", version, about = "TLS handshake load generator")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure handshakes against a TLS server.
    Run {
        /// Server address (HOST:PORT).
        #[arg(long)]
        connect: SocketAddr,
        /// CA certificate(s) (PEM) that the server's chain must lead to.
        #[arg(long)]
        ca: PathBuf,
        /// Name sent in SNI and checked in the certificate.
        #[arg(long, default_value = "localhost")]
        server_name: String,
        /// Concurrent clients.
        #[arg(long, short = 'c', default_value_t = 16)]
        concurrency: usize,
        /// Measured seconds.
        #[arg(long, short = 'd', default_value_t = 5.0)]
        duration: f64,
        /// Seconds run before measuring (not counted).
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
        /// Resume sessions (a session cache shared by the clients).
        #[arg(long)]
        resume: bool,
        /// Offer TLS 1.2 only (default: TLS 1.3 only).
        #[arg(long)]
        tls12: bool,
        /// Client threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Labels printed in the result line: server, key.
        #[arg(long, default_value = "-")]
        server: String,
        #[arg(long, default_value = "-")]
        key: String,
        /// Print the table header first.
        #[arg(long)]
        header: bool,
        /// Server processes whose CPU time (user + system, from /proc) is divided by the
        /// handshakes measured (comma-separated pids).
        #[arg(long, value_delimiter = ',')]
        cpu_pids: Vec<u32>,
    },
    /// A trivial HTTP application: every request gets `200 ok`, then the connection is closed.
    Backend {
        /// Listen address (HOST:PORT).
        #[arg(long)]
        listen: SocketAddr,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Backend { listen } => rt(2).and_then(|rt| rt.block_on(backend(listen))),
        Cmd::Run {
            connect,
            ca,
            server_name,
            concurrency,
            duration,
            warmup,
            resume,
            tls12,
            threads,
            server,
            key,
            header,
            cpu_pids,
        } => client_config(&ca, resume, tls12).and_then(|cfg| {
            let name = ServerName::try_from(server_name).map_err(|e| e.to_string())?;
            let opts = RunOpts {
                addr: connect,
                cfg,
                name,
                concurrency: concurrency.max(1),
                warmup: Duration::from_secs_f64(warmup),
                duration: Duration::from_secs_f64(duration),
                cpu_pids,
            };
            let res = rt(threads.max(1))?.block_on(run(opts))?;
            if header {
                println!(
                    "{:<16} {:<10} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>10} {:>10}",
                    "server",
                    "key",
                    "mode",
                    "hs/s",
                    "hs p50",
                    "hs p99",
                    "req p50",
                    "req p99",
                    "resumed",
                    "errors",
                    "srv CPU/hs",
                    "cli CPU/hs"
                );
            }
            let mode = if resume { "resume" } else { "full" };
            println!(
                "{:<16} {:<10} {:<8} {:>8.0} {:>9} {:>9} {:>9} {:>9} {:>7.0}% {:>6} {:>10} {:>10}",
                server,
                key,
                mode,
                res.hs.len() as f64 / duration,
                ms(pct(&res.hs, 50.0)),
                ms(pct(&res.hs, 99.0)),
                ms(pct(&res.req, 50.0)),
                ms(pct(&res.req, 99.0)),
                100.0 * res.resumed as f64 / res.hs.len().max(1) as f64,
                res.errors,
                per_hs(res.server_cpu, res.hs.len()),
                per_hs(res.client_cpu, res.hs.len()),
            );
            if res.hs.is_empty() {
                return Err(format!("no handshake completed ({} errors)", res.errors));
            }
            Ok(())
        }),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tls-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rt(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn client_config(
    ca: &std::path::Path,
    resume: bool,
    tls12: bool,
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    // The same bound as the proxy's own certificate files: a regular file of at most 64 MiB.
    let pem = opencf_tlsproxy::files::read(ca, opencf_tlsproxy::files::MAX_DATA_FILE)?;
    for c in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(c.map_err(|e| format!("{}: {e}", ca.display()))?)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12 {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13]
    };
    let mut cfg =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
    cfg.resumption = if resume {
        Resumption::in_memory_sessions(4096)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

struct RunOpts {
    addr: SocketAddr,
    cfg: Arc<ClientConfig>,
    name: ServerName<'static>,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
    cpu_pids: Vec<u32>,
}

#[derive(Default)]
struct Results {
    /// Handshake latencies (µs) and request latencies (µs), measured part only.
    hs: Vec<u32>,
    req: Vec<u32>,
    resumed: usize,
    errors: usize,
    /// CPU seconds of the servers named (None without pids) and of this process, measured part.
    server_cpu: Option<f64>,
    client_cpu: Option<f64>,
}

/// User + system CPU seconds of a process, from /proc/PID/stat (fields 14 and 15).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn cpu_of(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|p| cpu_seconds(&p.to_string())).sum()
}

fn per_hs(cpu: Option<f64>, n: usize) -> String {
    match cpu {
        Some(c) if n > 0 => format!("{:.0}us", c * 1e6 / n as f64),
        _ => "-".into(),
    }
}

async fn run(o: RunOpts) -> Result<Results, String> {
    let start = Instant::now();
    let measure_from = start + o.warmup;
    let end = measure_from + o.duration;
    let connector = TlsConnector::from(o.cfg.clone());
    let mut tasks = Vec::new();
    for _ in 0..o.concurrency {
        let connector = connector.clone();
        let name = o.name.clone();
        let addr = o.addr;
        tasks.push(tokio::spawn(async move {
            let mut r = Results::default();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let one = tokio::time::timeout(
                    Duration::from_secs(10),
                    request(&connector, addr, name.clone()),
                )
                .await;
                let done = Instant::now();
                let counted = t0 >= measure_from && done <= end;
                match one {
                    Ok(Ok((hs, resumed))) if counted => {
                        r.hs.push(us(hs));
                        r.req.push(us(done - t0));
                        r.resumed += resumed as usize;
                    }
                    Ok(Ok(_)) => {}
                    _ if counted => r.errors += 1,
                    _ => {}
                }
            }
            r
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu0 = (cpu_of(&o.cpu_pids), cpu_seconds("self"));
    tokio::time::sleep_until(end.into()).await;
    let cpu1 = (cpu_of(&o.cpu_pids), cpu_seconds("self"));
    let mut all = Results {
        server_cpu: cpu0.0.zip(cpu1.0).map(|(a, b)| b - a),
        client_cpu: cpu0.1.zip(cpu1.1).map(|(a, b)| b - a),
        ..Results::default()
    };
    for t in tasks {
        let r = t.await.map_err(|e| e.to_string())?;
        all.hs.extend(r.hs);
        all.req.extend(r.req);
        all.resumed += r.resumed;
        all.errors += r.errors;
    }
    all.hs.sort_unstable();
    all.req.sort_unstable();
    Ok(all)
}

/// One connection: handshake, a request, the answer to the end. Returns the handshake time and
/// whether it was resumed.
async fn request(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: ServerName<'static>,
) -> Result<(Duration, bool), String> {
    let t0 = Instant::now();
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let hs = t0.elapsed();
    let resumed = tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::with_capacity(512);
    // The end of the answer: close_notify, or a TCP close after the whole answer.
    let r = tls.read_to_end(&mut answer).await;
    let ok = answer.starts_with(b"HTTP/1.") && answer.windows(5).any(|w| w == b" 200 ");
    match r {
        Ok(_) if ok => Ok((hs, resumed)),
        Err(e) if ok && e.kind() == std::io::ErrorKind::UnexpectedEof => Ok((hs, resumed)),
        Err(e) => Err(e.to_string()),
        Ok(_) => Err("no 200 answer".into()),
    }
}

fn us(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

fn pct(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[i.min(sorted.len() - 1)])
}

fn ms(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}ms", v as f64 / 1000.0))
}

async fn backend(listen: SocketAddr) -> Result<(), String> {
    let l = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("listen on {listen}: {e}"))?;
    loop {
        let (mut s, _) = match l.accept().await {
            Ok(x) => x,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            let mut buf = Vec::with_capacity(1024);
            loop {
                if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
                match s.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if buf.len() > 16384 => return,
                    Ok(_) => {}
                }
            }
            let _ = s
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\
                      Connection: close\r\n\r\nok\n",
                )
                .await;
            let _ = s.shutdown().await;
        });
    }
}
