//! [`SessionLock`]: the lock of a framework session's state, cheaper than `std::sync::Mutex`
//! on the path every operation takes.
//!
//! A PKCS#11 session is used by one thread at a time in every correct application, so its lock
//! is almost never contended; what counts is the cost of taking and releasing it. `Mutex`
//! spends two atomic read-modify-write instructions per call (compare-exchange to lock, swap
//! to unlock, so that it can wake waiters). This lock takes one: unlocking is a plain release
//! store, and a thread that finds it taken spins briefly and then yields and sleeps in growing
//! steps (up to a millisecond) instead of being woken. That waiting is the price of contention,
//! which only an application sharing one session across threads, or a second thread closing a
//! session in use, ever causes.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A mutual-exclusion lock whose release is a single store (see the module documentation).
/// There is no poisoning: a panic while the lock is held (caught at the C boundary) leaves the
/// value as it was at that point, which is what `Mutex::lock().unwrap_or_else(into_inner)`
/// gave before.
#[derive(Default)]
pub struct SessionLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the flag
// is set with Acquire by the only thread that saw it clear, and cleared with Release).
unsafe impl<T: Send> Send for SessionLock<T> {}
// SAFETY: as above; `&SessionLock<T>` hands out `&mut T` to one thread at a time.
unsafe impl<T: Send> Sync for SessionLock<T> {}

impl<T> SessionLock<T> {
    /// A lock holding `value`.
    pub fn new(value: T) -> Self {
        SessionLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting while another thread holds it.
    #[inline]
    pub fn lock(&self) -> SessionGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SessionGuard { lock: self }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut round = 0u32;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            round = round.saturating_add(1);
            match round {
                0..=64 => std::hint::spin_loop(),
                65..=80 => std::thread::yield_now(),
                _ => {
                    let us = 1u64 << (round - 80).min(10);
                    std::thread::sleep(Duration::from_micros(us));
                }
            }
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SessionLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLock")
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Access to the value of a [`SessionLock`]; dropping it releases the lock.
pub struct SessionGuard<'a, T> {
    lock: &'a SessionLock<T>,
}

impl<T> Deref for SessionGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only access while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SessionGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only access while it lives.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SessionGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_and_counts_exactly() {
        let l = Arc::new(SessionLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = l.lock();
                        // A non-atomic read-modify-write that loses updates without exclusion.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 80_000);
    }

    #[test]
    fn waits_for_a_long_holder() {
        let l = Arc::new(SessionLock::new(Vec::<u32>::new()));
        let g = l.lock();
        let l2 = Arc::clone(&l);
        let t = std::thread::spawn(move || l2.lock().push(2));
        std::thread::sleep(Duration::from_millis(30));
        drop(g);
        t.join().unwrap();
        l.lock().push(3);
        assert_eq!(*l.lock(), vec![2, 3]);
    }
}
