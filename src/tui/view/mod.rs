//! Rendering: a pure function of the UI state (and the clock it is given). One file per panel.
//!
//! ```text
//! ┌ header: host · source · driver · age / STALE / replay position · PAUSED · findings ──┐
//! │   · this host's CPU, memory, swap, load (right-aligned, live and demo only)          │
//! │ GPU panels: name, memory bar mine|external|unattributed|free, used/total,            │
//! │   util and memory-bandwidth sparklines, temperature vs slowdown, power, clocks, PCIe │
//! │   (one line per GPU when space is short; two columns on wide screens)                │
//! │ body: process table | tree | process detail | memory chart | findings view           │
//! │ findings panel: problems and open findings, most severe first (`f` scrolls it)      │
//! └ footer: key hints, filter input, messages ──────────────────────────────────────────┘
//! ```
//! Overlays: help (`?`) and the kill confirmation.

mod body;
mod detail;
mod findings;
mod gpus;
mod header;
mod overlay;
mod tree;

use ratatui::Frame;

use super::layout;
use super::state::{UiState, View};
use super::theme::Theme;

pub(crate) use gpus::fmt_growth;

/// What rendering needs besides the state.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// Unix seconds "now" (elapsed times); tests pin it.
    pub now: f64,
    /// Monotonic "now" (how old a frame is); tests pin it.
    pub mono: std::time::Instant,
    pub theme: Theme,
}

impl Context {
    /// How old a frame is at this moment.
    pub fn age(&self, frame: &crate::model::Frame) -> std::time::Duration {
        self.mono.saturating_duration_since(frame.published)
    }

    /// Whether a frame is stale at this moment (see `Frame::is_stale`).
    pub fn stale(&self, frame: &crate::model::Frame) -> bool {
        self.age(frame) > frame.interval * 3 + std::time::Duration::from_secs(1)
    }
}

/// Whether the clock tick can change what the screen shows (the loop skips its draw when
/// not). Frames redraw the screen anyway; between two fresh frames a tick only moved the
/// sub-second age in the header. It can change the screen when no frame is shown yet, when the
/// frame on screen or the latest is a second old or more (late, stale, paused: ages and
/// `STALE` count whole seconds), when a call is or was stuck (`previous` is the in-flight call
/// before this tick's refresh), with a remote link (its reconnection countdown), and in the
/// detail and chart views (their time axes follow the clock).
pub fn tick_changes_screen(
    state: &UiState,
    mono: std::time::Instant,
    previous: Option<&crate::source::InFlight>,
) -> bool {
    let second = std::time::Duration::from_secs(1);
    let old = |f: Option<&std::sync::Arc<crate::model::Frame>>| {
        f.is_none_or(|f| mono.saturating_duration_since(f.published) >= second)
    };
    let stuck = |c: Option<&crate::source::InFlight>| c.is_some_and(|c| c.is_stuck(mono));
    old(state.shown.as_ref())
        || old(state.latest.as_ref())
        || stuck(state.in_flight.as_ref())
        || stuck(previous)
        || state.link.is_some()
        || !matches!(state.view, View::Table | View::Tree | View::Findings)
}

/// Draws the whole screen.
pub fn render(f: &mut Frame<'_>, state: &UiState, ctx: &Context) {
    let full = f.area();
    let a = layout::compute(full, state.shown_parts(ctx.mono));
    header::render(f, a.header, state, ctx);
    gpus::render(f, a.gpus, state, ctx, a.grid);
    match &state.view {
        View::Table => body::render_table(f, a.body, a.table_rows, state, ctx),
        View::Tree => tree::render(f, a.body, state, ctx),
        View::Detail(key) => detail::render(f, a.body, state, ctx, key),
        View::Chart { gpu } => detail::render_chart(f, a.body, state, ctx, gpu),
        View::Findings => findings::render(f, a.body, state, ctx),
    }
    header::render_findings(f, a.findings, state, ctx);
    header::render_footer(f, a.footer, state, ctx);
    if state.kill.is_some() {
        overlay::render_kill(f, full, state, ctx);
    }
    if state.help {
        overlay::render_help(f, full, state, ctx);
    }
}

/// Draws `lines` top down into `area`, each cut at the area's width: what
/// `Paragraph::new(lines)` draws (no wrap, left-aligned, no block), without the paragraph's
/// reflow, which collects every line's graphemes into a vector before placing them (the
/// largest part of a frame's cost with hundreds of processes).
pub(crate) fn draw_lines(
    f: &mut Frame<'_>,
    area: ratatui::layout::Rect,
    lines: &[ratatui::text::Line<'_>],
) {
    let area = area.intersection(f.area());
    let buf = f.buffer_mut();
    for (line, y) in lines.iter().zip(area.top()..area.bottom()) {
        buf.set_line(area.x, y, line, area.width);
    }
}

/// Cuts `text` to `width` characters, marking the cut with `…`.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut s: String = text.chars().take(width - 1).collect();
    s.push('…');
    s
}

/// `text` in lines of at most `width` characters, broken between words; a word longer than
/// `width` is split across lines, so nothing is lost. At least one line.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let last = lines.last_mut().expect("one line");
            let used = last.chars().count();
            let gap = usize::from(used > 0);
            if used + gap + word.len() <= width {
                if gap == 1 {
                    last.push(' ');
                }
                last.extend(word.iter());
                break;
            }
            if used > 0 && word.len() <= width {
                lines.push(String::new());
                continue;
            }
            // Longer than a line: fill this one (or a fresh one) and go on with the rest.
            let room = width.saturating_sub(used + gap);
            if room == 0 {
                lines.push(String::new());
                continue;
            }
            if gap == 1 {
                last.push(' ');
            }
            last.extend(word.drain(..room));
            lines.push(String::new());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrap_breaks_between_words_and_splits_long_ones() {
        assert_eq!(wrap("a bb ccc dd", 6), vec!["a bb", "ccc dd"]);
        assert_eq!(wrap("", 5), vec![""]);
        assert_eq!(wrap("abcdefghij k", 4), vec!["abcd", "efgh", "ij k"]);
        assert_eq!(wrap("xy abcdefgh", 5), vec!["xy ab", "cdefg", "h"]);
        assert_eq!(wrap("one  two\nthree", 80), vec!["one two three"]);
        for w in 1..12 {
            let text = "PID 4120 is not visible in this PID namespace: nothing";
            let lines = wrap(text, w);
            assert!(
                lines.iter().all(|l| l.chars().count() <= w),
                "{w}: {lines:?}"
            );
            assert_eq!(
                lines.concat().replace(' ', ""),
                text.replace(' ', ""),
                "nothing lost at {w}"
            );
        }
    }
}
