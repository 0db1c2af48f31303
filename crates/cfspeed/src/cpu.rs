//! Process CPU use around a timed run (`getrusage`, read through
//! `opencf_abi::os`), so a reader can tell a busy machine (threads runnable
//! but not running: low CPU, involuntary switches) from contention inside a
//! module (threads sleeping on a lock: low CPU, voluntary switches).

use std::time::Duration;

/// A `getrusage(RUSAGE_SELF)` reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User plus system CPU time of all threads.
    pub cpu: Duration,
    /// User-mode CPU time of all threads.
    pub user: Duration,
    /// Kernel CPU time spent for the process.
    pub system: Duration,
    /// Voluntary context switches (blocking: locks, I/O).
    pub voluntary: u64,
    /// Involuntary context switches (preemption: other work on the CPU).
    pub involuntary: u64,
}

/// Reads the process's CPU use so far (zero if it cannot be read).
pub fn usage() -> Usage {
    match opencf_abi::os::process_usage() {
        Some(u) => Usage {
            cpu: u.user + u.system,
            user: u.user,
            system: u.system,
            voluntary: u.voluntary_switches,
            involuntary: u.involuntary_switches,
        },
        None => Usage::default(),
    }
}
