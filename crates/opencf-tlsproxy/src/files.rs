//! Reading the files the proxy is configured with: the instance file, PIN files, certificates,
//! chains, client CAs, CRLs and OCSP responses. Each read is of a regular file of bounded size,
//! so that a path that names a device (`/dev/zero`), a FIFO or a huge file fails at once with a
//! clear error instead of holding the daemon (a reload runs on the task that also answers
//! `SIGTERM`) or its memory.

use crate::Result;
use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// The largest instance file or PIN file read (1 MiB).
pub const MAX_CONFIG_FILE: u64 = 1 << 20;
/// The largest certificate, chain, CA, CRL, OCSP or key file read (64 MiB: a large CA's CRL
/// takes tens of megabytes).
pub const MAX_DATA_FILE: u64 = 64 << 20;

/// Reads `path` whole: a regular file (symbolic links followed) of at most `max` bytes. The
/// file is opened without blocking (a FIFO with no writer does not hold the open) and checked
/// once open, so it cannot be swapped for something else in between.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let f = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?);
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, FIFO, socket or directory is not read)",
        ));
    }
    let too_large = || {
        Error::new(
            ErrorKind::FileTooLarge,
            format!("larger than {max} bytes, the most read"),
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // A file that grows while it is read is still cut at `max`.
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large());
    }
    Ok(out)
}

/// Whether `a` and `b` name the same file: the same path, or the same file reached by two
/// paths (a link, `..`) where both exist.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if a == b {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Refuses a pid file or log that would be the instance file itself (`--config x.pid`, or
/// `--pid-file` naming the instance file): the daemon would overwrite the configuration with
/// its pid, append its log to it, or remove it when it stops.
pub fn check_beside_config(config: &Path, what: &str, path: &Path) -> Result<()> {
    if same_file(config, path) {
        return Err(format!(
            "the {what} {} would be the instance file itself; give the instance file another \
             name (such as NAME.toml) or the {what} another path",
            path.display()
        ));
    }
    Ok(())
}

/// [`read_bounded`] with the path in the error.
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>> {
    read_bounded(path, max).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_bound_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"0123456789").unwrap();
        assert_eq!(read(&small, 10).unwrap(), b"0123456789");
        let e = read(&small, 9).unwrap_err();
        assert!(e.contains("larger than 9 bytes"), "{e}");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read(&zero, MAX_CONFIG_FILE).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(read(dir.path(), MAX_CONFIG_FILE)
            .unwrap_err()
            .contains("not a regular file"));
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(read(&fifo, MAX_CONFIG_FILE)
            .unwrap_err()
            .contains("not a regular file"));
        let missing = read_bounded(&dir.path().join("none"), 1).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
    }
}
