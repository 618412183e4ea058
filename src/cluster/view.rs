//! Drawing the overview: a header (Prometheus URL, hosts and GPUs, last refresh, the last
//! error), the table, and a footer with the keys. Pure: the state and a theme in, cells out.

use std::time::SystemTime;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};

use super::{ClusterRow, ClusterState};
use crate::output::fmt_bytes;
use crate::text::clean;
use crate::tui::theme::Theme;
use crate::tui::view::cut;

const BAR: usize = 10;
const HOST_MAX: usize = 22;
const NAME_MAX: usize = 18;
/// Below this width the GPU name column is left out.
const NAME_FROM: u16 = 120;

/// Time to full: `-` when there is no prediction, else minutes, hours or days.
pub fn fmt_ttf(seconds: Option<f64>) -> String {
    let Some(s) = seconds.filter(|s| s.is_finite() && *s >= 0.0) else {
        return "-".to_string();
    };
    let m = (s / 60.0).round() as u64;
    if m < 60 {
        format!("{m}m")
    } else if m < 48 * 60 {
        format!("{}h{:02}m", m / 60, m % 60)
    } else {
        format!("{}d", m / (24 * 60))
    }
}

/// `HH:MM:SS` UTC of a moment.
pub fn clock(t: SystemTime) -> String {
    let s = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}Z", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

/// The memory cell: a bar and `used/total`, or `n/a`.
fn memory(r: &ClusterRow, t: Theme) -> Line<'static> {
    let (Some(used), Some(total)) = (r.mem_used, r.mem_total) else {
        return Line::from(Span::styled("n/a", t.dim()));
    };
    let frac = if total == 0 {
        0.0
    } else {
        (used as f64 / total as f64).clamp(0.0, 1.0)
    };
    let full = ((frac * BAR as f64).round() as usize).min(BAR);
    Line::from(vec![
        Span::styled(
            "█".repeat(full),
            t.mem_level(t.mem_levels.level(used, total, None)),
        ),
        Span::styled("░".repeat(BAR - full), t.free()),
        Span::raw(format!(" {}/{}", fmt_bytes(used), fmt_bytes(total))),
    ])
}

fn header(state: &ClusterState, t: Theme) -> Line<'static> {
    let (hosts, gpus) = state.counts();
    let mut spans = vec![
        Span::styled("gpuwatch cluster", t.title()),
        Span::raw(format!("  {}  ", state.url)),
        Span::raw(format!(
            "{hosts} host{}, {gpus} GPU{}",
            if hosts == 1 { "" } else { "s" },
            if gpus == 1 { "" } else { "s" }
        )),
    ];
    match state.last_refresh {
        Some(at) => spans.push(Span::styled(format!("  refreshed {}", clock(at)), t.dim())),
        None if state.error.is_none() => spans.push(Span::styled("  querying…", t.dim())),
        None => {}
    }
    if state.stale() {
        spans.push(Span::styled("  STALE", t.warn()));
    }
    Line::from(spans)
}

fn status(state: &ClusterState, t: Theme) -> Line<'static> {
    if let Some(e) = &state.error {
        return Line::from(Span::styled(
            format!("refresh failed: {}", crate::text::clean(e)),
            t.bad(),
        ));
    }
    if let Some(m) = &state.message {
        return Line::from(Span::styled(m.clone(), t.warn()));
    }
    Line::from(Span::styled(
        format!(
            "sorted by {}{}",
            state.sort.name(),
            if state.reverse { " (reversed)" } else { "" }
        ),
        t.dim(),
    ))
}

fn footer(t: Theme) -> Line<'static> {
    let mut spans = Vec::new();
    for (k, what) in [
        ("↑↓", "select"),
        ("Enter", "drill down"),
        ("s", "sort"),
        ("S", "reverse"),
        ("r", "refresh"),
        ("q", "quit"),
    ] {
        spans.push(Span::styled(k, t.key()));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    Line::from(spans)
}

