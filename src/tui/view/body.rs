//! The process table: GPU, PID, user, type, GPU memory, SM %, growth,
//! peak, CPU %, host RSS, elapsed, container, command; then one "unattributed" row per GPU.
//! Only visible rows are formatted, so a table of thousands of processes costs what a screen
//! costs.

use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::{Context, cut, fmt_growth};
use crate::model::{GpuSample, ProcSample};
use crate::output::{fmt_bytes, fmt_elapsed};
use crate::tui::shown::Unattributed;
use crate::tui::state::{SortKey, UiState};

/// A column: header, width, right-aligned, and the sort key it shows.
struct Col {
    name: &'static str,
    width: usize,
    right: bool,
    sort: Option<SortKey>,
}

const COLS: [Col; 13] = [
    Col {
        name: "GPU",
        width: 3,
        right: true,
        sort: Some(SortKey::Gpu),
    },
    Col {
        name: "PID",
        width: 7,
        right: true,
        sort: Some(SortKey::Pid),
    },
    Col {
        name: "USER",
        width: 9,
        right: false,
        sort: Some(SortKey::User),
    },
    Col {
        name: "TYPE",
        width: 4,
        right: false,
        sort: None,
    },
    Col {
        name: "GPU-MEM",
        width: 8,
        right: true,
        sort: Some(SortKey::Memory),
    },
    Col {
        name: "SM%",
        width: 4,
        right: true,
        sort: Some(SortKey::Sm),
    },
    Col {
        name: "MiB/min",
        width: 8,
        right: true,
        sort: Some(SortKey::Growth),
    },
    Col {
        name: "PEAK",
        width: 8,
        right: true,
        sort: Some(SortKey::Peak),
    },
    Col {
        name: "CPU%",
        width: 5,
        right: true,
        sort: Some(SortKey::Cpu),
    },
    Col {
        name: "RSS",
        width: 8,
        right: true,
        sort: Some(SortKey::Rss),
    },
    Col {
        name: "ELAPSED",
        width: 8,
        right: true,
        sort: Some(SortKey::Elapsed),
    },
    Col {
        name: "CONTAINER",
        width: 12,
        right: false,
        sort: None,
    },
    Col {
        name: "COMMAND",
        width: 0,
        right: false,
        sort: Some(SortKey::Command),
    },
];

/// Columns dropped first when the screen is narrow (indices into `COLS`).
const DROP_ORDER: [usize; 7] = [11, 9, 7, 10, 3, 8, 0];
const MIN_COMMAND: usize = 20;

/// Which columns fit in `width`.
fn shown_columns(width: usize) -> [bool; 13] {
    let mut shown = [true; 13];
    let fixed = |shown: &[bool; 13]| -> usize {
        2 + (0..12)
            .filter(|&i| shown[i])
            .map(|i| COLS[i].width + 1)
            .sum::<usize>()
    };
    for col in DROP_ORDER {
        if fixed(&shown) + MIN_COMMAND <= width {
            break;
        }
        shown[col] = false;
    }
    shown
}

fn cells(state: &UiState, ctx: &Context, g: &GpuSample, p: &ProcSample) -> [String; 13] {
    let h = &p.host;
    let d = state.derived_of(g, p);
    let dash = || "-".to_string();
    // Names from /proc and the source: control and bidi characters shown escaped.
    let shown = |v: &Option<String>| crate::text::clean_or(v.as_deref(), "-").into_owned();
    let command = h.display_command();
    let command = match crate::text::clean(&command) {
        std::borrow::Cow::Borrowed(_) => command,
        std::borrow::Cow::Owned(escaped) => escaped,
    };
    [
        g.index.to_string(),
        p.pid.to_string(),
        shown(&h.user),
        p.kind.label().to_string(),
        p.used_bytes.map_or_else(|| "n/a".to_string(), fmt_bytes),
        p.sm_percent
            .map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}")),
        fmt_growth(d.growth),
        d.peak.map_or_else(dash, fmt_bytes),
        h.cpu_percent.map_or_else(dash, |v| format!("{v:.0}")),
        h.rss_bytes.map_or_else(dash, fmt_bytes),
        h.start_time.map_or_else(dash, |s| {
            fmt_elapsed((ctx.now.max(0.0) as u64).saturating_sub(s))
        }),
        shown(&h.container),
        command,
    ]
}

