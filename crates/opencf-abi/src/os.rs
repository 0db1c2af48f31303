//! Small operating-system queries that need a libc call, kept here so that the crates using
//! them stay free of `unsafe`.

use std::time::Duration;

/// CPU use and context switches of the whole process so far (`getrusage(RUSAGE_SELF)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    /// CPU time spent in user mode, all threads together.
    pub user: Duration,
    /// CPU time spent in the kernel on the process's behalf, all threads together.
    pub system: Duration,
    /// Voluntary context switches (a thread blocked: a lock, I/O, a sleep).
    pub voluntary_switches: u64,
    /// Involuntary context switches (a thread was preempted by other work).
    pub involuntary_switches: u64,
}

/// Reads the process's CPU use and context switches so far; `None` if `getrusage` fails.
pub fn process_usage() -> Option<ProcessUsage> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: RUSAGE_SELF with a pointer to a writable `rusage`, which getrusage fills.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: zero-initialized (a valid `rusage`) and filled by the successful call.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0).min(999_999) * 1000,
        )
    };
    Some(ProcessUsage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        voluntary_switches: u64::try_from(ru.ru_nvcsw).unwrap_or(0),
        involuntary_switches: u64::try_from(ru.ru_nivcsw).unwrap_or(0),
    })
}

/// The process's (user, system) CPU time so far; `None` if `getrusage` fails.
pub fn process_cpu_times() -> Option<(Duration, Duration)> {
    process_usage().map(|u| (u.user, u.system))
}

/// CPU time the calling thread has used so far (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`):
/// unlike a clock on the wall, it does not grow while the thread waits for a core. `None` if
/// the call fails.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = std::mem::MaybeUninit::<libc::timespec>::zeroed();
    // SAFETY: a valid clock id and a pointer to a writable `timespec`, which the call fills.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, ts.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: zero-initialized (a valid `timespec`) and filled by the successful call.
    let ts = unsafe { ts.assume_init() };
    Some(Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0).min(999_999_999),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_with_work_not_with_sleep() {
        let t0 = thread_cpu_time().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t1 = thread_cpu_time().unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let t2 = thread_cpu_time().unwrap();
        assert!(t1 - t0 < Duration::from_millis(25), "slept: {:?}", t1 - t0);
        assert!(t2 - t1 >= Duration::from_millis(5), "worked: {:?}", t2 - t1);
    }

    #[test]
    fn cpu_time_grows() {
        let (u0, s0) = process_cpu_times().unwrap();
        // Burn a little CPU.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let (u1, s1) = process_cpu_times().unwrap();
        assert!(u1 + s1 > u0 + s0);
        assert!(process_usage().is_some());
    }
}
