//! Text from outside shown to people: one sanitiser for every text output.
//!
//! Process names and command lines (any local user's argv), user and container names, GPU and
//! host names, NVML error texts, scenario and recording contents, a remote daemon's frames, a
//! webhook's error response: all of it reaches the table, the logs and the alert sinks. Raw, a
//! name like `evil\e]0;pwned\a\e[2J` sets a terminal's title, clears its screen or writes its
//! clipboard (OSC 52), a newline in a name forges a table row or a log line, and a bidi override
//! makes text read in another order than it is stored.
//!
//! [`clean`] shows such characters escaped, so a reader sees what is there and nothing steers
//! the terminal:
//!
//! | character | shown as |
//! |---|---|
//! | tab, line feed, carriage return | `\t`, `\n`, `\r` |
//! | ESC | `\e` |
//! | other C0 controls and DEL | `\x00` … `\x1f`, `\x7f` |
//! | C1 controls (U+0080–U+009F) | `\u{80}` … `\u{9f}` |
//! | bidi controls, line/paragraph separators, invisible format characters | `\u{202e}`, … |
//!
//! Everything else, CJK, emoji (with their zero-width joiners) and backslashes included, is
//! unchanged, and text that needs no escape is borrowed, not copied. Backslashes are not
//! doubled: the escaped form is for reading, not for parsing back; the JSON outputs keep the
//! exact bytes.
//!
//! The dashboard draws through ratatui, which drops control characters from what it writes;
//! it shows names through [`clean`] too, so the bidi controls it would pass are escaped there.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown escaped: a control character (C0, DEL, C1) or a format character that
/// reorders or hides text.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Arabic letter mark, left-to-right and right-to-left marks.
            '\u{061c}' | '\u{200e}' | '\u{200f}'
            // Embeddings and overrides (LRE, RLE, PDF, LRO, RLO).
            | '\u{202a}'..='\u{202e}'
            // Isolates (LRI, RLI, FSI, PDI).
            | '\u{2066}'..='\u{2069}'
            // Line and paragraph separators: a new line to some viewers.
            | '\u{2028}' | '\u{2029}'
            // Zero-width space, word joiner and invisible operators, deprecated format
            // controls, byte-order mark, interlinear annotations: invisible, they make two
            // names that differ look alike. (Zero-width joiner and non-joiner stay: emoji
            // sequences and several scripts need them.)
            | '\u{200b}' | '\u{2060}'..='\u{2064}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
        )
}

/// `text` with every character [`needs_escape`] says is dangerous shown escaped; borrowed when
/// there is none (the usual case: this is on the table's and the logs' paths).
pub fn clean(text: &str) -> Cow<'_, str> {
    // Printable ASCII needs nothing: one pass over the bytes, no decoding.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Cow::Borrowed(text);
    }
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// An optional text through [`clean`], `fallback` when there is none.
pub fn clean_or<'a>(text: Option<&'a str>, fallback: &'a str) -> Cow<'a, str> {
    text.map_or(Cow::Borrowed(fallback), clean)
}

