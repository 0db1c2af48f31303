//! Hex, DER building blocks and small helpers.

use crate::error::{Error, Result};

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `s` cut to 40 characters and "…" for an error message.
pub fn shorten(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A label (bytes, which need not be UTF-8) as an error message shows it: on one line, with
/// control characters escaped (`\n`, `\u{1b}`: a label cannot break the message or send
/// terminal codes), cut as [`shorten`] cuts.
pub fn shown_label(raw: &[u8]) -> String {
    let mut text = String::new();
    for c in String::from_utf8_lossy(raw).chars() {
        if c.is_control() {
            text.extend(c.escape_default());
        } else {
            text.push(c);
        }
    }
    shorten(&text)
}

/// Bytes from hex: pairs of hex digits, optionally after `0x` and with `:` between bytes
/// (`0a1b`, `0x0a1b`, `0a:1b`). Anything else is a usage error.
pub fn unhex(given: &str) -> Result<Vec<u8>> {
    let bare = given
        .strip_prefix("0x")
        .or_else(|| given.strip_prefix("0X"))
        .unwrap_or(given);
    let digits: Vec<u8> = bare.bytes().filter(|c| *c != b':').collect();
    let shown = shorten(given);
    if let Some(c) = digits.iter().find(|c| !c.is_ascii_hexdigit()) {
        let c = char::from(*c);
        let what = if c.is_ascii_graphic() {
            format!("'{c}'")
        } else {
            "a character other than 0-9, a-f".into()
        };
        return Err(Error::Usage(format!(
            "'{shown}' is not hex: {what} (hex digits, optionally after 0x)"
        )));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(Error::Usage(format!("'{shown}' is not hex: odd length")));
    }
    // An empty id would select every object without one (`delete --id "$UNSET"`).
    if digits.is_empty() {
        return Err(Error::Usage(format!(
            "'{shown}' is an empty id; give at least one byte, or leave --id out"
        )));
    }
    Ok(digits
        .chunks(2)
        .map(|p| (nibble(p[0]) << 4) | nibble(p[1]))
        .collect())
}

/// The value of a hex digit (checked by the caller).
fn nibble(c: u8) -> u8 {
    (c as char).to_digit(16).unwrap_or(0) as u8
}

/// DER length octets.
pub fn der_len(len: usize) -> Vec<u8> {
    if len < 0x80 {
        return vec![len as u8];
    }
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

/// One DER TLV with the given tag.
pub fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(der_len(content.len()));
    out.extend_from_slice(content);
    out
}

/// Splits the first TLV off `data`: (whole TLV, content, rest).
pub fn der_next(data: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let bad = || Error::File("malformed DER".into());
    if data.len() < 2 {
        return Err(bad());
    }
    let first = data[1] as usize;
    let (hdr, len) = if first < 0x80 {
        (2, first)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 || data.len() < 2 + n {
            return Err(bad());
        }
        (
            2 + n,
            data[2..2 + n]
                .iter()
                .fold(0usize, |a, b| (a << 8) | *b as usize),
        )
    };
    let end = hdr.checked_add(len).ok_or_else(bad)?;
    if data.len() < end {
        return Err(bad());
    }
    Ok((&data[..end], &data[hdr..end], &data[end..]))
}

/// The content of a DER OCTET STRING, or the bytes unchanged when they are not one
/// (CKA_EC_POINT is an OCTET STRING; some modules store the raw point).
pub fn unwrap_octet_string(data: &[u8]) -> Vec<u8> {
    if data.first() == Some(&0x04) {
        if let Ok((whole, content, rest)) = der_next(data) {
            if rest.is_empty() && whole.len() == data.len() {
                return content.to_vec();
            }
        }
    }
    data.to_vec()
}

/// The most an input file (key, certificate, request, PKCS#12) may hold.
pub const MAX_INPUT_FILE: u64 = 64 << 20;

/// Reads `path` into `buf` through a bound of `max` bytes, so that a pipe works and a device
/// that never ends is not read without end; whether the whole file fitted.
pub fn read_within(path: &std::path::Path, max: u64, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    use std::io::Read;
    std::fs::File::open(path)?.take(max + 1).read_to_end(buf)?;
    Ok(buf.len() as u64 <= max)
}

/// Reads a whole file of at most [`MAX_INPUT_FILE`] bytes ([`read_within`]), naming it in the
/// error.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    let fits = read_within(path, MAX_INPUT_FILE, &mut data)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    if !fits {
        return Err(Error::File(format!(
            "{} is larger than {MAX_INPUT_FILE} bytes, the most an input file may hold",
            path.display()
        )));
    }
    Ok(data)
}

/// Writes a private key's file: readable by its owner only (0600), as [`write_file`] writes.
pub fn write_private_file(path: &std::path::Path, data: &[u8]) -> Result<()> {
    write_output(path, data, 0o600)
}

/// Writes an output file (`-`: standard output). The file is written whole under a new name
/// beside `path` (made with `O_EXCL`, so a link planted at that name is not followed) and
/// renamed over `path`: a reader never sees half a file, and an output path that is a
/// symbolic link is refused, never followed (a link in a directory others can write to
/// would otherwise have a private key written into the file it names).
pub fn write_file(path: &std::path::Path, data: &[u8]) -> Result<()> {
    write_output(path, data, 0o644)
}

fn write_output(path: &std::path::Path, data: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::sync::atomic::{AtomicU64, Ordering};
    if path.as_os_str() == "-" {
        return std::io::stdout()
            .write_all(data)
            .map_err(|e| Error::io("cannot write to stdout", e));
    }
    let err = |e| Error::io(format!("cannot write {}", path.display()), e);
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::File(format!(
            "cannot write {}: it is a symbolic link; name the file itself",
            path.display()
        )));
    }
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(
        ".{name}.pktool-{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        if mode == 0o600 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err(e)
    })
}
