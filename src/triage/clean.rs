//! Line normalisation: what real logs put around a message, taken off before the classifier
//! reads it. Everything here is a byte-level prefix or suffix strip (no regex, no allocation),
//! so a line costs one look at its first bytes when it carries no decoration.
//!
//! Decorations seen through, in any nesting (`> [rank0]: 2024-03-01 12:00:01 - ERROR - …`):
//! - `>` quote markers (a pasted quote, `> > ` nested) and markdown code fences (```` ``` ````,
//!   ```` ```python ````, `~~~`), which read as blank lines;
//! - rank prefixes: `[rank3]:`, `[default0]:`, `[1,0]<stderr>:` (mpirun), `rank0: `, SLURM
//!   `srun --label` (`0: `), host names (`node-3: `), Ray (`(RayTrainWorker pid=123, ip=…) `);
//! - timestamps: `2024-03-01 12:00:01,123`, ISO `2024-03-01T12:00:01.123Z` (and offsets),
//!   `12:00:01.123`, bracketed `[2024-03-01 12:00:01]`, followed by ` - `, ` | `, `: `;
//! - glog: `E0312 12:34:56.789012 1234 file.cc:123] `, TensorFlow's `W tensorflow/…:123] `;
//! - logging levels: `ERROR:root:`, `INFO:__main__:`, `ERROR: `, `ERROR - `, `| ERROR |`
//!   (loguru, with its `module:function:12 - `), `[ERROR]`, hydra's `[root][ERROR] - `,
//!   `DeepSpeed`'s `[INFO] [launch.py:12:main] `, `name - ERROR - `;
//! - torchrun's `traceback : ` field in a `ChildFailedError` report.
//!
//! A message cut short (`…`, `...` at the end: a collector's line limit, an issue title) loses
//! the ellipsis and the token it cut (`9.6...`, `c...`): the classifier reads the longest
//! prefix that says nothing wrong.

use std::borrow::Cow;

/// Passes of prefix stripping at most (each takes one decoration off).
const MAX_PASSES: usize = 12;

const LEVELS: &[&str] = &[
    "CRITICAL", "DEBUG", "ERROR", "FATAL", "INFO", "NOTICE", "TRACE", "WARNING", "WARN", "SUCCESS",
];

/// The line with its decorations taken off (trimmed); `""` for a code fence. A truncated
/// message also has the parentheses it opened closed (`(GPU 0; 10.76 GiB total capacity; 9.6...`
/// reads `(GPU 0; 10.76 GiB total capacity)`): the only case that allocates.
pub(crate) fn clean(line: &str) -> Cow<'_, str> {
    let s = strip_prefixes(line);
    if matches!(s.as_bytes().first(), Some(b'`' | b'~')) && is_fence(s) {
        return Cow::Borrowed("");
    }
    let cut = strip_truncation(s);
    if cut.len() == s.len() {
        return Cow::Borrowed(s);
    }
    let cut = cut.trim_end_matches([';', ',', ' ']);
    let open = cut.bytes().filter(|b| *b == b'(').count();
    let close = cut.bytes().filter(|b| *b == b')').count();
    if open <= close {
        return Cow::Borrowed(cut);
    }
    let mut closed = String::with_capacity(cut.len() + open - close);
    closed.push_str(cut);
    closed.extend(std::iter::repeat_n(')', open - close));
    Cow::Owned(closed)
}

/// The line without its leading decorations (trimmed).
pub(crate) fn strip_prefixes(line: &str) -> &str {
    let mut s = line.trim();
    for _ in 0..MAX_PASSES {
        let next = strip_one(s).trim_start();
        if next.len() == s.len() {
            break;
        }
        s = next;
    }
    s
}

/// A line that starts a record of its own: a decoration prefix, or a line that is nothing but
/// one (a wrapped piece of a message never starts with a timestamp or a rank).
pub(crate) fn has_prefix(line: &str) -> bool {
    let t = line.trim();
    strip_one(t).len() != t.len()
}