/// A text of several lines: each line through [`clean`], the line breaks kept (for messages
/// built of lines, such as an error quoting a file). A carriage return is escaped.
pub fn clean_lines(text: &str) -> Cow<'_, str> {
    if !text.contains('\n') {
        return clean(text);
    }
    if text
        .bytes()
        .all(|b| b == b'\n' || (0x20..0x7f).contains(&b))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&clean(line));
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char) {
    if !needs_escape(c) {
        out.push(c);
        return;
    }
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\x1b' => out.push_str("\\e"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` for where `<…>` means markup: [`clean`], then `&`, `<` and `>` as `&amp;`, `&lt;`
/// and `&gt;`. That is Slack's rule for a message's `text`, so a name like `<!channel>` or
/// `<@U123>` is shown, not acted on (Mattermost's plain `@channel` and markdown are not
/// neutralised by this); and what a desktop
/// notification's body needs (its `<a href>`, `<img>` markup).
pub fn for_markup(text: &str) -> Cow<'_, str> {
    let text = clean(text);
    if !text.contains(['&', '<', '>']) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_attack_from_the_issue_is_shown_escaped() {
        let name = "evil\x1b]0;pwned\x07\x1b[2J";
        assert_eq!(clean(name), "evil\\e]0;pwned\\x07\\e[2J");
        assert_eq!(
            clean("\x1b]52;c;cHduZWQ=\x07"),
            "\\e]52;c;cHduZWQ=\\x07",
            "OSC 52 (clipboard)"
        );
        assert_eq!(clean("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(clean("\0\x7f\u{9b}2J\u{85}"), "\\x00\\x7f\\u{9b}2J\\u{85}");
        assert_eq!(
            clean("file\u{202e}gpj.exe\u{2066}x\u{2069}\u{200e}\u{200f}\u{061c}"),
            "file\\u{202e}gpj.exe\\u{2066}x\\u{2069}\\u{200e}\\u{200f}\\u{61c}"
        );
        assert_eq!(clean("a\u{2028}b\u{feff}"), "a\\u{2028}b\\u{feff}");
    }

    #[test]
    fn printable_text_is_borrowed_unchanged() {
        for s in [
            "",
            "python train.py --lr 3e-4",
            "C:\\path\\with\\backslashes",
            "训练 モデル 🚀",
            "👨\u{200d}👩\u{200d}👧 family emoji",
            "نص عربي",
            "zero\u{200c}width non-joiner",
            "Ünïcödé café",
        ] {
            assert!(matches!(clean(s), Cow::Borrowed(t) if t == s), "{s:?}");
        }
    }

    #[test]
    fn lines_keep_their_breaks() {
        assert_eq!(clean_lines("a\nb"), "a\nb");
        assert!(matches!(clean_lines("a\nb"), Cow::Borrowed(_)));
        assert_eq!(clean_lines("a\x1b[2J\nb\r"), "a\\e[2J\nb\\r");
    }

    #[test]
    fn slack_text_is_escaped_and_cleaned() {
        assert_eq!(
            for_markup("<!channel> & <@U123>"),
            "&lt;!channel&gt; &amp; &lt;@U123&gt;"
        );
        assert_eq!(for_markup("a\n<b>"), "a\\n&lt;b&gt;");
        assert!(matches!(for_markup("plain text"), Cow::Borrowed(_)));
        assert_eq!(
            for_markup("&amp;"),
            "&amp;amp;",
            "escaped once, never undone"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        #[test]
        fn output_never_holds_a_dangerous_character(s in any::<String>()) {
            let out = clean(&s);
            prop_assert!(!out.chars().any(needs_escape), "{:?} -> {:?}", s, out);
            prop_assert!(!out.chars().any(char::is_control));
            let lines = clean_lines(&s);
            prop_assert!(!lines.chars().any(|c| c != '\n' && needs_escape(c)));
            prop_assert_eq!(lines.matches('\n').count(), s.matches('\n').count());
            let slack = for_markup(&s);
            prop_assert!(!slack.chars().any(|c| needs_escape(c) || c == '<' || c == '>'));
        }

        #[test]
        fn text_without_dangerous_characters_is_unchanged(
            s in any::<String>().prop_map(|s| s.chars().filter(|&c| !needs_escape(c)).collect::<String>())
        ) {
            prop_assert!(matches!(clean(&s), Cow::Borrowed(t) if t == s));
        }

        #[test]
        fn escapes_are_idempotent_and_only_add(s in any::<String>()) {
            let once = clean(&s).into_owned();
            prop_assert_eq!(clean(&once), once.as_str());
            // What is not escaped is kept in order: removing the escapes' text gives back the
            // safe characters.
            let kept: String = s.chars().filter(|&c| !needs_escape(c)).collect();
            let mut rest = once.as_str();
            for c in kept.chars() {
                let at = rest.find(c);
                prop_assert!(at.is_some());
                rest = &rest[at.unwrap() + c.len_utf8()..];
            }
        }
    }
}
