//! Worker processes (`workers = N`, N > 1), in the manner of nginx.
//!
//! The daemon becomes a supervisor: it draws the ticket secret, starts N workers by running
//! its own executable again with [`WORKER_ARG`] `I` (no fork: the crate has no unsafe code),
//! and writes the secret to each worker's standard input, which stays open as a pipe. Each
//! worker opens the PKCS#11 module and logs in itself, binds every instance's listener with
//! `SO_REUSEPORT` (the kernel spreads new connections over the workers) and writes
//! [`READY`] on its standard output once it listens. When the pipe on its standard input
//! reaches end of file (the supervisor is gone, even killed), the worker exits.
//!
//! The supervisor writes the pid file (its own pid) once every worker is ready, passes
//! `SIGHUP` on to the workers, stops them on `SIGTERM`/`SIGINT` (and waits for them), and
//! starts again a worker that dies, after a back-off of 1 s that doubles up to 30 s while the
//! worker dies within 10 s of its start. A worker that fails at start-up (a wrong PIN, a key
//! that is not there: its message goes to the shared standard error) makes the daemon stop
//! and exit with an error. Worker 0 starts first and the others once it is ready, so that
//! such an error is reported once.

use crate::config::{Config, Instance, DEFAULT_DRAIN_TIMEOUT};
use crate::proxy::{stop_signals, PidFile, Signals};
use crate::tickets::{TicketSecret, SECRET_LEN};
use crate::{set_log_name, Result};
use rustix::process::{kill_process, Pid, Signal};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, timeout_at, Instant};

/// The (hidden) command-line option that makes the executable worker `I`.
pub const WORKER_ARG: &str = "--worker-index";
/// What a worker writes on its standard output once every instance listens.
pub const READY: &str = "ready";

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A worker that ran at least this long before dying is restarted after [`FIRST_BACKOFF`].
const STABLE: Duration = Duration::from_secs(10);
/// How long workers get to stop after `SIGTERM` before `SIGKILL`.
const STOP_WAIT: Duration = Duration::from_secs(10);

// --- worker side ---------------------------------------------------------------------------

/// Start of worker `index`: reads the ticket secret from standard input, then watches that
/// pipe from a thread and ends the process when it reaches end of file (supervisor gone).
pub fn worker_init(index: usize) -> Result<TicketSecret> {
    set_log_name(format!("opencf-tlsproxy[worker {index}]"));
    let mut stdin = std::io::stdin();
    let mut b = [0u8; SECRET_LEN];
    stdin
        .read_exact(&mut b)
        .map_err(|e| format!("reading the ticket secret from the supervisor: {e}"))?;
    std::thread::Builder::new()
        .name("supervisor-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Err(e) if e.kind() != std::io::ErrorKind::Interrupted => break,
                    _ => {}
                }
            }
            crate::log_line!("the supervisor is gone; exiting");
            std::process::exit(1);
        })
        .map_err(|e| format!("watch thread: {e}"))?;
    Ok(TicketSecret::from_bytes(b))
}

/// Tells the supervisor that this worker listens.
pub fn worker_ready() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY}")
        .and_then(|_| out.flush())
        .map_err(|e| format!("telling the supervisor: {e}"))
}

// --- supervisor side -------------------------------------------------------------------------

enum Event {
    Ready(usize, u64),
    Exited(usize, u64, std::io::Result<ExitStatus>),
}

/// One worker position: the process filling it now, if any.
struct Slot {
    /// Incremented at each start, so that events of an earlier process are told apart.
    generation: u64,
    pid: Option<i32>,
    /// The write end of the worker's standard input: dropped, the worker exits.
    stdin: Option<ChildStdin>,
    started: Instant,
    ready: bool,
    restarts: u64,
    backoff: Duration,
    restart_at: Option<Instant>,
}

struct Supervisor {
    exe: PathBuf,
    args: Vec<OsString>,
    secret: TicketSecret,
    slots: Vec<Slot>,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
}

fn send_signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = kill_process(p, sig);
    }
}

fn status_text(st: &std::io::Result<ExitStatus>) -> String {
    match st {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait: {e}"),
    }
}