/// A markdown code fence: ```` ``` ````, ```` ```python ````, `~~~`.
pub(crate) fn is_fence(line: &str) -> bool {
    let t = line.trim();
    (t.starts_with("```") || t.starts_with("~~~"))
        && t[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b' ' | b'`'))
}

/// Lines of a launcher's summary (torchrun's `ChildFailedError` report, accelerate's and
/// `DeepSpeed`'s launchers, `torch.multiprocessing.spawn`): never the cause; the rank's own error,
/// printed above, is.
pub(crate) fn is_wrapper_report(line: &str) -> bool {
    line.starts_with("Root Cause (first observed failure)")
        || line.starts_with("Failures:")
        || line.starts_with("error_file:")
        || line.contains("To enable traceback see: https://pytorch.org/docs/stable/elastic/errors")
        || line.contains("ChildFailedError")
        || line.contains("elastic.multiprocessing")
        || line.contains("ProcessRaisedException")
        || (line.contains("CalledProcessError") && line.contains("returned non-zero exit status"))
        || (line.contains("exits with return code") && line.contains("launch"))
}

fn strip_one(s: &str) -> &str {
    let b = s.as_bytes();
    match b.first() {
        Some(b'>') => &s[1..],
        Some(b'[') => bracket(s),
        Some(b'(') => ray(s),
        Some(b'0'..=b'9') => timestamp(s).or_else(|| label(s)).unwrap_or(s),
        Some(b'|') => level_after_bar(s).unwrap_or(s),
        Some(b'A'..=b'Z') => glog(s)
            .or_else(|| level(s))
            .or_else(|| named_level(s))
            .unwrap_or(s),
        Some(b'a'..=b'z' | b'_') => {
            // One look at what follows the first word: most lines (`step 12 loss=…`) have
            // neither `: ` nor ` - ` there.
            let word = b
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
                .count();
            match &b[word..] {
                [b':', b' ', ..] => host(s),
                [b' ', b'-', b' ', ..] => named_level(s),
                [b' ', b':', b' ', ..] => s.strip_prefix("traceback : "),
                _ => None,
            }
            .unwrap_or(s)
        }
        _ => s,
    }
}

/// Counts ASCII digits at the start of `b`.
fn digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// `hh:mm:ss` with optional `.123`/`,123` fraction: its length in bytes.
fn time_len(b: &[u8]) -> Option<usize> {
    if b.len() < 8
        || digits(b) != 2
        || b[2] != b':'
        || digits(&b[3..]) != 2
        || b[5] != b':'
        || digits(&b[6..]) != 2
    {
        return None;
    }
    let mut n = 8;
    if matches!(b.get(n), Some(b'.' | b',')) && digits(&b[n + 1..]) > 0 {
        n += 1 + digits(&b[n + 1..]);
    }
    Some(n)
}

/// `yyyy-mm-dd` (or `yyyy/mm/dd`), then ` ` or `T` and a time, with a zone: its length.
fn datetime_len(b: &[u8]) -> Option<usize> {
    if b.len() < 10 || digits(b) != 4 || digits(&b[5..]) != 2 || digits(&b[8..]) != 2 {
        return None;
    }
    if !(b[4] == b[7] && matches!(b[4], b'-' | b'/')) {
        return None;
    }
    let mut n = 10;
    if matches!(b.get(n), Some(b' ' | b'T' | b'_'))
        && let Some(t) = time_len(&b[n + 1..])
    {
        n += 1 + t;
        match b.get(n) {
            Some(b'Z') => n += 1,
            Some(b'+' | b'-') if digits(&b[n + 1..]) >= 2 => {
                let mut z = n + 1 + digits(&b[n + 1..]);
                if b.get(z) == Some(&b':') && digits(&b[z + 1..]) == 2 {
                    z += 3;
                }
                n = z;
            }
            _ => {}
        }
    }
    Some(n)
}

/// The separator after a timestamp or a level: spaces, then one of `-`, `|`, `:` and spaces.
fn separator(s: &str) -> &str {
    let t = s.trim_start();
    for sep in ["- ", "| ", ": ", "-\t", "|\t", ":"] {
        if let Some(rest) = t.strip_prefix(sep) {
            return rest;
        }
    }
    t
}