fn line(cells: &[String; 13], shown: &[bool; 13], width: usize, marker: &str) -> String {
    let mut s = String::with_capacity(width + 8);
    s.push_str(marker);
    s.push(' ');
    for (i, c) in cells.iter().enumerate() {
        if !shown[i] {
            continue;
        }
        if i == 12 {
            let room = width.saturating_sub(s.chars().count());
            s.push_str(&cut(c, room));
        } else {
            let w = COLS[i].width;
            let c = cut(c, w);
            if COLS[i].right {
                let _ = write!(s, "{c:>w$} ");
            } else {
                let _ = write!(s, "{c:<w$} ");
            }
        }
    }
    s
}

fn header_line(state: &UiState, shown: &[bool; 13], width: usize) -> String {
    let names: [String; 13] = std::array::from_fn(|i| {
        let c = &COLS[i];
        if c.sort == Some(state.sort) {
            format!("{}{}", c.name, if state.descending { "↓" } else { "↑" })
        } else {
            c.name.to_string()
        }
    });
    line(&names, shown, width, " ")
}

/// The table in `area`, its process rows in `rows` (see [`crate::tui::layout::Layout`]).
pub fn render_table(f: &mut Frame<'_>, area: Rect, rows: Rect, state: &UiState, ctx: &Context) {
    if area.height == 0 {
        return;
    }
    let t = ctx.theme;
    let width = usize::from(area.width);
    let shown = shown_columns(width);
    let mut lines = vec![Line::from(Span::styled(
        cut(&header_line(state, &shown, width), width),
        t.header(),
    ))];
    let page = usize::from(rows.height.min(area.height.saturating_sub(1)));
    let Some(frame) = state.shown.as_ref() else {
        super::draw_lines(f, area, &lines);
        return;
    };
    if state.rows.is_empty() {
        let gpus = state.visible_gpus();
        let text = if !gpus.is_empty() && gpus.iter().all(|g| g.processes_unavailable) {
            "process list not available on these GPUs".to_string()
        } else if state.filter.is_empty() {
            "no process holds memory on these GPUs".to_string()
        } else {
            format!("no process matches '{}'", state.filter)
        };
        lines.push(Line::from(Span::styled(text, t.dim())));
    }
    for (i, r) in state.rows.iter().enumerate().skip(state.offset).take(page) {
        let g = &frame.sample.gpus[r.gpu];
        let p = &g.processes[r.proc];
        let watched = state.is_watched(p);
        let text = line(
            &cells(state, ctx, g, p),
            &shown,
            width,
            if watched { "*" } else { " " },
        );
        let mut style = if watched {
            t.mine()
        } else if p.host.visible {
            Style::new()
        } else {
            t.dim()
        };
        if i == state.selected {
            style = style.patch(t.selected());
        }
        lines.push(Line::from(Span::styled(text, style)));
    }
    // Pad, then the unattributed rows at the bottom of the table.
    let unattributed = state.unattributed_rows();
    while lines.len() < usize::from(area.height).saturating_sub(unattributed.len()) {
        lines.push(Line::raw(""));
    }
    for (gpu, bytes) in unattributed {
        let text = match bytes {
            Unattributed::Bytes(b) => format!(
                "  {gpu:>3} {:>7} {:<9} {:<4} {:>8}  held by no process visible here (other containers, driver)",
                "-",
                "unattr.",
                "",
                fmt_bytes(b)
            ),
            Unattributed::Unknown => format!(
                "  {gpu:>3} {:>7} {:<9} {:<4} {:>8}  a process's memory is not available",
                "-", "unattr.", "", "n/a"
            ),
            Unattributed::NoProcessList => format!(
                "  {gpu:>3} {:>7} {:<9} {:<4} {:>8}  process list not available (the driver did not give it)",
                "-", "n/a", "", "n/a"
            ),
        };
        lines.push(Line::from(Span::styled(
            cut(&text, width),
            t.unattributed(),
        )));
    }
    super::draw_lines(f, area, &lines);
}
