//! A bounded copy of the last lines a job printed, kept for the diagnosis at the end.
//!
//! The relay threads feed it the raw bytes of stdout and stderr as they arrive; it keeps what a
//! person would have seen on a terminal, as plain text:
//!
//! - ANSI escape sequences (colours, cursor movement, OSC titles and links) are removed;
//! - a `\r` that is not part of `\r\n` starts the line again, so a progress bar leaves only the
//!   text after its last `\r` (its final state);
//! - other control characters except tab are dropped, invalid UTF-8 is converted lossily;
//! - each line keeps at most [`TailLimits::line_bytes`] bytes (a cut line ends with `…`) and
//!   only the last [`TailLimits::lines`] lines are kept, so memory stays bounded whatever the
//!   job prints (50 MiB without a newline included).
//!
//! Lines of the two streams are interleaved in the order they were completed; each stream
//! assembles its own partial line, so a stderr line never splits a stdout line.

use std::collections::VecDeque;

/// How much of the job's output the tail keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    /// Number of lines kept (the last ones).
    pub lines: usize,
    /// Bytes kept of each line (UTF-8, after stripping escapes).
    pub line_bytes: usize,
}

impl Default for TailLimits {
    fn default() -> Self {
        Self {
            lines: 400,
            line_bytes: 4096,
        }
    }
}

/// Which of the job's output streams bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where the escape-sequence parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    /// Plain text.
    None,
    /// After ESC.
    Start,
    /// In a control sequence (`ESC [` … final byte 0x40–0x7e).
    Csi,
    /// In a string (OSC `ESC ]`, DCS `ESC P`, SOS, PM, APC) until BEL or ST (`ESC \`).
    Str,
    /// ESC seen inside a string: `\` ends it.
    StrEnd,
    /// `ESC` followed by intermediate bytes (e.g. charset selection `ESC ( B`).
    Intermediate,
}

/// One stream's line being assembled.
#[derive(Debug)]
struct Partial {
    text: Vec<u8>,
    /// Bytes were dropped because the line reached the limit.
    cut: bool,
    /// A `\r` was seen and not yet resolved: `\r\n` ends the line, anything else restarts it.
    cr: bool,
    esc: Esc,
}

impl Partial {
    fn new() -> Self {
        Self {
            text: Vec::new(),
            cut: false,
            cr: false,
            esc: Esc::None,
        }
    }

    fn clear(&mut self) {
        self.text.clear();
        self.cut = false;
    }
}

/// The bounded tail of a job's output.
#[derive(Debug)]
pub struct Tail {
    limits: TailLimits,
    lines: VecDeque<String>,
    partial: [Partial; 2],
}

impl Tail {
    pub fn new(limits: TailLimits) -> Self {
        Self {
            limits,
            lines: VecDeque::with_capacity(limits.lines.min(1024)),
            partial: [Partial::new(), Partial::new()],
        }
    }

    /// Takes bytes as the job wrote them to one stream.
    pub fn feed(&mut self, stream: Stream, bytes: &[u8]) {
        let index = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        for &b in bytes {
            self.byte(index, b);
        }
    }

    fn byte(&mut self, index: usize, b: u8) {
        let limit = self.limits.line_bytes;
        let p = &mut self.partial[index];
        if b == b'\n' && p.esc != Esc::None {
            // A broken escape sequence must not swallow the lines after it.
            p.esc = Esc::None;
        }
        match p.esc {
            Esc::None => {}
            Esc::Start => {
                p.esc = match b {
                    b'[' => Esc::Csi,
                    b']' | b'P' | b'X' | b'^' | b'_' => Esc::Str,
                    0x20..=0x2f => Esc::Intermediate,
                    _ => Esc::None,
                };
                return;
            }
            Esc::Csi => {
                if (0x40..=0x7e).contains(&b) {
                    p.esc = Esc::None;
                }
                return;
            }
            Esc::Str => {
                match b {
                    0x07 => p.esc = Esc::None,
                    0x1b => p.esc = Esc::StrEnd,
                    _ => {}
                }
                return;
            }
            Esc::StrEnd => {
                p.esc = if b == b'\\' { Esc::None } else { Esc::Str };
                return;
            }
            Esc::Intermediate => {
                if !(0x20..=0x2f).contains(&b) {
                    p.esc = Esc::None;
                }
                return;
            }
        }
        if p.cr && b != b'\r' {
            p.cr = false;
            if b != b'\n' {
                p.clear();
            }
        }
        match b {
            b'\n' => self.end_line(index),
            b'\r' => p.cr = true,
            0x1b => p.esc = Esc::Start,
            b'\t' | 0x20.. if b != 0x7f => {
                if p.text.len() < limit {
                    p.text.push(b);
                } else {
                    p.cut = true;
                }
            }
            _ => {}
        }
    }