fn timestamp(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let n = datetime_len(b).or_else(|| time_len(b))?;
    let rest = &s[n..];
    // A bare date or time must be followed by a separator (`12:00:01 train.py` is one; `10.5`
    // is not matched at all).
    if !rest.is_empty() && !rest.starts_with([' ', '\t', ':', '|', '-', ']']) {
        return None;
    }
    Some(separator(rest))
}

/// SLURM's `srun --label` and similar: `0: `, `12: `.
fn label(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let n = digits(b);
    (n <= 5 && b.get(n) == Some(&b':') && b.get(n + 1) == Some(&b' ')).then(|| &s[n + 2..])
}

/// `[…]` decorations: rank (`[rank3]:`, `[default0]:`, `[1,0]<stderr>:`), timestamp, level,
/// a logger name before a level (`[root][ERROR]`), a source location (`[launch.py:12:main]`).
fn bracket(s: &str) -> &str {
    let Some(end) = s.find(']') else {
        return s;
    };
    let inner = &s[1..end];
    let rest = &s[end + 1..];
    // mpirun --tag-output: `[1,0]<stderr>:`
    let rest_tag = rest
        .strip_prefix("<stderr>:")
        .or_else(|| rest.strip_prefix("<stdout>:"));
    if let Some(r) = rest_tag {
        return r;
    }
    if end <= 25
        && !inner.contains(' ')
        && !inner.is_empty()
        && let Some(r) = rest.strip_prefix(':')
    {
        return r;
    }
    let ib = inner.as_bytes();
    if matches!(ib.first(), Some(b'0'..=b'9'))
        && let Some(n) = datetime_len(ib).or_else(|| time_len(ib))
        && inner[n..]
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b' ')
    {
        return separator(rest);
    }
    let level = inner.trim();
    if LEVELS.contains(&level) || LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
        return separator(rest);
    }
    // hydra: `[root][ERROR] - `
    if !inner.is_empty()
        && inner.len() <= 64
        && !inner.contains(' ')
        && rest.starts_with('[')
        && let Some(e) = rest.find(']')
        && LEVELS.contains(&&rest[1..e])
    {
        return separator(&rest[e + 1..]);
    }
    // DeepSpeed: `[launch.py:12:main]`
    if inner.len() <= 120
        && !inner.contains(' ')
        && let Some(dot) = inner.find(".py:")
        && inner[dot + 4..].starts_with(|c: char| c.is_ascii_digit())
    {
        return rest;
    }
    s
}

/// Ray's worker prefix: `(RayTrainWorker pid=1234, ip=10.0.0.1) `, `(pid=1234) `.
fn ray(s: &str) -> &str {
    if let Some(end) = s.find(") ")
        && end <= 120
        && s[..end].contains("pid=")
    {
        return &s[end + 2..];
    }
    s
}

/// A level word and its separator: `ERROR:root:`, `INFO:__main__:`, `ERROR: `, `ERROR - `,
/// `ERROR    | __main__:main:12 - `.
fn level(s: &str) -> Option<&str> {
    let word_len = s.bytes().take_while(u8::is_ascii_uppercase).count();
    let word = &s[..word_len];
    if !LEVELS.contains(&word) {
        return None;
    }
    let rest = &s[word_len..];
    // Python's logging default: `LEVEL:logger.name:message`.
    if let Some(r) = rest.strip_prefix(':') {
        if let Some(r) = r.strip_prefix(' ') {
            return Some(r);
        }
        let name = r
            .bytes()
            .take_while(|c| {
                c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'<' | b'>')
            })
            .count();
        if r.as_bytes().get(name) == Some(&b':') {
            return Some(&r[name + 1..]);
        }
        return None;
    }
    let t = rest.trim_start();
    let after = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("| "))
        .or_else(|| t.strip_prefix("|"))?;
    Some(location(after.trim_start()))
}

