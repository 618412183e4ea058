//! One panel per GPU: the memory bar split mine / external / unattributed / free, utilisation
//! and memory-bandwidth sparklines from history, temperature against the slowdown threshold,
//! power, clocks, PCIe. One line per GPU when space is short.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

use super::{Context, cut};
use crate::analysis::MemSplit;
use crate::model::GpuSample;
use crate::output::{fmt_bytes, fmt_rate};
use crate::tui::layout::GpuGrid;
use crate::tui::state::UiState;
use crate::tui::theme::Theme;

/// The split of a GPU's memory, as the analysis of the frame on screen decided it.
pub fn split(state: &UiState, g: &GpuSample) -> Option<MemSplit> {
    state.analysis.as_ref()?.gpu(&g.uuid)?.split
}

/// The bar: `█` mine, `▓` other processes, `▒` unattributed (dim: of unknown owner, when some
/// process's memory is not known), `░` free (the shapes carry the meaning without colour).
fn bar(s: &MemSplit, width: usize, t: Theme) -> Vec<Span<'static>> {
    if width == 0 || s.total == 0 {
        return Vec::new();
    }
    let cells = |b: u64| ((b as f64 / s.total as f64) * width as f64).round() as usize;
    let mine = cells(s.drawn_mine).min(width);
    let ext = cells(s.drawn_others).min(width - mine);
    let rest = s
        .used
        .saturating_sub(s.drawn_mine.saturating_add(s.drawn_others));
    let unat = cells(rest).min(width - (mine + ext));
    let free = width.saturating_sub(mine + ext + unat);
    vec![
        Span::styled("█".repeat(mine), t.mine()),
        Span::styled("▓".repeat(ext), t.external()),
        Span::styled(
            "▒".repeat(unat),
            if s.unattributed.is_some() {
                t.unattributed()
            } else {
                t.dim()
            },
        ),
        Span::styled("░".repeat(free), t.free()),
    ]
}

/// A sparkline of the last `width` values (0–100).
fn sparkline(values: &[f32], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let start = values.len().saturating_sub(width);
    let mut s: String = values[start..]
        .iter()
        .map(|v| BARS[((v.clamp(0.0, 100.0) / 100.0) * 7.0).round() as usize])
        .collect();
    let len = s.chars().count();
    if len < width {
        s = " ".repeat(width - len) + &s;
    }
    s
}

/// Growth as the process table shows it: MiB per minute, signed.
pub fn fmt_growth(bytes_per_s: Option<f64>) -> String {
    match bytes_per_s {
        None => "-".to_string(),
        Some(v) => {
            let mib_min = v * 60.0 / (1024.0 * 1024.0);
            if mib_min.abs() < 0.5 {
                "0".to_string()
            } else {
                format!("{mib_min:+.0}")
            }
        }
    }
}

pub fn render(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context, grid: GpuGrid) {
    if area.height == 0 {
        return;
    }
    let gpus = state.visible_gpus();
    if gpus.is_empty() {
        return;
    }
    let per_column = gpus.len().div_ceil(usize::from(grid.columns));
    let col_width = area.width / grid.columns;
    for (i, g) in gpus.iter().enumerate() {
        let col = (i / per_column) as u16;
        let row = (i % per_column) as u16;
        let r = Rect::new(
            area.x + col * col_width,
            area.y + row * grid.lines,
            col_width.saturating_sub(u16::from(grid.columns > 1)),
            grid.lines,
        );
        if r.y + r.height > area.y + area.height {
            break;
        }
        let lines = if grid.lines >= 3 {
            panel(state, ctx, g, usize::from(r.width))
        } else {
            vec![compact(state, ctx, g, usize::from(r.width))]
        };
        super::draw_lines(f, r, &lines);
    }
}

fn title(g: &GpuSample) -> String {
    let name = g
        .name
        .as_deref()
        .map_or("n/a", |n| n.strip_prefix("NVIDIA ").unwrap_or(n));
    format!("GPU {} {}", g.index, crate::text::clean(name))
}

fn memory_text(g: &GpuSample) -> String {
    g.memory.map_or_else(
        || "memory n/a".to_string(),
        |m| {
            format!(
                "{}/{} {:.0}%",
                fmt_bytes(m.used),
                fmt_bytes(m.total),
                if m.total > 0 {
                    m.used as f64 * 100.0 / m.total as f64
                } else {
                    0.0
                }
            )
        },
    )
}

/// The room the memory text is given beside the bar: the same for every GPU up to
/// `999.9GiB/999.9GiB 100%`, so that the bars of a screen have one width.
fn mem_room(mem: &str) -> usize {
    mem.chars().count().max(23)
}

fn lost_line(g: &GpuSample, t: Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(title(g), t.title()),
        Span::styled("  LOST: fell off the bus or being reset", t.bad()),
    ])
}

