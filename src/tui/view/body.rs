//! The process table: GPU, PID, user, type, GPU memory, SM %, growth, peak, CPU %, host RSS,
//! elapsed, container, command, with each GPU's "unattributed" row after that GPU's processes
//! (small amounts of several GPUs folded into one row). A column empty on every row is not
//! shown; COMMAND takes the rest of the line; `←`/`→` scroll the columns right of PID
//! sideways. Only visible rows are formatted, so a table of thousands of processes costs what a
//! screen costs.

use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::{Context, cut, fmt_growth};
use crate::model::{GpuSample, ProcSample};
use crate::output::{fmt_bytes, fmt_elapsed};
use crate::tui::shown::{FOLD_BELOW, Unattributed};
use crate::tui::state::{RowRef, SortKey, UiState};

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
        // Room for the sort arrow: `GPU↓`.
        width: 4,
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
        width: 5,
        right: false,
        sort: Some(SortKey::Type),
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
        sort: Some(SortKey::Container),
    },
    Col {
        name: "COMMAND",
        width: 0,
        right: false,
        sort: Some(SortKey::Command),
    },
];

/// Columns dropped first when the screen is narrow (indices into `COLS`); GPU, PID, USER,
/// GPU-MEM, SM% and growth always stay.
const DROP_ORDER: [usize; 6] = [11, 9, 7, 10, 3, 8];
/// COMMAND keeps at least this much before a column is dropped for it.
const MIN_COMMAND: usize = 40;
/// What stays in place while the table scrolls sideways: the marker, GPU and PID.
const PINNED: usize = 2 + 5 + 8;
/// Columns that can be empty on every row (user, CPU %, RSS, elapsed, container; a peak is
/// known wherever a process's memory is).
const MAY_BE_EMPTY: [usize; 5] = [2, 8, 9, 10, 11];

/// Which columns have a value on some process row: a column that is `-` on every row (no
/// containers on this host; nothing visible here) is not shown.
fn filled_columns(state: &UiState) -> [bool; 13] {
    let mut filled = [true; 13];
    let Some(frame) = state.shown.as_ref() else {
        return filled;
    };
    for i in MAY_BE_EMPTY {
        filled[i] = false;
    }
    for r in state.rows.iter().filter(|r| r.is_process()) {
        let Some(p) = frame
            .sample
            .gpus
            .get(r.gpu)
            .and_then(|g| g.processes.get(r.proc))
        else {
            continue;
        };
        let h = &p.host;
        filled[2] |= h.user.is_some();
        filled[8] |= h.cpu_percent.is_some();
        filled[9] |= h.rss_bytes.is_some();
        filled[10] |= h.start_time.is_some();
        filled[11] |= h.container.is_some();
        if MAY_BE_EMPTY.iter().all(|&i| filled[i]) {
            break;
        }
    }
    filled
}

/// Which columns are shown in `width`: the filled ones, less those dropped (in
/// [`DROP_ORDER`]) for COMMAND to keep [`MIN_COMMAND`]; scrolled sideways, all filled ones.
fn shown_columns(filled: [bool; 13], width: usize, scrolled: bool) -> [bool; 13] {
    let mut shown = filled;
    if scrolled {
        return shown;
    }
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

/// The cells of a GPU's unattributed row: its amount under GPU-MEM, what it is under COMMAND.
fn unattributed_cells(g: &GpuSample) -> Option<[String; 13]> {
    let (user, bytes, what) = match Unattributed::of(g)? {
        Unattributed::Bytes(b) => ("unattr.", fmt_bytes(b), "held by no process visible here"),
        Unattributed::Unknown => (
            "unattr.",
            "n/a".into(),
            "a process's memory is not available",
        ),
        Unattributed::NoProcessList => (
            "n/a",
            "n/a".into(),
            "process list not available (the driver did not give it)",
        ),
    };
    let mut c: [String; 13] = Default::default();
    c[0] = g.index.to_string();
    c[1] = "-".into();
    c[2] = user.into();
    c[4] = bytes;
    c[12] = what.into();
    Some(c)
}

/// The cells of the row that folds the small unattributed amounts of several GPUs.
fn folded_cells(state: &UiState) -> [String; 13] {
    let small: Vec<(u32, u64)> = state
        .visible_gpus()
        .into_iter()
        .filter_map(|g| match Unattributed::of(g)? {
            Unattributed::Bytes(b) if b < FOLD_BELOW => Some((g.index, b)),
            _ => None,
        })
        .collect();
    let total: u64 = small.iter().map(|(_, b)| b).sum();
    let (lo, hi) = small
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &(_, b)| (lo.min(b), hi.max(b)));
    let each = if lo == hi {
        fmt_bytes(hi)
    } else {
        format!("{}–{}", fmt_bytes(lo), fmt_bytes(hi))
    };
    let ids: Vec<String> = small.iter().map(|(i, _)| i.to_string()).collect();
    let mut c: [String; 13] = Default::default();
    c[0] = "all".into();
    c[1] = "-".into();
    c[2] = "unattr.".into();
    c[4] = fmt_bytes(total);
    c[12] = format!(
        "{each} on each of GPUs {}: held by no process visible here",
        ids.join(",")
    );
    c
}