    fn end_line(&mut self, index: usize) {
        let p = &mut self.partial[index];
        let line = finish_line(&p.text, p.cut, self.limits.line_bytes);
        p.clear();
        self.push(line);
    }

    fn push(&mut self, line: String) {
        if self.limits.lines == 0 {
            return;
        }
        if self.lines.len() == self.limits.lines {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// The kept lines, oldest first, with any unfinished line of each stream at the end (a
    /// progress bar that ended in `\r` keeps its last text).
    pub fn into_lines(mut self) -> Vec<String> {
        for index in 0..2 {
            let p = &self.partial[index];
            if !p.text.is_empty() {
                let line = finish_line(&p.text, p.cut, self.limits.line_bytes);
                self.push(line);
            }
        }
        self.lines.into()
    }

    /// Bytes held for unfinished lines (for tests of the bound).
    pub fn pending_bytes(&self) -> usize {
        self.partial.iter().map(|p| p.text.len()).sum()
    }
}

/// Converts a line's bytes to text of at most `limit` bytes, ending in `…` when cut.
fn finish_line(bytes: &[u8], cut: bool, limit: usize) -> String {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    let marker = "…";
    if cut || text.len() > limit {
        let keep = limit.saturating_sub(marker.len());
        let mut end = keep.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        // A multi-byte character cut at the byte limit shows as U+FFFD: drop it.
        while text.ends_with('\u{fffd}') && cut {
            text.pop();
        }
        if limit >= marker.len() {
            text.push_str(marker);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn tail_of(chunks: &[(Stream, &[u8])], limits: TailLimits) -> Vec<String> {
        let mut t = Tail::new(limits);
        for (s, b) in chunks {
            t.feed(*s, b);
        }
        t.into_lines()
    }

    fn simple(bytes: &[u8]) -> Vec<String> {
        tail_of(&[(Stream::Stdout, bytes)], TailLimits::default())
    }

    #[test]
    fn plain_lines_and_unfinished_last_line() {
        assert_eq!(simple(b"one\ntwo\nthree"), ["one", "two", "three"]);
        assert_eq!(simple(b"one\n\ntwo\n"), ["one", "", "two"]);
        assert!(simple(b"").is_empty());
    }

    #[test]
    fn ansi_sequences_are_stripped() {
        assert_eq!(
            simple(b"\x1b[1;31mError:\x1b[0m bad \x1b[38;5;208mthing\x1b[m\n"),
            ["Error: bad thing"]
        );
        // OSC title (BEL-terminated) and hyperlink (ST-terminated), charset selection, cursor.
        assert_eq!(
            simple(b"\x1b]0;title\x07a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\x1b(Bb\x1b[2K\x1b[1Gc\n"),
            ["alinkbc"]
        );
        // A sequence split across chunks.
        assert_eq!(
            tail_of(
                &[(Stream::Stdout, b"x\x1b[3"), (Stream::Stdout, b"1my\n")],
                TailLimits::default()
            ),
            ["xy"]
        );
        // A broken sequence does not swallow the next line.
        assert_eq!(simple(b"a\x1b]unterminated\nnext\n"), ["a", "next"]);
    }

    #[test]
    fn carriage_return_keeps_the_text_after_it() {
        assert_eq!(
            simple(b"epoch 1:  10%\repoch 1:  50%\repoch 1: 100%\ndone\n"),
            ["epoch 1: 100%", "done"]
        );
        // CRLF ends a line; it does not erase it.
        assert_eq!(simple(b"dos line\r\nnext\r\n"), ["dos line", "next"]);
        // A bar that ends in \r (no newline) keeps its last state.
        assert_eq!(simple(b"\r 10%\r 90%\r"), [" 90%"]);
        // tqdm style: \r then escape then text.
        assert_eq!(simple(b"old\r\x1b[Knew\n"), ["new"]);
        // \r split from \n across chunks.
        assert_eq!(
            tail_of(
                &[(Stream::Stdout, b"abc\r"), (Stream::Stdout, b"\ndef\n")],
                TailLimits::default()
            ),
            ["abc", "def"]
        );
    }

    #[test]
    fn control_bytes_dropped_and_invalid_utf8_lossy() {
        assert_eq!(simple(b"a\0b\x07c\td\x7f\n"), ["abc\td"]);
        assert_eq!(
            simple(b"caf\xc3\xa9 \xff\xfe ok\n"),
            ["café \u{fffd}\u{fffd} ok"]
        );
    }

    #[test]
    fn streams_interleave_by_completed_line() {
        let lines = tail_of(
            &[
                (Stream::Stdout, b"out-a"),
                (Stream::Stderr, b"err-1\n"),
                (Stream::Stdout, b"-cont\n"),
                (Stream::Stderr, b"err-2\nerr-"),
                (Stream::Stdout, b"out-b\n"),
            ],
            TailLimits::default(),
        );
        assert_eq!(lines, ["err-1", "out-a-cont", "err-2", "out-b", "err-"]);
    }

    #[test]
    fn keeps_only_the_last_lines() {
        let limits = TailLimits {
            lines: 3,
            line_bytes: 100,
        };
        let mut text = String::new();
        for i in 1..=10 {
            writeln!(text, "line {i}").unwrap();
        }
        assert_eq!(
            tail_of(&[(Stream::Stderr, text.as_bytes())], limits),
            ["line 8", "line 9", "line 10"]
        );
        let none = TailLimits {
            lines: 0,
            line_bytes: 100,
        };
        assert!(tail_of(&[(Stream::Stderr, text.as_bytes())], none).is_empty());
    }

    #[test]
    fn long_lines_are_cut_at_a_char_boundary() {
        let limits = TailLimits {
            lines: 10,
            line_bytes: 10,
        };
        let lines = tail_of(&[(Stream::Stdout, b"abcdefghijklmnop\nshort\n")], limits);
        assert_eq!(lines, ["abcdefg…", "short"]);
        assert!(lines.iter().all(|l| l.len() <= 10));
        // Multi-byte characters are never split.
        let lines = tail_of(&[(Stream::Stdout, "ééééééééé\n".as_bytes())], limits);
        assert_eq!(lines, ["ééé…"]);
        // Invalid bytes expand to 3-byte U+FFFD; the cap still holds.
        let lines = tail_of(
            &[(Stream::Stdout, &[0xff; 10][..]), (Stream::Stdout, b"\n")],
            limits,
        );
        assert!(lines[0].len() <= 10, "{:?}", lines[0]);
        // A \r restarts a cut line.
        let lines = tail_of(&[(Stream::Stdout, b"abcdefghijklmnop\rxy\n")], limits);
        assert_eq!(lines, ["xy"]);
    }

    #[test]
    fn memory_is_bounded_without_newlines() {
        let limits = TailLimits::default();
        let mut t = Tail::new(limits);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..(50 * 16) {
            // 50 MiB
            t.feed(Stream::Stdout, &chunk);
            assert!(t.pending_bytes() <= limits.line_bytes);
        }
        let lines = t.into_lines();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].len() <= limits.line_bytes);
        assert!(lines[0].ends_with('…'));
    }

    #[test]
    fn memory_is_bounded_with_many_lines() {
        let limits = TailLimits {
            lines: 5,
            line_bytes: 8,
        };
        let mut t = Tail::new(limits);
        for _ in 0..10_000 {
            t.feed(Stream::Stdout, b"0123456789abcdef\n");
        }
        let lines = t.into_lines();
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|l| l.len() <= 8));
    }
}
