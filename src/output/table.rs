//! The readable `snapshot` table.
//!
//! ```text
//! demo-node · demo (built-in demo) · driver 580.159.04 · CUDA 13.0 · 2026-11-29T12:00:00Z
//!
//! GPU 0  NVIDIA H200  00000000:19:00.0  [█████░░░░░░░░░░░░░░░]  37.0GiB / 140.4GiB  26%
//!        util 97%  mem-bw 44%  56°C (slows at 87°C)  542/700 W  1980 MHz  mine 31.0GiB external 6.0GiB
//!        PID  USER   TYPE  GPU-MEM  SM%  CPU%      RSS  ELAPSED  CONTAINER  COMMAND
//!    *  2101  alice  C     31.0GiB   95   336  14.0GiB    31:30  -          python train.py …
//!      91234  -      C      4.0GiB    0     -        -        -  -          (not visible here: …)
//!          unattributed  2.0GiB  (held by no process visible here)
//! ```
//!
//! With a terminal width, fact lines wrap, the bar shrinks, the PCI id goes, and RSS,
//! container, elapsed and CPU columns drop (in that order) before the command gets too short.
//!
//! `*` marks watched processes ("mine"), so the marker survives `--no-color`.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};

use super::json::split_mine;
use super::{WatchedFn, fmt_bytes, fmt_elapsed, fmt_rate, or_na};
use crate::detect::MemLevel;
use crate::model::{CallError, Frame, GpuSample, ProcSample};
use crate::text::{clean, clean_or};

/// How to draw the table.
#[derive(Debug, Clone)]
pub struct TableOptions {
    pub color: bool,
    /// Widest line; the command column is cut to fit. `None`: never cut.
    pub width: Option<usize>,
    /// GPUs to show (all when empty), by NVML index.
    pub gpus: Vec<u32>,
    /// The unattributed row is shown from this many bytes on.
    pub unattributed_min: u64,
    /// Width of the memory bar in cells.
    pub bar_width: usize,
    /// Where the memory bar turns yellow and red (the `[detect]` near-capacity lines).
    pub mem_levels: crate::detect::MemLevels,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            color: false,
            width: None,
            gpus: Vec::new(),
            unattributed_min: 1 << 20,
            bar_width: 20,
            mem_levels: crate::detect::MemLevels::default(),
        }
    }
}

struct Painter {
    color: bool,
}

impl Painter {
    fn paint(&self, style: Style, text: &str) -> String {
        if self.color {
            format!("{style}{text}{style:#}")
        } else {
            text.to_string()
        }
    }
}

fn fg(c: AnsiColor) -> Style {
    Style::new().fg_color(Some(c.into()))
}

/// Renders the whole table.
pub fn render(frame: &Frame, watched: WatchedFn<'_>, now_unix: u64, opts: &TableOptions) -> String {
    let p = Painter { color: opts.color };
    let info = &frame.source;
    let sample = &frame.sample;
    let mut out = String::new();
    let mut head = vec![
        clean(&info.host).into_owned(),
        format!("{} ({})", info.kind, clean(&info.detail)),
    ];
    if let Some(d) = &info.driver_version {
        head.push(format!("driver {}", clean(d)));
    }
    if let Some(c) = &info.cuda_version {
        head.push(format!("CUDA {}", clean(c)));
    }
    head.push(humantime::format_rfc3339_seconds(sample.taken_at_system()).to_string());
    for line in wrap_with(&head, opts.width, 0, " · ") {
        let _ = writeln!(out, "{}", p.paint(Style::new().bold(), &line));
    }
    if frame.is_stale() {
        let _ = writeln!(
            out,
            "{}",
            p.paint(
                fg(AnsiColor::Red).bold(),
                &format!(
                    "STALE: this sample is {:.1} s old",
                    frame.age().as_secs_f64()
                )
            )
        );
    }
    for e in &sample.errors {
        let _ = writeln!(out, "{}", p.paint(fg(AnsiColor::Red), &error_text(e)));
    }
    let shown: Vec<&GpuSample> = sample
        .gpus
        .iter()
        .filter(|g| opts.gpus.is_empty() || opts.gpus.contains(&g.index))
        .collect();
    if shown.is_empty() {
        let _ = writeln!(out, "\nno GPU to show");
    }
    for g in shown {
        out.push('\n');
        render_gpu(&mut out, &p, g, watched, now_unix, opts);
    }
    out
}