/// A row as text: the shown columns, COMMAND to the end of the line; scrolled `hscroll`
/// characters sideways, all but the pinned columns move (a `«` says so).
fn line(
    cells: &[String; 13],
    shown: &[bool; 13],
    width: usize,
    marker: &str,
    hscroll: usize,
) -> String {
    let mut s = String::with_capacity(width + 8);
    s.push_str(marker);
    s.push(' ');
    for (i, c) in cells.iter().enumerate() {
        if !shown[i] {
            continue;
        }
        if i == 12 {
            if hscroll == 0 {
                let room = width.saturating_sub(s.chars().count());
                s.push_str(&cut(c, room));
            } else {
                s.push_str(c);
            }
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
    if hscroll == 0 {
        return s;
    }
    let mut out: String = s.chars().take(PINNED - 1).collect();
    out.push('«');
    out.extend(s.chars().skip(PINNED + hscroll));
    cut(&out, width)
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
    line(&names, shown, width, " ", state.hscroll)
}

/// `text` with `tail` at its right end (over what was there), when both fit in `width`.
fn with_tail(text: &str, tail: &str, width: usize) -> String {
    let n = tail.chars().count();
    if n + 12 > width {
        return cut(text, width);
    }
    let head: String = text.chars().take(width - n - 1).collect();
    format!("{head:<w$} {tail}", w = width - n - 1)
}

/// What the table's header says at its right end: which processes the page shows of how
/// many (when not all), and how far it is scrolled sideways.
fn page_tail(state: &UiState, page: usize, processes: usize) -> String {
    let on_page = state
        .rows
        .iter()
        .skip(state.offset)
        .take(page)
        .filter(|r| r.is_process())
        .count();
    let mut tail = String::new();
    if on_page < processes {
        let first = state.rows[..state.offset.min(state.rows.len())]
            .iter()
            .filter(|r| r.is_process())
            .count();
        let _ = write!(
            tail,
            "{}–{} of {processes} processes",
            first + 1,
            first + on_page
        );
    }
    if state.hscroll > 0 {
        let sep = if tail.is_empty() { "" } else { " · " };
        let _ = write!(tail, "{sep}→{} (←)", state.hscroll);
    }
    tail
}

/// The table in `area`, its rows in `rows` (see [`crate::tui::layout::Layout`]).
pub fn render_table(f: &mut Frame<'_>, area: Rect, rows: Rect, state: &UiState, ctx: &Context) {
    if area.height == 0 {
        return;
    }
    let t = ctx.theme;
    let width = usize::from(area.width);
    let shown = shown_columns(filled_columns(state), width, state.hscroll > 0);
    let page = usize::from(rows.height.min(area.height.saturating_sub(1)));
    let processes = state.rows.iter().filter(|r| r.is_process()).count();
    let tail = page_tail(state, page, processes);
    let header = header_line(state, &shown, width);
    let mut lines = vec![Line::from(Span::styled(
        if tail.is_empty() {
            cut(&header, width)
        } else {
            with_tail(&header, &tail, width)
        },
        t.header(),
    ))];
    let Some(frame) = state.shown.as_ref() else {
        super::draw_lines(f, area, &lines);
        return;
    };
    if processes == 0 {
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
        let (text, mut style) = if r.proc == RowRef::FOLDED {
            (
                line(&folded_cells(state), &shown, width, " ", state.hscroll),
                t.unattributed(),
            )
        } else if r.proc == RowRef::UNATTRIBUTED {
            let Some(c) = frame.sample.gpus.get(r.gpu).and_then(unattributed_cells) else {
                continue;
            };
            (
                line(&c, &shown, width, " ", state.hscroll),
                t.unattributed(),
            )
        } else {
            let Some(g) = frame.sample.gpus.get(r.gpu) else {
                continue;
            };
            let Some(p) = g.processes.get(r.proc) else {
                continue;
            };
            let watched = state.is_watched(p);
            let text = line(
                &cells(state, ctx, g, p),
                &shown,
                width,
                if watched { "*" } else { " " },
                state.hscroll,
            );
            let style = if watched {
                t.mine()
            } else if p.host.visible {
                Style::new()
            } else {
                t.dim()
            };
            (text, style)
        };
        if i == state.selected {
            style = style.patch(t.selected());
        }
        lines.push(Line::from(Span::styled(cut(&text, width), style)));
    }
    super::draw_lines(f, area, &lines);
}