/// After `| `: `| ERROR    | `.
fn level_after_bar(s: &str) -> Option<&str> {
    level(s[1..].trim_start())
}

/// A logger name before its level: `root - ERROR - `, `__main__ - INFO - `.
fn named_level(s: &str) -> Option<&str> {
    let name = s
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
        .count();
    if name == 0 || name > 80 {
        return None;
    }
    let rest = s[name..].strip_prefix(" - ")?;
    level(rest)
}

/// A source location after a level (loguru's `__main__:main:12 - `, `train.py:88 | `).
fn location(s: &str) -> &str {
    let n = s
        .bytes()
        .take_while(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'<' | b'>' | b'-')
        })
        .count();
    if n == 0 || n > 160 {
        return s;
    }
    let token = &s[..n];
    let Some(colon) = token.rfind(':') else {
        return s;
    };
    if digits(&token.as_bytes()[colon + 1..]) != token.len() - colon - 1 || colon + 1 == n {
        return s;
    }
    let rest = &s[n..];
    rest.strip_prefix(" - ")
        .or_else(|| rest.strip_prefix(" | "))
        .unwrap_or(s)
}

/// glog: `E0312 12:34:56.789012  1234 file.cc:123] ` and TensorFlow's short form
/// `W tensorflow/core/…/bfc_allocator.cc:479] `.
fn glog(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !matches!(b.first(), Some(b'I' | b'W' | b'E' | b'F')) {
        return None;
    }
    let mut i;
    if digits(&b[1..]) == 4 {
        i = 5;
        if b.get(i) != Some(&b' ') {
            return None;
        }
        i += 1;
        i += time_len(&b[i..])?;
        let spaces = b[i..].iter().take_while(|c| **c == b' ').count();
        if spaces == 0 {
            return None;
        }
        i += spaces;
        let tid = digits(&b[i..]);
        if tid == 0 || b.get(i + tid) != Some(&b' ') {
            return None;
        }
        i += tid + 1;
    } else if b.get(1) == Some(&b' ') {
        i = 2;
    } else {
        return None;
    }
    let rest = &s[i..];
    let end = rest
        .find("] ")
        .or_else(|| rest.strip_suffix(']').map(str::len))?;
    let loc = &rest[..end];
    let colon = loc.rfind(':')?;
    if loc.contains(' ')
        || colon + 1 == loc.len()
        || digits(&loc.as_bytes()[colon + 1..]) != loc.len() - colon - 1
    {
        return None;
    }
    Some(rest.get(end + 2..).unwrap_or(""))
}

/// `node-3: `, `gpu12.cluster: `, `rank0: `: a lowercase host or rank name with a digit in it.
fn host(s: &str) -> Option<&str> {
    let n = s
        .bytes()
        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        .count();
    if n == 0 || n > 63 || !s[..n].bytes().any(|c| c.is_ascii_digit()) {
        return None;
    }
    s[n..].strip_prefix(": ")
}