fn render_gpu(
    out: &mut String,
    p: &Painter,
    g: &GpuSample,
    watched: WatchedFn<'_>,
    now_unix: u64,
    opts: &TableOptions,
) {
    let title = format!(
        "GPU {}  {}  {}",
        g.index,
        clean_or(g.name.as_deref(), "n/a"),
        clean(g.pci_bus_id.as_deref().unwrap_or(&g.uuid))
    );
    if g.lost {
        let _ = writeln!(
            out,
            "{}  {}",
            p.paint(Style::new().bold(), &title),
            p.paint(
                fg(AnsiColor::Red).bold(),
                "LOST: the GPU fell off the bus or is being reset"
            )
        );
        for e in &g.errors {
            let _ = writeln!(out, "       {}", error_text(e));
        }
        return;
    }
    let title = fit_title(&title, g, opts);
    let mem = memory_text(p, g, &title, opts);
    let _ = writeln!(out, "{}  {mem}", p.paint(Style::new().bold(), &title));

    for line in wrap(&facts_line(p, g, watched), opts.width) {
        let _ = writeln!(out, "       {line}");
    }
    for e in &g.errors {
        let _ = writeln!(
            out,
            "       {}",
            p.paint(fg(AnsiColor::Red), &error_text(e))
        );
    }
    for d in &g.mig_devices {
        let _ = writeln!(
            out,
            "       MIG {}  {}  {}",
            d.index,
            clean_or(d.uuid.as_deref(), "n/a"),
            d.memory.map_or_else(
                || "memory n/a".to_string(),
                |m| format!("{} / {}", fmt_bytes(m.used), fmt_bytes(m.total))
            )
        );
    }
    render_processes(out, p, g, watched, now_unix, opts);
}

/// `! call: error`, both from the source (a remote daemon's frame, a recording) and cleaned.
fn error_text(e: &CallError) -> String {
    format!("! {}: {}", clean(&e.call), clean(&e.error))
}

/// The GPU's title, without its PCI id when the line would not fit otherwise.
fn fit_title(title: &str, g: &GpuSample, opts: &TableOptions) -> String {
    // Room for a minimal bar and the memory figures ("[......]  135.0GiB / 140.4GiB  96%").
    const MEMORY_PART: usize = 2 + 8 + 2 + 19 + 2 + 4;
    match opts.width {
        Some(w) if title.chars().count() + MEMORY_PART > w => {
            format!("GPU {}  {}", g.index, clean_or(g.name.as_deref(), "n/a"))
        }
        _ => title.to_string(),
    }
}

fn memory_text(p: &Painter, g: &GpuSample, title: &str, opts: &TableOptions) -> String {
    match g.memory {
        Some(m) => {
            let ratio = if m.total > 0 {
                m.used as f64 / m.total as f64
            } else {
                0.0
            };
            let style = match opts.mem_levels.of(g.memory) {
                Some(MemLevel::Critical) => fg(AnsiColor::Red),
                Some(MemLevel::Warning) => fg(AnsiColor::Yellow),
                Some(MemLevel::Ok) => fg(AnsiColor::Green),
                None => Style::new(),
            };
            let numbers = format!("{} / {}", fmt_bytes(m.used), fmt_bytes(m.total));
            let percent = format!("{:.0}%", ratio * 100.0);
            // The bar takes what the line has left, within [6, bar_width].
            let rest = title.chars().count() + 2 + 2 + numbers.len() + 2 + percent.len() + 2;
            let bar_width = opts.width.map_or(opts.bar_width, |w| {
                w.saturating_sub(rest).clamp(6, opts.bar_width)
            });
            let filled = ((ratio * bar_width as f64).round() as usize).min(bar_width);
            let bar = format!(
                "[{}{}]",
                p.paint(style, &"█".repeat(filled)),
                "░".repeat(bar_width - filled)
            );
            format!("{bar}  {numbers}  {}", p.paint(style, &percent))
        }
        None => "memory n/a".to_string(),
    }
}