impl Supervisor {
    /// Starts worker `i` (its events arrive on `rx`).
    async fn spawn(&mut self, i: usize) -> Result<()> {
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .arg(WORKER_ARG)
            .arg(i.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting worker {i} ({}): {e}", self.exe.display()))?;
        let slot = &mut self.slots[i];
        slot.generation += 1;
        let generation = slot.generation;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("worker {i}: no pipe"));
        };
        // A worker that dies at once is reported by its exit event.
        let _ = stdin.write_all(self.secret.bytes()).await;
        slot.pid = child.id().map(|p| p as i32);
        slot.stdin = Some(stdin);
        slot.started = Instant::now();
        slot.ready = false;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if l == READY {
                    let _ = tx.send(Event::Ready(i, generation));
                }
            }
        });
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let st = child.wait().await;
            let _ = tx.send(Event::Exited(i, generation, st));
        });
        Ok(())
    }

    fn signal_all(&self, sig: Signal) {
        for pid in self.slots.iter().filter_map(|s| s.pid) {
            send_signal(pid, sig);
        }
    }

    fn pids(&self) -> String {
        let v: Vec<String> = self
            .slots
            .iter()
            .filter_map(|s| s.pid.map(|p| p.to_string()))
            .collect();
        v.join(", ")
    }

    /// Applies an event to the slots. Returns the worker and its exit status when a current
    /// worker exited.
    fn event(&mut self, ev: Event) -> Option<(usize, i32, String)> {
        match ev {
            Event::Ready(i, g) if self.slots[i].generation == g => {
                let s = &mut self.slots[i];
                s.ready = true;
                if s.restarts > 0 {
                    crate::log_line!("worker {i} restarted, pid {}", s.pid.unwrap_or(0));
                }
                None
            }
            Event::Exited(i, g, st) if self.slots[i].generation == g => {
                let s = &mut self.slots[i];
                s.stdin = None;
                s.ready = false;
                s.pid.take().map(|p| (i, p, status_text(&st)))
            }
            _ => None,
        }
    }

    /// Waits until workers `range` are ready; an exit of a current worker is an error.
    async fn wait_ready(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        while !self.slots[range.clone()].iter().all(|s| s.ready) {
            let Some(ev) = self.rx.recv().await else {
                return Err("event channel closed".into());
            };
            if let Some((i, pid, st)) = self.event(ev) {
                return Err(format!("worker {i} (pid {pid}) failed to start ({st})"));
            }
        }
        Ok(())
    }

    /// Worker 0 first (a start-up error shows once), then the others together.
    async fn start_all(&mut self) -> Result<()> {
        self.spawn(0).await?;
        self.wait_ready(0..1).await?;
        for i in 1..self.slots.len() {
            self.spawn(i).await?;
        }
        self.wait_ready(0..self.slots.len()).await
    }

    /// A worker died: schedule its restart.
    fn schedule_restart(&mut self, i: usize, pid: i32, status: &str) {
        let now = Instant::now();
        let s = &mut self.slots[i];
        if now.duration_since(s.started) >= STABLE {
            s.backoff = FIRST_BACKOFF;
        }
        let delay = s.backoff;
        s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
        s.restart_at = Some(now + delay);
        crate::log_line!(
            "worker {i} (pid {pid}) exited ({status}); restarting it in {} s",
            delay.as_secs_f32()
        );
    }

    /// Starts the workers whose restart time has come.
    async fn restart_due(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i].restart_at.is_some_and(|t| t <= now) {
                self.slots[i].restart_at = None;
                self.slots[i].restarts += 1;
                if let Err(e) = self.spawn(i).await {
                    crate::log_line!("{e}");
                    self.slots[i].started = now;
                    self.schedule_restart(i, 0, "not started");
                }
            }
        }
    }

    /// `SIGTERM` to every worker, then waits for them (`SIGKILL` after [`STOP_WAIT`]).
    /// A graceful stop: every worker gets `SIGQUIT` and drains its connections; the supervisor
    /// waits for them (`drain` and [`STOP_WAIT`] more), restarting none, then stops those left
    /// as [`Supervisor::stop`] does. `SIGTERM` or `SIGINT` meanwhile stops them at once.
    async fn drain(&mut self, drain: Duration, sig: &mut Signals) {
        self.signal_all(Signal::QUIT);
        let deadline = Instant::now() + drain + STOP_WAIT;
        while self.slots.iter().any(|s| s.pid.is_some()) {
            tokio::select! {
                ev = timeout_at(deadline, self.rx.recv()) => match ev {
                    Ok(Some(ev)) => {
                        self.event(ev);
                    }
                    _ => break,
                },
                _ = sig.term.recv() => break,
                _ = sig.int.recv() => break,
            }
        }
    }

    async fn stop(&mut self) {
        self.signal_all(Signal::TERM);
        let mut deadline = Instant::now() + STOP_WAIT;
        let mut killed = false;
        while self.slots.iter().any(|s| s.pid.is_some()) {
            match timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(ev)) => {
                    self.event(ev);
                }
                _ if !killed => {
                    crate::log_line!("workers {} did not stop; killing them", self.pids());
                    self.signal_all(Signal::KILL);
                    killed = true;
                    deadline = Instant::now() + Duration::from_secs(2);
                }
                _ => break,
            }
        }
        for s in &mut self.slots {
            s.stdin = None;
        }
    }
}

