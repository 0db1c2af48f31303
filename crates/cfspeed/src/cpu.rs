//! Process CPU use around a timed run (`getrusage`), so a reader can tell a
//! busy machine (threads runnable but not running: low CPU, involuntary
//! switches) from contention inside a module (threads sleeping on a lock:
//! low CPU, voluntary switches).

use std::time::Duration;

/// A `getrusage(RUSAGE_SELF)` reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User plus system CPU time of all threads.
    pub cpu: Duration,
    /// Voluntary context switches (blocking: locks, I/O).
    pub voluntary: u64,
    /// Involuntary context switches (preemption: other work on the CPU).
    pub involuntary: u64,
}

/// Reads the process's CPU use so far.
pub fn usage() -> Usage {
    // SAFETY: an all-zero rusage is a valid value; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Usage::default();
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        voluntary: ru.ru_nvcsw as u64,
        involuntary: ru.ru_nivcsw as u64,
    }
}
