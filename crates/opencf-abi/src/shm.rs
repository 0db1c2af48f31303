//! Shared memory as a safe slice of atomic 64-bit cells: a file (normally in `/dev/shm`)
//! mapped with `mmap`, so that other processes see the counters one process writes. Used by
//! `opencf-stat`, which itself forbids `unsafe`.
//!
//! ```no_run
//! use std::sync::atomic::Ordering;
//! // A new file: `create` never opens an existing one.
//! let cells = opencf_abi::shm::SharedCells::create("/dev/shm/example".as_ref(), 16)?;
//! cells.cells()[0].fetch_add(1, Ordering::Relaxed);
//! let view = opencf_abi::shm::SharedCells::open("/dev/shm/example".as_ref())?;
//! assert_eq!(view.cells()[0].load(Ordering::Relaxed), 1);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

const CELL: usize = std::mem::size_of::<AtomicU64>();

/// A file of `u64` cells mapped into memory; unmapped when dropped.
///
/// [`create`](Self::create) maps the file shared and writable: stores are seen by every
/// process that maps the file. [`open`](Self::open) maps an existing file for reading: the
/// mapping is private, so it shows what the file's writer stores, and a store made through it
/// (which a reader has no reason to make) stays in this process.
///
/// The file must not be shortened while it is mapped: touching a cell past the new end raises
/// `SIGBUS`. The files used here are created at their final size and never truncated.
pub struct SharedCells {
    ptr: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access goes through `&AtomicU64`,
// which is `Sync`, and unmapping happens once, in `Drop`.
unsafe impl Send for SharedCells {}
// SAFETY: as above; shared references hand out only atomics.
unsafe impl Sync for SharedCells {}

impl SharedCells {
    /// Creates `path` with mode 0600, sizes it to `cells` zeroed cells and maps it shared and
    /// writable. The file must not exist yet (`AlreadyExists`): a file that may be mapped
    /// elsewhere, even in this process, is never truncated under its writer. A symbolic link
    /// at `path` is refused.
    pub fn create(path: &Path, cells: usize) -> io::Result<SharedCells> {
        let bytes = byte_len(cells)?;
        let file = open_regular(path, Some(OpenOptions::new().create_new(true)))?;
        file.set_len(bytes as u64)?;
        map(&file, bytes, libc::MAP_SHARED)
    }

    /// Opens `path`, creating it with mode 0600 where it is missing, makes it at least `cells`
    /// cells long (never shorter) and maps those cells shared and writable: every process that
    /// does the same shares them, for counters that several processes bump. A symbolic link
    /// or a file that is not a regular file is refused.
    pub fn open_shared(path: &Path, cells: usize) -> io::Result<SharedCells> {
        let bytes = byte_len(cells)?;
        let file = open_regular(path, Some(OpenOptions::new().create(true)))?;
        // Two processes creating the file at once both extend it to the same length; a
        // length already reached is left alone, so no cell is ever zeroed under its users.
        if file.metadata()?.len() < bytes as u64 {
            file.set_len(bytes as u64)?;
        }
        map(&file, bytes, libc::MAP_SHARED)
    }

    /// Maps an existing regular file for reading (private mapping, see the type's
    /// documentation). Its size must be a non-zero multiple of 8 bytes; a symbolic link or a
    /// file that is not a regular file is refused.
    pub fn open(path: &Path) -> io::Result<SharedCells> {
        let file = open_regular(path, None)?;
        let size = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        if size == 0 || size % CELL != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "size is not a non-zero multiple of 8 bytes",
            ));
        }
        map(&file, size, libc::MAP_PRIVATE)
    }

    /// The mapped cells.
    pub fn cells(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is the start of a live mapping of `len * 8` bytes, page-aligned (so
        // aligned for `AtomicU64`), readable and writable, and valid until `Drop`, which cannot
        // run while this borrow of `self` lives. Every bit pattern is a valid `AtomicU64`, and
        // other processes touch the memory only through atomic operations as well.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no cells (never the case for a successfully mapped file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedCells {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in `map`, unmapped only here; no
        // borrow of the cells outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len * CELL);
        }
    }
}