fn row_cells(r: &ClusterRow, t: Theme, stale: bool, with_name: bool) -> Row<'static> {
    let na = || "-".to_string();
    let gpu = if !r.up {
        Cell::from(Span::styled("down", t.bad()))
    } else if r.gpu.is_empty() {
        Cell::from(na())
    } else {
        Cell::from(clean(&r.gpu).into_owned())
    };
    let util = r.util.map_or_else(
        || Span::styled("n/a", t.dim()),
        |u| Span::styled(format!("{u:.0}%"), t.level(u, 90.0, 101.0)),
    );
    let alerts = if r.alerts.is_empty() {
        Span::styled("-", t.dim())
    } else {
        Span::styled(clean(&r.alerts.join(",")).into_owned(), t.bad())
    };
    // Labels come from Prometheus: any exporter's names.
    let mut cells = vec![Cell::from(cut(&clean(&r.host), HOST_MAX)), gpu];
    if with_name {
        cells.push(Cell::from(cut(&clean(&r.name), NAME_MAX)));
    }
    cells.extend([
        Cell::from(memory(r, t)),
        Cell::from(util),
        Cell::from(r.top_process.as_ref().map_or_else(na, |(who, b)| {
            format!("{} {}", cut(&clean(who), 14), fmt_bytes(*b))
        })),
        Cell::from(r.external.map_or_else(na, fmt_bytes)),
        Cell::from(fmt_ttf(r.time_to_full)),
        Cell::from(alerts),
    ]);
    let row = Row::new(cells);
    if stale { row.style(t.dim()) } else { row }
}

/// Draws the whole overview.
pub fn render(f: &mut Frame<'_>, state: &ClusterState, t: Theme) {
    let [head, stat, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header(state, t)), head);
    f.render_widget(Paragraph::new(status(state, t)), stat);
    f.render_widget(Paragraph::new(footer(t)), foot);
    if state.rows.is_empty() {
        let text = if state.last_refresh.is_some() {
            "no gpuwatch series in this Prometheus (is it scraping `gpuwatch daemon`?)"
        } else {
            ""
        };
        f.render_widget(Paragraph::new(Span::styled(text, t.dim())), body);
        return;
    }
    let dim_rows = state.stale();
    let with_name = body.width >= NAME_FROM;
    let fit = |f: &dyn Fn(&ClusterRow) -> usize, title: &str, max: usize| -> Constraint {
        let w = state.rows.iter().map(f).max().unwrap_or(0).min(max);
        Constraint::Length(w.max(title.chars().count()) as u16)
    };
    let mut widths = vec![
        fit(&|r| r.host.chars().count(), "HOST", HOST_MAX),
        Constraint::Length(4),
    ];
    let mut titles = vec!["HOST", "GPU"];
    if with_name {
        widths.push(fit(&|r| r.name.chars().count(), "NAME", NAME_MAX));
        titles.push("NAME");
    }
    widths.extend([
        Constraint::Length(BAR as u16 + 16),
        Constraint::Length(4),
        fit(
            &|r| {
                r.top_process.as_ref().map_or(1, |(who, b)| {
                    who.chars().count().min(14) + 1 + fmt_bytes(*b).len()
                })
            },
            "TOP PROCESS",
            22,
        ),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Min(6),
    ]);
    titles.extend([
        "MEMORY",
        "UTIL",
        "TOP PROCESS",
        "EXTERNAL",
        "FULL IN",
        "ALERTS",
    ]);
    let head_row = Row::new(titles.into_iter().map(Cell::from)).style(t.header());
    let table = Table::new(
        state
            .rows
            .iter()
            .map(|r| row_cells(r, t, dim_rows, with_name)),
        widths,
    )
    .header(head_row)
    .column_spacing(1)
    .row_highlight_style(t.selected());
    let mut ts = TableState::default().with_selected(Some(state.selected));
    f.render_stateful_widget(table, body, &mut ts);
}