fn used_style(g: &GpuSample, t: Theme) -> ratatui::style::Style {
    t.memory(g.memory)
}

fn temp_span(g: &GpuSample, t: Theme) -> Span<'static> {
    match (g.temperature_c, g.temp_slowdown_c) {
        (Some(c), Some(s)) => Span::styled(
            format!("{c}°C/{s}"),
            t.level(
                f64::from(c),
                f64::from(s.saturating_sub(10)),
                f64::from(s.saturating_sub(3)),
            ),
        ),
        (Some(c), None) => Span::raw(format!("{c}°C")),
        (None, _) => Span::styled("temp n/a", t.dim()),
    }
}

fn power_text(g: &GpuSample) -> String {
    match (g.power_watts, g.power_limit_watts) {
        (Some(w), Some(l)) => format!("{w:.0}/{l:.0}W"),
        (Some(w), None) => format!("{w:.0}W"),
        (None, _) => "power n/a".to_string(),
    }
}

/// Three lines: bar, sparklines, sensors.
fn panel(state: &UiState, ctx: &Context, g: &GpuSample, width: usize) -> Vec<Line<'static>> {
    let t = ctx.theme;
    if g.lost {
        return vec![lost_line(g, t)];
    }
    let head = title(g);
    let mem = memory_text(g);
    let bar_width = width
        .saturating_sub(head.chars().count() + mem_room(&mem) + 6)
        .min(60);
    let mut line1 = vec![Span::styled(head, t.title()), Span::raw(" ▕")];
    if let Some(s) = split(state, g) {
        line1.extend(bar(&s, bar_width, t));
    } else {
        line1.push(Span::styled(" ".repeat(bar_width), t.dim()));
    }
    line1.push(Span::raw("▏ "));
    line1.push(Span::styled(mem, used_style(g, t)));

    let hist = state.history().gpu(&g.uuid);
    let util: Vec<f32> =
        hist.map_or_else(Vec::new, |h| h.points().filter_map(|p| p.util).collect());
    let mem_util: Vec<f32> = hist.map_or_else(Vec::new, |h| {
        h.points().filter_map(|p| p.mem_util).collect()
    });
    let spark_w = (width.saturating_sub(30) / 2).clamp(4, 40);
    let pct = |v: Option<f32>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}%"));
    let line2 = Line::from(vec![
        Span::styled("  util ", t.dim()),
        Span::styled(sparkline(&util, spark_w), t.ok()),
        Span::raw(format!(" {:>4}", pct(g.util_gpu))),
        Span::styled("  mem-bw ", t.dim()),
        Span::styled(sparkline(&mem_util, spark_w), t.chart(4)),
        Span::raw(format!(" {:>4}", pct(g.util_mem))),
    ]);

    let line3 = ranked_facts(&facts(state, g, t), width);
    let clip = |line: Vec<Span<'static>>| Line::from(clip_line(line, width));
    vec![clip(line1), clip(line2.spans), Line::from(line3)]
}

/// The facts of a panel's third line, most important first: the memory split (mine, external
/// and its unattributed part), the time to full, temperature against its slowdown threshold,
/// power, clocks, PCIe last. Each is a few spans that are shown whole or not at all.
fn facts(state: &UiState, g: &GpuSample, t: Theme) -> Vec<Vec<Span<'static>>> {
    let mut facts = Vec::new();
    if let Some(s) = split(state, g) {
        let known = |v: Option<u64>| v.map_or_else(|| "n/a".to_string(), fmt_bytes);
        // External is everything not mine, unattributed memory included (as in the snapshot,
        // the JSON and /metrics); the unattributed part is named after it.
        let mut split = vec![
            Span::styled(format!("mine {}", known(s.mine)), t.mine()),
            Span::styled(format!(" ext {}", known(s.external)), t.external()),
        ];
        match s.unattributed {
            None => split.push(Span::styled(" (unattr n/a)", t.dim())),
            Some(u) if u >= 1 << 20 => split.push(Span::styled(
                format!(" (unattr {})", fmt_bytes(u)),
                t.unattributed(),
            )),
            Some(_) => {}
        }
        facts.push(split);
    }
    facts.extend(full_in(state, g, t));
    facts.push(vec![temp_span(g, t)]);
    facts.push(vec![Span::raw(power_text(g))]);
    if let Some(c) = g.sm_clock_mhz {
        facts.push(vec![Span::raw(format!("{c}MHz"))]);
    }
    if let (Some(rx), Some(tx)) = (g.slow.pcie_rx_bytes_per_s, g.slow.pcie_tx_bytes_per_s) {
        facts.push(vec![Span::raw(format!(
            "PCIe ↓{} ↑{}",
            fmt_rate(rx),
            fmt_rate(tx)
        ))]);
    }
    facts
}

