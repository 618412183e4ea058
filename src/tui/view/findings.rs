//! The findings view (`F`): every finding of this session, the primed past included, with
//! its history: when it opened, how often and when it last changed, when it resolved. Open
//! ones first, most severe first; then resolved ones, newest first. Times are UTC.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

use super::{Context, cut};
use crate::detect::{LogEntry, Severity};
use crate::tui::state::UiState;

/// `HH:MM:SS` (UTC) of a unix time.
fn clock(unix: f64) -> String {
    let t = crate::times::format_rfc3339(unix);
    t.get(11..19).unwrap_or("-").to_string()
}

/// One entry as a line of the view; `live` is the open finding's summary now (the log keeps
/// the summary of the last event, and small changes raise none).
pub fn entry_line(e: &LogEntry, live: Option<&str>) -> String {
    let gpu = e
        .gpu_index
        .map_or_else(|| "-".to_string(), |g| g.to_string());
    let updated = match e.updated {
        Some(at) if e.updates > 0 => format!("{}× {}", e.updates, clock(at)),
        _ => "-".to_string(),
    };
    let resolved = e.resolved.map_or_else(|| "-".to_string(), clock);
    format!(
        "{:<8} {:<8} {:<17} {gpu:>3} {:>8} {updated:>13} {resolved:>8}  {}",
        if e.is_open() { "open" } else { "resolved" },
        e.worst.to_string(),
        e.id.rule.name(),
        clock(e.opened),
        crate::text::clean(live.unwrap_or(&e.summary))
    )
}

pub fn render(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    if area.height == 0 {
        return;
    }
    let t = ctx.theme;
    let width = usize::from(area.width);
    let log = state.findings_log();
    let open_now = state.analyzer.open();
    let live = |e: &LogEntry| {
        e.is_open()
            .then(|| open_now.iter().find(|f| f.id == e.id))
            .flatten()
            .map(|f| f.summary.as_str())
    };
    let open = log.iter().filter(|e| e.is_open()).count();
    let mut lines = vec![Line::from(Span::styled(
        cut(
            &format!(
                "  {:<8} {:<8} {:<17} {:>3} {:>8} {:>13} {:>8}  FINDINGS: {open} open, {} resolved (UTC; Enter: go to, Esc: back)",
                "STATE",
                "WORST",
                "RULE",
                "GPU",
                "OPENED",
                "UPDATED",
                "RESOLVED",
                log.len() - open
            ),
            width,
        ),
        t.header(),
    ))];
    if log.is_empty() {
        lines.push(Line::from(Span::styled(
            "  nothing found since gpuwatch started",
            t.dim(),
        )));
    }
    let page = usize::from(area.height - 1);
    let cursor = state.log_cursor.min(log.len().saturating_sub(1));
    let start = (cursor + 1).saturating_sub(page);
    for (i, e) in log.iter().enumerate().skip(start).take(page) {
        let marker = if i == cursor { "▶ " } else { "  " };
        let mut style = if e.is_open() {
            match e.severity {
                Severity::Critical => t.bad(),
                Severity::Warning => t.warn(),
                Severity::Info => t.dim(),
            }
        } else {
            t.dim()
        };
        if i == cursor {
            style = style.patch(t.selected());
        }
        lines.push(Line::from(Span::styled(
            cut(&format!("{marker}{}", entry_line(e, live(e))), width),
            style,
        )));
    }
    super::draw_lines(f, area, &lines);
}