fn facts_line(p: &Painter, g: &GpuSample, watched: WatchedFn<'_>) -> Vec<String> {
    let mut facts = vec![
        format!("util {}", or_na(g.util_gpu, |v| format!("{v:.0}%"))),
        format!("mem-bw {}", or_na(g.util_mem, |v| format!("{v:.0}%"))),
    ];
    let temp = or_na(g.temperature_c, |t| format!("{t}°C"));
    let temp = match (g.temperature_c, g.temp_slowdown_c) {
        (None, _) => "temp n/a".to_string(),
        (Some(t), Some(s)) if t + 5 >= s => {
            p.paint(fg(AnsiColor::Red), &format!("{temp} (slows at {s}°C)"))
        }
        (_, Some(s)) => format!("{temp} (slows at {s}°C)"),
        _ => temp,
    };
    facts.push(temp);
    facts.push(match (g.power_watts, g.power_limit_watts) {
        (Some(w), Some(l)) => format!("{w:.0}/{l:.0} W"),
        (Some(w), None) => format!("{w:.0} W"),
        (None, _) => "power n/a".to_string(),
    });
    facts.push(or_na(g.sm_clock_mhz, |c| format!("{c} MHz")));
    if g.slow.pcie_rx_bytes_per_s.is_some() || g.slow.pcie_tx_bytes_per_s.is_some() {
        facts.push(format!(
            "PCIe rx {} tx {}",
            or_na(g.slow.pcie_rx_bytes_per_s, fmt_rate),
            or_na(g.slow.pcie_tx_bytes_per_s, fmt_rate)
        ));
    }
    if g.mig_mode == Some(crate::model::MigMode::Enabled) {
        facts.push(format!("MIG on ({} devices)", g.mig_devices.len()));
    }
    if let Some((mine, external)) = split_mine(g, watched) {
        facts.push(format!(
            "mine {} external {}",
            fmt_bytes(mine),
            fmt_bytes(external)
        ));
    }
    facts
}

/// Joins facts with two spaces into lines that fit `width` (minus the indent).
fn wrap(facts: &[String], width: Option<usize>) -> Vec<String> {
    wrap_with(facts, width, 7, "  ")
}

/// Joins `parts` with `sep` into lines that fit `width` minus `indent`.
fn wrap_with(parts: &[String], width: Option<usize>, indent: usize, sep: &str) -> Vec<String> {
    let room = width.map_or(usize::MAX, |w| w.saturating_sub(indent).max(20));
    let sep_len = sep.chars().count();
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut current_len = 0;
    for f in parts {
        let len = visible_len(f);
        if current_len > 0 && current_len + sep_len + len > room {
            lines.push(std::mem::take(&mut current));
            current_len = 0;
        }
        if current_len > 0 {
            current.push_str(sep);
            current_len += sep_len;
        }
        current.push_str(f);
        current_len += len;
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// Length in characters, not counting ANSI escape sequences.
fn visible_len(text: &str) -> usize {
    let mut len = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => len += 1,
        }
    }
    len
}

fn render_processes(
    out: &mut String,
    p: &Painter,
    g: &GpuSample,
    watched: WatchedFn<'_>,
    now_unix: u64,
    opts: &TableOptions,
) {
    let rows: Vec<Row> = g
        .processes
        .iter()
        .map(|proc| Row::of(proc, watched(proc), now_unix))
        .collect();
    let unattributed = g.unattributed_bytes();
    let show_unattributed = match unattributed {
        Some(b) => b >= opts.unattributed_min,
        None => g.memory.is_some() && !g.processes.is_empty(),
    };
    if g.processes_unavailable {
        let _ = writeln!(
            out,
            "       process list not available (the driver did not give it)"
        );
        return;
    }
    if rows.is_empty() && !show_unattributed {
        let _ = writeln!(out, "       no processes");
        return;
    }
    render_rows(out, p, &rows, opts);
    if show_unattributed {
        let text = match unattributed {
            Some(b) => format!(
                "{}  {}  (held by no process visible here)",
                "unattributed",
                fmt_bytes(b)
            ),
            None => "unattributed  n/a (a process's memory is not available)".to_string(),
        };
        let text = cut(&text, opts.width.map(|w| w.saturating_sub(9)));
        let _ = writeln!(out, "         {}", p.paint(fg(AnsiColor::Magenta), &text));
    }
}