/// The detector's time to full, as a fact (only while the growth is a ramp).
fn full_in(state: &UiState, g: &GpuSample, t: Theme) -> Option<Vec<Span<'static>>> {
    let ttf = state.analysis.as_ref()?.gpu(&g.uuid)?.time_to_full_s?;
    Some(vec![Span::styled(
        format!("full in {}", crate::output::fmt_eta(ttf)),
        t.bad(),
    )])
}

/// As many of `facts` (most important first) as fit in `width`, each whole, two spaces before
/// each: what does not fit is dropped from the least important up, never cut.
fn ranked_facts(facts: &[Vec<Span<'static>>], width: usize) -> Vec<Span<'static>> {
    let mut out = Vec::new();
    let mut used = 0;
    for fact in facts {
        let n = 2 + fact
            .iter()
            .map(|s| s.content.chars().count())
            .sum::<usize>();
        if used + n > width {
            break;
        }
        used += n;
        out.push(Span::raw("  "));
        out.extend(fact.iter().cloned());
    }
    out
}

/// One line: title, bar, memory, then as many of the time to full, util, temperature and
/// power as fit, each whole.
fn compact(state: &UiState, ctx: &Context, g: &GpuSample, width: usize) -> Line<'static> {
    let t = ctx.theme;
    if g.lost {
        return lost_line(g, t);
    }
    let head = title(g);
    let mem = memory_text(g);
    let util = g
        .util_gpu
        .map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}%"));
    let bar_width = width
        .saturating_sub(head.chars().count() + mem_room(&mem) + 30)
        .clamp(4, 40);
    let mut spans = vec![Span::styled(head, t.title()), Span::raw(" ▕")];
    if let Some(s) = split(state, g) {
        spans.extend(bar(&s, bar_width, t));
    }
    spans.push(Span::raw("▏ "));
    spans.push(Span::styled(mem, used_style(g, t)));
    let mut facts = Vec::new();
    facts.extend(full_in(state, g, t));
    facts.push(vec![Span::raw(format!("util {util}"))]);
    facts.push(vec![temp_span(g, t)]);
    facts.push(vec![Span::raw(power_text(g))]);
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    spans.extend(ranked_facts(&facts, width.saturating_sub(used)));
    Line::from(clip_line(spans, width))
}

/// Cuts a line of spans to `width` characters.
fn clip_line(spans: Vec<Span<'static>>, width: usize) -> Vec<Span<'static>> {
    let mut left = width;
    let mut out = Vec::with_capacity(spans.len());
    for s in spans {
        if left == 0 {
            break;
        }
        let n = s.content.chars().count();
        if n <= left {
            left -= n;
            out.push(s);
        } else {
            out.push(Span::styled(cut(&s.content, left), s.style));
            left = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_reads_in_mib_per_minute() {
        assert_eq!(fmt_growth(None), "-");
        assert_eq!(fmt_growth(Some(0.0)), "0");
        assert_eq!(fmt_growth(Some(1024.0 * 1024.0)), "+60");
        assert_eq!(fmt_growth(Some(-2.0 * 1024.0 * 1024.0 / 60.0)), "-2");
    }

    #[test]
    fn facts_that_do_not_fit_are_dropped_whole_from_the_least_important_up() {
        let fact = |s: &str| vec![Span::raw(s.to_string())];
        let facts = [
            fact("mine 9GiB"),
            fact("full in 3 min"),
            fact("a long sensor text"),
            fact("1W"),
        ];
        let text = |w: usize| -> String {
            ranked_facts(&facts, w)
                .iter()
                .map(|s| s.content.to_string())
                .collect()
        };
        assert_eq!(
            text(80),
            "  mine 9GiB  full in 3 min  a long sensor text  1W"
        );
        // The third does not fit: it and everything below it go, although "1W" would fit.
        assert_eq!(text(30), "  mine 9GiB  full in 3 min");
        assert_eq!(text(12), "  mine 9GiB");
        assert_eq!(text(5), "");
    }

    #[test]
    fn sparkline_pads_and_scales() {
        assert_eq!(sparkline(&[0.0, 100.0], 4), "  ▁█");
        assert_eq!(sparkline(&[50.0; 10], 3).chars().count(), 3);
    }

    #[test]
    fn bar_cells_add_up_to_the_width() {
        let s = MemSplit {
            used: 70,
            total: 100,
            free: 30,
            mine: Some(30),
            external: Some(40),
            others: Some(30),
            unattributed: Some(10),
            drawn_mine: 30,
            drawn_others: 30,
        };
        let spans = bar(&s, 20, Theme::new(false));
        let n: usize = spans.iter().map(|s| s.content.chars().count()).sum();
        assert_eq!(n, 20);
        assert_eq!(spans[0].content.chars().count(), 6);
    }
}