fn byte_len(cells: usize) -> io::Result<usize> {
    match cells.checked_mul(CELL) {
        Some(b) if b > 0 => Ok(b),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cell count must be non-zero and fit in memory",
        )),
    }
}

/// Opens a regular file at `path` without following a symbolic link: for reading only
/// (`writable` `None`), or for reading and writing with those options' way of creating it
/// (mode 0600). Anything but a regular file is refused.
fn open_regular(path: &Path, writable: Option<&mut OpenOptions>) -> io::Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    let file = match writable {
        Some(o) => o
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(flags)
            .open(path)?,
        None => OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)?,
    };
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Maps `bytes` of `file` readable and writable, `flags` `MAP_SHARED` or `MAP_PRIVATE`.
fn map(file: &File, bytes: usize, flags: libc::c_int) -> io::Result<SharedCells> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: a fresh mapping (address chosen by the kernel, so nothing existing is replaced) of
    // `bytes` bytes of an open file descriptor; the result is checked against MAP_FAILED. The
    // mapping stays valid after the descriptor is closed.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            prot,
            flags,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(p.cast::<AtomicU64>())
        .ok_or_else(|| io::Error::other("mmap returned NULL"))?;
    Ok(SharedCells {
        ptr,
        len: bytes / CELL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn writer_and_reader_share_cells() {
        let dir = std::env::temp_dir().join(format!("opencf-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cells");
        let _ = std::fs::remove_file(&path);
        let w = SharedCells::create(&path, 4).unwrap();
        assert_eq!(w.len(), 4);
        assert!(!w.is_empty());
        w.cells()[3].store(42, Ordering::Release);
        let r = SharedCells::open(&path).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r.cells()[3].load(Ordering::Acquire), 42);
        w.cells()[3].fetch_add(1, Ordering::Relaxed);
        assert_eq!(r.cells()[3].load(Ordering::Relaxed), 43);
        // A store through the private view stays private.
        r.cells()[0].store(7, Ordering::Relaxed);
        assert_eq!(w.cells()[0].load(Ordering::Relaxed), 0);
        assert!(SharedCells::create(&path, 0).is_err());
        // An existing file is never created over: its writer keeps its cells.
        let again = SharedCells::create(&path, 4).err().map(|e| e.kind());
        assert_eq!(again, Some(io::ErrorKind::AlreadyExists));
        assert_eq!(w.cells()[3].load(Ordering::Relaxed), 43);
        // Shared cells: two mappings of one file see each other's stores; a second
        // opening neither shortens nor zeroes the file.
        let shared = dir.join("shared");
        let _ = std::fs::remove_file(&shared);
        let a = SharedCells::open_shared(&shared, 1).unwrap();
        a.cells()[0].fetch_add(5, Ordering::AcqRel);
        let b = SharedCells::open_shared(&shared, 1).unwrap();
        assert_eq!(b.cells()[0].load(Ordering::Acquire), 5);
        b.cells()[0].fetch_add(1, Ordering::AcqRel);
        assert_eq!(a.cells()[0].load(Ordering::Acquire), 6);
        assert_eq!(std::fs::metadata(&shared).unwrap().len(), 8);
        drop((a, b));
        std::os::unix::fs::symlink(&shared, dir.join("link")).unwrap_or(());
        assert!(SharedCells::open_shared(&dir.join("link"), 1).is_err());
        assert!(SharedCells::open_shared(&dir, 1).is_err());
        let _ = std::fs::remove_file(dir.join("link"));
        let _ = std::fs::remove_file(&shared);
        drop(w);
        drop(r);
        std::fs::write(&path, b"odd").unwrap();
        assert!(SharedCells::open(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