struct Row {
    watched: bool,
    visible: bool,
    cells: [String; 10],
}

const HEADERS: [&str; 10] = [
    "PID",
    "USER",
    "TYPE",
    "GPU-MEM",
    "SM%",
    "CPU%",
    "RSS",
    "ELAPSED",
    "CONTAINER",
    "COMMAND",
];
/// Columns aligned right (numbers).
const RIGHT: [bool; 10] = [
    true, false, false, true, true, true, true, true, false, false,
];

impl Row {
    fn of(p: &ProcSample, watched: bool, now_unix: u64) -> Self {
        let h = &p.host;
        let dash = || "-".to_string();
        let clean_or_dash = |v: &Option<String>| clean_or(v.as_deref(), "-").into_owned();
        let command = h.display_command();
        Self {
            watched,
            visible: h.visible,
            cells: [
                p.pid.to_string(),
                clean_or_dash(&h.user),
                p.kind.label().to_string(),
                or_na(p.used_bytes, fmt_bytes),
                or_na(p.sm_percent, |v| format!("{v:.0}")),
                h.cpu_percent.map_or_else(dash, |v| format!("{v:.0}")),
                h.rss_bytes.map_or_else(dash, fmt_bytes),
                h.start_time
                    .map_or_else(dash, |s| fmt_elapsed(now_unix.saturating_sub(s))),
                clean_or_dash(&h.container),
                match clean(&command) {
                    std::borrow::Cow::Borrowed(_) => command,
                    std::borrow::Cow::Owned(escaped) => escaped,
                },
            ],
        }
    }
}

/// Columns dropped, in this order, when the terminal is too narrow for them and a readable
/// command (indices into `HEADERS`).
const DROP_ORDER: [usize; 4] = [8, 6, 7, 5];
/// The command column keeps at least this many characters before columns are dropped.
const MIN_COMMAND: usize = 24;
/// Longest container cell; pod ids are long (the JSON keeps them whole).
const MAX_CONTAINER: usize = 20;

fn render_rows(out: &mut String, p: &Painter, rows: &[Row], opts: &TableOptions) {
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(&r.cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    widths[8] = widths[8].min(MAX_CONTAINER);
    let indent = "   ";
    let mut shown = [true; 10];
    // Everything before the command column: indent, marker, cells and two-space gaps.
    let fixed = |shown: &[bool; 10]| -> usize {
        indent.len()
            + 2
            + (0..9)
                .filter(|&i| shown[i])
                .map(|i| widths[i] + 2)
                .sum::<usize>()
    };
    if let Some(w) = opts.width {
        for col in DROP_ORDER {
            if fixed(&shown) + MIN_COMMAND <= w {
                break;
            }
            shown[col] = false;
        }
    }
    let command_room = opts.width.map(|w| w.saturating_sub(fixed(&shown)).max(12));
    let line = |marker: &str, cells: &[String]| -> String {
        let mut s = format!("{indent}{marker} ");
        for (i, c) in cells.iter().enumerate() {
            if !shown[i] {
                continue;
            }
            let c = if i == 8 {
                cut(c, Some(MAX_CONTAINER))
            } else {
                c.clone()
            };
            if i == 9 {
                s.push_str(&cut(&c, command_room));
            } else if RIGHT[i] {
                let _ = write!(s, "{c:>w$}  ", w = widths[i]);
            } else {
                let _ = write!(s, "{c:<w$}  ", w = widths[i]);
            }
        }
        s.trim_end().to_string()
    };
    let header: Vec<String> = HEADERS.iter().map(ToString::to_string).collect();
    let _ = writeln!(
        out,
        "{}",
        p.paint(Style::new().dimmed(), &line(" ", &header))
    );
    for r in rows {
        let text = line(if r.watched { "*" } else { " " }, &r.cells);
        let style = if r.watched {
            Style::new().bold()
        } else if r.visible {
            Style::new()
        } else {
            Style::new().dimmed()
        };
        let _ = writeln!(out, "{}", p.paint(style, &text));
    }
}

fn cut(text: &str, room: Option<usize>) -> String {
    match room {
        Some(room) if text.chars().count() > room => {
            let mut s: String = text.chars().take(room.saturating_sub(1)).collect();
            s.push('…');
            s
        }
        _ => text.to_string(),
    }
}