/// Takes off a trailing ellipsis and the token it cut (`9.6...`, `and c…`), unless the token
/// is a complete size unit (`20.00 MiB...`).
fn strip_truncation(s: &str) -> &str {
    let Some(body) = s.strip_suffix("...").or_else(|| s.strip_suffix('…')) else {
        return s;
    };
    if body.ends_with('.') {
        return s; // `....`: not an ellipsis cutting a message
    }
    let start = body
        .rfind(|c: char| c.is_whitespace() || matches!(c, '(' | ';' | ',' | '[' | '=' | '\'' | '"'))
        .map_or(0, |i| i + 1);
    let token = &body[start..];
    let units = [
        "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "bytes",
    ];
    if units.contains(&token) {
        return body.trim_end();
    }
    body[..start].trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_nested_quotes() {
        assert_eq!(
            clean("> RuntimeError: CUDA error: device-side assert triggered"),
            "RuntimeError: CUDA error: device-side assert triggered"
        );
        assert_eq!(
            clean("> > torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
        );
        assert_eq!(clean(">>"), "");
    }

    #[test]
    fn code_fences_read_as_blank() {
        assert_eq!(clean("```"), "");
        assert_eq!(clean("```python"), "");
        assert_eq!(clean("> ```shell"), "");
        assert_eq!(clean("~~~"), "");
        assert!(!is_fence("```RuntimeError: x```"));
    }

    #[test]
    fn rank_prefixes() {
        assert_eq!(
            clean(
                "[rank3]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269"
            ),
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269"
        );
        assert_eq!(
            clean("[default0]:Traceback (most recent call last):"),
            "Traceback (most recent call last):"
        );
        assert_eq!(
            clean("[1,0]<stderr>:RuntimeError: CUDA error: out of memory"),
            "RuntimeError: CUDA error: out of memory"
        );
        assert_eq!(
            clean("rank0: torch.OutOfMemoryError: CUDA out of memory."),
            "torch.OutOfMemoryError: CUDA out of memory."
        );
    }

    #[test]
    fn slurm_and_host_labels() {
        assert_eq!(
            clean("0: RuntimeError: CUDA error: an illegal memory access was encountered"),
            "RuntimeError: CUDA error: an illegal memory access was encountered"
        );
        assert_eq!(
            clean("node-3: Traceback (most recent call last):"),
            "Traceback (most recent call last):"
        );
        assert_eq!(
            clean("gpu12.cluster: 3: ValueError: bad"),
            "ValueError: bad"
        );
        // Not a host: an exception name, a word without a digit.
        assert_eq!(clean("RuntimeError: x"), "RuntimeError: x");
        assert_eq!(clean("error: x"), "error: x");
    }

    #[test]
    fn ray_worker_prefix() {
        assert_eq!(
            clean(
                "(RayTrainWorker pid=43178, ip=10.0.0.5) RuntimeError: CUDA error: out of memory"
            ),
            "RuntimeError: CUDA error: out of memory"
        );
    }

    #[test]
    fn timestamps() {
        assert_eq!(
            clean("2024-03-01 12:00:01,123 - ERROR - RuntimeError: CUDA out of memory."),
            "RuntimeError: CUDA out of memory."
        );
        assert_eq!(
            clean("2024-03-01 12:00:01,123 - __main__ - ERROR - ValueError: bad"),
            "ValueError: bad"
        );
        assert_eq!(
            clean("[2024-03-01 12:00:01] ValueError: bad"),
            "ValueError: bad"
        );
        assert_eq!(clean("12:00:01.123 ValueError: bad"), "ValueError: bad");
        assert_eq!(
            clean("2024-03-01T12:00:01.123Z RuntimeError: CUDA error: unspecified launch failure"),
            "RuntimeError: CUDA error: unspecified launch failure"
        );
        assert_eq!(
            clean("2024-03-01T12:00:01.123456+00:00 | RuntimeError: x"),
            "RuntimeError: x"
        );
        // Numbers that are not timestamps stay.
        assert_eq!(
            clean("10.76 GiB total capacity"),
            "10.76 GiB total capacity"
        );
        assert_eq!(clean("12:00 is not a time"), "12:00 is not a time");
    }

    #[test]
    fn glog_prefixes() {
        assert_eq!(
            clean(
                "E0312 12:34:56.789012  1234 ProcessGroupNCCL.cpp:1316] [Rank 0] Watchdog caught collective operation timeout"
            ),
            "[Rank 0] Watchdog caught collective operation timeout"
        );
        assert_eq!(
            clean(
                "W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB (rounded to 1073741824)"
            ),
            "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB (rounded to 1073741824)"
        );
        assert_eq!(
            clean(
                "2024-01-01 12:00:00.123456: W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at conv_ops.cc:1068 : RESOURCE_EXHAUSTED: OOM when allocating tensor"
            ),
            "OP_REQUIRES failed at conv_ops.cc:1068 : RESOURCE_EXHAUSTED: OOM when allocating tensor"
        );
        // An exception name that starts with E/W stays.
        assert_eq!(
            clean("EOFError: Ran out of input"),
            "EOFError: Ran out of input"
        );
    }

    #[test]
    fn logging_levels() {
        assert_eq!(
            clean("ERROR:root:CUDA out of memory."),
            "CUDA out of memory."
        );
        assert_eq!(clean("INFO:__main__:RuntimeError: x"), "RuntimeError: x");
        assert_eq!(clean("ERROR: RuntimeError: x"), "RuntimeError: x");
        assert_eq!(
            clean("2024-03-01 12:00:01.123 | ERROR    | __main__:main:42 - RuntimeError: x"),
            "RuntimeError: x"
        );
        assert_eq!(
            clean("2026-11-29 18:44:05 | INFO | train.py:88 | epoch 3 step 5"),
            "epoch 3 step 5"
        );
        assert_eq!(
            clean("[2024-03-01 12:00:01,123][root][ERROR] - RuntimeError: x"),
            "RuntimeError: x"
        );
        assert_eq!(
            clean(
                "[2024-03-01 12:00:01,123] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1234"
            ),
            "Killing subprocess 1234"
        );
        assert_eq!(clean("[ERROR] RuntimeError: x"), "RuntimeError: x");
    }

    #[test]
    fn nested_decorations() {
        assert_eq!(
            clean(
                "> [rank1]: 2024-03-01 12:00:01,123 - ERROR - torch.OutOfMemoryError: CUDA out of memory."
            ),
            "torch.OutOfMemoryError: CUDA out of memory."
        );
    }

    #[test]
    fn truncated_messages_lose_the_cut_token() {
        assert_eq!(
            clean(
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.6..."
            ),
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity)"
        );
        assert_eq!(
            clean(
                "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and c…"
            ),
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and"
        );
        assert_eq!(
            clean("Tried to allocate 20.00 MiB..."),
            "Tried to allocate 20.00 MiB"
        );
        assert_eq!(clean("...."), "....");
    }

    #[test]
    fn torchrun_traceback_field() {
        assert_eq!(
            clean("  traceback : Traceback (most recent call last):"),
            "Traceback (most recent call last):"
        );
        assert!(is_wrapper_report(
            "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        ));
        assert!(is_wrapper_report("Root Cause (first observed failure):"));
        assert!(is_wrapper_report("error_file: <N/A>"));
        assert!(is_wrapper_report(
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
        ));
        assert!(is_wrapper_report(
            "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit status 1."
        ));
        assert!(!is_wrapper_report("RuntimeError: CUDA out of memory."));
    }

    #[test]
    fn undecorated_lines_unchanged() {
        for line in [
            "Traceback (most recent call last):",
            "File \"train.py\", line 42, in <module>",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.",
            "step 12 loss=0.1",
            "Allocator (GPU_0_bfc) ran out of memory",
            "E   RuntimeError: x",
        ] {
            assert_eq!(clean(line), line);
        }
    }
}

/// The scanner reading decorated texts whole: prefixes, wrapping, chains, truncation,
/// launchers' reports.
#[cfg(test)]
mod scanner_tests {
    use crate::triage::{Failure, KnownFailure, ShapeKind, analyze};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 10.76 GiB of which 4.19 MiB is free. Including non-PyTorch memory, this process has 10.75 GiB memory in use. Of the allocated memory 9.60 GiB is allocated by PyTorch, and 337.06 MiB is reserved by PyTorch but unallocated.";
    const DEVICE: &str = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)";
    const SHAPE: &str =
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x9216 and 4608x128)";

    /// `text` broken into pieces of `width` characters, as a terminal or a collector does.
    fn wrap(text: &str, width: usize) -> String {
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(width)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn traceback(decorate: &str, message: &str) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for l in [
            "Traceback (most recent call last):",
            "  File \"train.py\", line 42, in <module>",
            "    out = model(x)",
            message,
        ] {
            let _ = writeln!(out, "{decorate}{l}");
        }
        out
    }

    fn assert_oom(text: &str) {
        let a = analyze(text);
        let Failure::OutOfMemory(f) = &a.failure else {
            panic!("not an OOM: {:?}\n{text}", a.failure);
        };
        assert_eq!(f.requested, Some(20 * MIB), "{text}");
        assert_eq!(f.total, Some(1076 * GIB / 100), "{text}");
    }

    #[test]
    fn decorated_tracebacks_classify_with_their_frame() {
        for decorate in [
            "[rank3]: ",
            "[default0]:",
            "0: ",
            "node-3: ",
            "rank0: ",
            "> ",
            "> > ",
            "2024-03-01 12:00:01,123 - ERROR - ",
            "[2024-03-01 12:00:01] ",
            "12:00:01.123 ",
            "2024-03-01T12:00:01.123Z ",
            "E0312 12:34:56.789012  1234 train.cc:123] ",
            "ERROR:root:",
            "INFO:__main__:",
            "2024-03-01 12:00:01.123 | ERROR    | __main__:main:42 - ",
            "\x1b[31m[rank1]:\x1b[0m ",
        ] {
            let a = analyze(&traceback(decorate, OOM));
            assert!(
                matches!(a.failure, Failure::OutOfMemory(_)),
                "{decorate:?}: {:?}",
                a.failure
            );
            assert_eq!(
                a.traceback_hint.as_deref(),
                Some("File \"train.py\", line 42, in <module>"),
                "{decorate:?}"
            );
            assert!(a.traceback, "{decorate:?}");
            let a = analyze(&traceback(decorate, DEVICE));
            assert!(
                matches!(a.failure, Failure::DeviceMismatch(_)),
                "{decorate:?}"
            );
        }
    }

    #[test]
    fn markdown_fenced_quote_of_an_issue() {
        let text = format!(
            "I get this error:\n\n> ```python\n{}> ```\n",
            traceback("> ", SHAPE)
        );
        let a = analyze(&text);
        let Failure::ShapeMismatch(f) = &a.failure else {
            panic!("{:?}", a.failure);
        };
        assert_eq!(f.kind, ShapeKind::Matmul);
        assert_eq!(f.dims, vec![9216, 4608]);
    }

    #[test]
    fn tensorflow_glog_oom_lines() {
        let text = "2024-01-01 12:00:00.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB (rounded to 1073741824)requested by op Conv2D\n\
                    2024-01-01 12:00:00.123456: W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at conv_ops.cc:1068 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[64,256,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n";
        assert!(matches!(analyze(text).failure, Failure::OutOfMemory(_)));
    }

    #[test]
    fn windows_frames() {
        let text = "Traceback (most recent call last):\n  File \"C:\\Users\\me\\project\\train.py\", line 12, in <module>\n    loss.backward()\n  File \"C:\\Users\\me\\miniconda3\\envs\\t\\Lib\\site-packages\\torch\\_tensor.py\", line 525, in backward\n    torch.autograd.backward(\n  File \"C:\\Python310\\Lib\\threading.py\", line 9, in run\nKeyError: 'label'\n";
        let a = analyze(text);
        assert_eq!(
            a.traceback_hint.as_deref(),
            Some("File \"C:\\Users\\me\\project\\train.py\", line 12, in <module>")
        );
    }

    #[test]
    fn messages_wrapped_mid_word_join() {
        for width in [80, 120] {
            assert_oom(&traceback("", &wrap(OOM, width)));
            let a = analyze(&traceback("", &wrap(DEVICE, width)));
            let Failure::DeviceMismatch(f) = &a.failure else {
                panic!("{width}: {:?}", a.failure);
            };
            assert_eq!(f.devices, vec!["cuda:0", "cpu"], "{width}");
            assert_eq!(f.argument.as_deref(), Some("mat1"), "{width}");
        }
        // 80 columns: the break falls inside "cannot" (the 3rd piece starts "multiplied").
        let a = analyze(&wrap(
            "RuntimeError: something went wrong while computing the projection: mat1 and mat2 shapes cannot be multiplied (64x9216 and 4608x128)",
            80,
        ));
        assert!(
            matches!(a.failure, Failure::ShapeMismatch(_)),
            "{:?}",
            a.failure
        );
    }

    #[test]
    fn a_full_width_line_then_a_record_is_not_joined() {
        // An 80-column warning, then the error on its own line.
        let warning = format!(
            "{:<80}",
            "UserWarning: This DataLoader will create 8 worker processes"
        );
        let text = format!("{warning}\n{DEVICE}\n");
        assert!(matches!(analyze(&text).failure, Failure::DeviceMismatch(_)));
        let text = format!("{warning}\n  File \"train.py\", line 3, in <module>\n{SHAPE}\n");
        let a = analyze(&text);
        assert!(matches!(a.failure, Failure::ShapeMismatch(_)));
        assert_eq!(
            a.traceback_hint.as_deref(),
            Some("File \"train.py\", line 3, in <module>")
        );
    }

    #[test]
    fn truncated_messages_classify_by_their_prefix() {
        assert_oom(
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.6...",
        );
        assert_oom(
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.6…",
        );
        let a = analyze(
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and c...",
        );
        let Failure::DeviceMismatch(f) = &a.failure else {
            panic!("{:?}", a.failure);
        };
        assert!(!f.devices.iter().any(|d| d == "c"), "{:?}", f.devices);
    }

    /// The root cause printed first wins over what its handler raised, for every pair of
    /// classes, with both chain wordings.
    #[test]
    fn chained_exceptions_keep_the_root_for_every_class() {
        type IsClass = fn(&Failure) -> bool;
        let classes: [(&str, IsClass); 6] = [
            (OOM, |f| matches!(f, Failure::OutOfMemory(_))),
            (DEVICE, |f| matches!(f, Failure::DeviceMismatch(_))),
            (SHAPE, |f| matches!(f, Failure::ShapeMismatch(_))),
            (
                "RuntimeError: CUDA error: device-side assert triggered",
                |f| matches!(f, Failure::Known(KnownFailure::DeviceSideAssert, _)),
            ),
            (
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                |f| matches!(f, Failure::Known(KnownFailure::IllegalMemoryAccess, _)),
            ),
            (
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
                |f| matches!(f, Failure::Known(KnownFailure::NcclError, _)),
            ),
        ];
        for marker in [
            "The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:",
        ] {
            for (i, (root, is_root)) in classes.iter().enumerate() {
                for (j, (then, _)) in classes.iter().enumerate() {
                    if i == j {
                        continue;
                    }
                    let text = format!(
                        "{}\n{marker}\n\n{}",
                        traceback("", root),
                        traceback("", then)
                    );
                    let a = analyze(&text);
                    assert!(is_root(&a.failure), "{root}\n then {then}: {:?}", a.failure);
                }
            }
        }
    }

    #[test]
    fn launcher_reports_are_never_the_cause() {
        let report = "[2024-03-01 12:00:05,001] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 0 (pid: 4242) of binary: /usr/bin/python\n\
Traceback (most recent call last):\n  File \"/usr/local/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================\n\
train.py FAILED\n\
------------------------------------------------------------\n\
Failures:\n  <NO_OTHER_FAILURES>\n\
------------------------------------------------------------\n\
Root Cause (first observed failure):\n[0]:\n  time      : 2024-03-01_12:00:05\n  host      : node-3\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 4242)\n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n\
============================================================\n";
        let rank = traceback("[rank0]: ", "KeyError: 'label'");
        let a = analyze(&format!("{rank}{report}"));
        assert!(matches!(a.failure, Failure::Unknown));
        assert_eq!(a.excerpt, vec!["KeyError: 'label'"]);
        let a = analyze(&format!("{}{report}", traceback("[rank0]: ", OOM)));
        assert!(matches!(a.failure, Failure::OutOfMemory(_)));
        // accelerate / DeepSpeed launchers re-raise as CalledProcessError.
        let text = format!(
            "{rank}subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit status 1.\n"
        );
        assert_eq!(analyze(&text).excerpt, vec!["KeyError: 'label'"]);
    }
}
