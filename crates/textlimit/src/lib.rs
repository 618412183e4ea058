//! Input from outside, bounded: the one place gpuwatch's crates read a file someone else
//! named, and quote input back in an error.
//!
//! - [`read_file`]: a whole small file (a config, a scenario) as UTF-8, refusing what is not a
//!   regular file (`/dev/zero`, a FIFO, a directory) and anything over a size cap, without
//!   blocking on a FIFO that has no writer.
//! - [`open`]: a file to stream (a recording, which may legitimately be a pipe), opened without
//!   blocking on a FIFO that has no writer.
//! - [`read_line`]: one line of a stream, at most a cap (the rest is not read).
//! - [`excerpt`] / [`excerpt_lines`]: input quoted in a message, at most [`QUOTE_MAX`]
//!   characters with `…` and the full length, so that a 50 MiB line does not become a 50 MiB
//!   error message.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// The most characters of input an error message quotes.
pub const QUOTE_MAX: usize = 200;

/// `text` when it has at most `max` characters; else its first `max` characters, `…` and its
/// length in bytes.
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!("{}… ({} bytes in all)", &text[..cut], text.len())),
    }
}

/// `message` with each of its lines shortened by [`excerpt`] (a parser's message that quotes
/// the offending line, as TOML's does).
pub fn excerpt_lines(message: &str, max: usize) -> Cow<'_, str> {
    if message.lines().all(|l| l.len() <= max) {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len().min(64 * max));
    for (i, line) in message.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&excerpt(line, max));
    }
    Cow::Owned(out)
}

/// Opens `path` for reading without blocking on a FIFO that has no writer (it then reads as
/// empty). The descriptor is back in blocking mode once opened.
pub fn open(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NONBLOCK.bits().cast_signed())
        .open(path)?;
    let flags = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
    Ok(file)
}

/// What kind of file this is, for "not a regular file" messages.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The whole of the regular file at `path` as UTF-8 text, at most `max` bytes.
///
/// Refused with an `io::Error` whose message says why: not a regular file (`InvalidInput`),
/// larger than `max` (`FileTooLarge`), not UTF-8 (`InvalidData`). Never blocks on a FIFO and
/// never reads more than `max + 1` bytes.
pub fn read_file(path: &Path, max: u64) -> io::Result<String> {
    let file = open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {} (expected a regular file)", kind(meta.file_type())),
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "it is larger than {} (expected a small text file)",
                size(max)
            ),
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        // It grew while being read.
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// One line (with its `\n`) into `buf`, reading at most `max` bytes of it.
///
/// Returns the bytes read (0 at the end) and whether the line is longer than `max`; then `buf`
/// holds its first `max` bytes and the rest is still unread.
pub fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<(usize, bool)> {
    let n = reader.take(max as u64).read_until(b'\n', buf)?;
    let too_long = n == max && buf.last() != Some(&b'\n') && !reader.fill_buf()?.is_empty();
    Ok((n, too_long))
}

/// `n` bytes as messages say it (`1 MiB`, `16 MiB`, `512 bytes`).
pub fn size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("abcdef", 3), "abc… (6 bytes in all)");
        assert_eq!(excerpt("€€€€", 2), "€€… (12 bytes in all)");
        let long = "y".repeat(50 << 20);
        assert!(excerpt(&long, QUOTE_MAX).len() < 250);
        let msg = format!("TOML parse error\n1 | {long}\n  | ^\nexpected");
        let short = excerpt_lines(&msg, QUOTE_MAX);
        assert!(short.len() < 600, "{}", short.len());
        assert!(short.ends_with("\n  | ^\nexpected"));
    }

    #[test]
    fn devices_fifos_and_big_files_are_refused() {
        let e = read_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is a character device (expected a regular file)"
        );
        let dir = std::env::temp_dir().join(format!("textlimit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        let e = read_file(&big, 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(read_file(&big, 2048).unwrap().len(), 2048);
        let e = read_file(&dir, 1024).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_are_capped() {
        let mut r = io::BufReader::new(&b"abc\nabcdefgh\nxy"[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), (4, false));
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), (4, true));
        assert_eq!(buf, b"abcd");
        let mut r = io::BufReader::new(&b"abcd"[..]);
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), (4, false));
    }
}