/// Checks, before any worker binds with `SO_REUSEPORT`, that no other process listens on the
/// instances' addresses (such a listener would otherwise share the connections or refuse
/// them only in the workers).
fn probe_listeners(cfg: &Config, only: Option<&str>) -> Result<()> {
    for addr in cfg.served(only).map(Instance::listen_addr) {
        std::net::TcpListener::bind(&addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    }
    Ok(())
}

/// What the supervisor is started with.
pub struct SuperviseOptions<'a> {
    pub workers: usize,
    /// The instance file (workers read it themselves).
    pub config: &'a Path,
    pub only: Option<String>,
    pub threads: Option<usize>,
    pub pid_file: Option<&'a Path>,
    /// Whether the count came from the file (then a changed count is reported on reload).
    pub from_file: bool,
}

/// Runs the supervisor until `SIGTERM`/`SIGINT`, or `SIGQUIT` and the workers' drain.
pub async fn supervise(o: SuperviseOptions<'_>) -> Result<()> {
    let mut sig = stop_signals()?;
    probe_listeners(&Config::load(o.config)?, o.only.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut args: Vec<OsString> = vec!["--config".into(), o.config.into()];
    if let Some(i) = &o.only {
        args.extend(["--instance".into(), i.into()]);
    }
    if let Some(t) = o.threads {
        args.extend(["--threads".into(), t.to_string().into()]);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let now = Instant::now();
    let mut sup = Supervisor {
        exe,
        args,
        secret: TicketSecret::random()?,
        slots: (0..o.workers)
            .map(|_| Slot {
                generation: 0,
                pid: None,
                stdin: None,
                started: now,
                ready: false,
                restarts: 0,
                backoff: FIRST_BACKOFF,
                restart_at: None,
            })
            .collect(),
        tx,
        rx,
    };
    let started = tokio::select! {
        r = sup.start_all() => r,
        _ = sig.term.recv() => Err("stopped during start-up".into()),
        _ = sig.int.recv() => Err("stopped during start-up".into()),
    };
    if let Err(e) = started {
        sup.stop().await;
        return Err(e);
    }
    let _pid = o.pid_file.map(PidFile::create).transpose()?;
    crate::log_line!("{} workers running, pids {}", o.workers, sup.pids());
    loop {
        let next = sup.slots.iter().filter_map(|s| s.restart_at).min();
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            _ = sig.hup.recv() => {
                sup.signal_all(Signal::HUP);
                if o.from_file {
                    let n = Config::load(o.config).ok().and_then(|c| c.workers).unwrap_or(1);
                    if n != o.workers {
                        crate::log_line!("a new workers count takes effect at restart only");
                    }
                }
            }
            _ = sig.term.recv() => break,
            _ = sig.int.recv() => break,
            _ = sig.quit.recv() => {
                let drain = Config::load(o.config)
                    .ok()
                    .and_then(|c| c.drain_timeout)
                    .unwrap_or(DEFAULT_DRAIN_TIMEOUT);
                sup.drain(Duration::from_secs(drain), &mut sig).await;
                break;
            }
            Some(ev) = sup.rx.recv() => {
                if let Some((i, pid, st)) = sup.event(ev) {
                    sup.schedule_restart(i, pid, &st);
                }
            }
            _ = sleep_until(next.unwrap_or(far)), if next.is_some() => sup.restart_due().await,
        }
    }
    sup.stop().await;
    Ok(())
}
