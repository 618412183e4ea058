//! The process detail view (command line, cwd, parents, the environment variables that matter,
//! GPU memory and SM % history charts, peak) and the chart of a GPU's memory split by process.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph, Wrap};

use super::{Context, cut, fmt_growth};
use crate::history::ProcKey;
use crate::model::{GpuSample, ProcSample};
use crate::output::{fmt_bytes, fmt_elapsed, fmt_eta};
use crate::source::procdetail::ProcDetail;
use crate::tui::state::{CHART_SPANS, UiState};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A process's line on the chart: label, points, latest GiB.
type Line3 = (String, Vec<(f64, f64)>, f64);

pub fn render(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context, key: &ProcKey) {
    let frame = state.shown.as_ref();
    let current = frame.and_then(|fr| {
        fr.sample
            .gpus
            .iter()
            .find(|g| g.uuid == key.gpu)
            .and_then(|g| {
                g.processes
                    .iter()
                    .find(|p| p.pid == key.pid)
                    .map(|p| (g, p))
            })
    });
    let hist = state.history().process(key);
    let lines = info_lines(state, ctx, key, current, hist);
    let info_h = (lines.len() as u16 + 1)
        .min(area.height / 2 + 2)
        .min(area.height);
    let [info, charts] =
        Layout::vertical([Constraint::Length(info_h), Constraint::Min(0)]).areas(area);
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), info);
    if charts.height < 4 {
        return;
    }
    let [mem_area, sm_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .spacing(3)
            .areas(charts);
    let points: Vec<(f64, Option<u64>, Option<f32>)> = hist.map_or_else(Vec::new, |h| {
        h.points().map(|p| (p.t, p.used, p.sm)).collect()
    });
    let t0 = ctx.now;
    let mem: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|(x, u, _)| u.map(|u| (x - t0, u as f64 / GIB)))
        .collect();
    let sm: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|(x, _, s)| s.map(|s| (x - t0, f64::from(s))))
        .collect();
    let xmin = mem.first().map_or(-60.0, |p| p.0.min(-10.0));
    let ymax = mem.iter().map(|p| p.1).fold(0.0, f64::max).max(0.1) * 1.1;
    chart(
        f,
        mem_area,
        ctx,
        &Series {
            title: "GPU memory (GiB)",
            data: &mem,
            x_bounds: (xmin, 0.0),
            y_bounds: (0.0, ymax),
            colour: 0,
        },
    );
    chart(
        f,
        sm_area,
        ctx,
        &Series {
            title: "SM %",
            data: &sm,
            x_bounds: (xmin, 0.0),
            y_bounds: (0.0, 100.0),
            colour: 2,
        },
    );
}

/// The text part of the detail view.
fn info_lines<'a>(
    state: &'a UiState,
    ctx: &Context,
    key: &ProcKey,
    current: Option<(&GpuSample, &ProcSample)>,
    hist: Option<&crate::history::ProcHistory>,
) -> Vec<Line<'a>> {
    let t = ctx.theme;
    let mut lines: Vec<Line> = Vec::new();
    let head = match current {
        Some((g, p)) => format!(
            "PID {} · {} · {} on GPU {} · SM {} · {}",
            key.pid,
            crate::text::clean_or(p.host.user.as_deref(), "?"),
            p.used_bytes.map_or_else(|| "n/a".to_string(), fmt_bytes),
            g.index,
            p.sm_percent
                .map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}%")),
            p.kind.label()
        ),
        None => format!("PID {} · no longer on the GPU", key.pid),
    };
    lines.push(Line::from(Span::styled(head, t.title())));
    if let Some((g, p)) = current {
        let d = state.derived_of(g, p);
        let peak = hist
            .and_then(|h| Some((h.peak_used()?, h.latest()?.t)))
            .map_or_else(
                || "-".to_string(),
                |((b, when), latest)| peak_text(b, when, latest, ctx.now),
            );
        lines.push(Line::from(format!(
            "peak {peak} · growth {} MiB/min · CPU {} · RSS {} · elapsed {}{}",
            fmt_growth(d.growth),
            p.host
                .cpu_percent
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0}%")),
            p.host.rss_bytes.map_or_else(|| "-".to_string(), fmt_bytes),
            p.host.start_time.map_or_else(
                || "-".to_string(),
                |s| fmt_elapsed((ctx.now.max(0.0) as u64).saturating_sub(s))
            ),
            p.host
                .container
                .as_ref()
                .map(|c| format!(" · container {}", crate::text::clean(c)))
                .unwrap_or_default()
        )));
    }
    match &state.detail {
        None => lines.push(Line::from(Span::styled("reading /proc…", t.dim()))),
        Some(d) => lines.extend(proc_lines(d, current, ctx)),
    }
    lines
}

/// What `/proc` says: command, cwd, parents, children, the environment that matters.
fn proc_lines(
    d: &ProcDetail,
    current: Option<(&GpuSample, &ProcSample)>,
    ctx: &Context,
) -> Vec<Line<'static>> {
    let t = ctx.theme;
    let mut lines = Vec::new();

    let cmd = d
        .command
        .clone()
        .or_else(|| current.and_then(|(_, p)| p.host.command.clone()))
        .unwrap_or_else(|| "(not visible here)".to_string());
    lines.push(Line::from(vec![
        Span::styled("command ", t.dim()),
        Span::raw(crate::text::clean(&cmd).into_owned()),
    ]));
    lines.push(Line::from(vec![
        Span::styled("cwd     ", t.dim()),
        Span::raw(d.cwd.as_ref().map_or_else(
            || "-".to_string(),
            |p| crate::text::clean(&p.display().to_string()).into_owned(),
        )),
    ]));
    let chain: Vec<String> = d
        .ancestors
        .iter()
        .map(|a| format!("{} {}", a.pid, crate::text::clean(&a.name)))
        .collect();
    lines.push(Line::from(vec![
        Span::styled("parents ", t.dim()),
        Span::raw(if chain.is_empty() {
            "-".to_string()
        } else {
            chain.join(" ← ")
        }),
    ]));
    if !d.children.is_empty() {
        let kids: Vec<String> = d
            .children
            .iter()
            .map(|c| format!("{} {}", c.pid, crate::text::clean(&c.name)))
            .collect();
        lines.push(Line::from(vec![
            Span::styled("children ", t.dim()),
            Span::raw(kids.join(", ")),
        ]));
    }
    if let Some(note) = &d.env_note {
        lines.push(Line::from(vec![
            Span::styled("env     ", t.dim()),
            Span::styled(note.clone(), t.dim()),
        ]));
    } else if d.env.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("env     ", t.dim()),
            Span::raw("none of the GPU variables is set"),
        ]));
    }
    for (k, v) in &d.env {
        lines.push(Line::from(vec![
            Span::styled(format!("  {}", crate::text::clean(k)), t.key()),
            Span::raw(format!("={}", crate::text::clean(v))),
        ]));
    }

    lines
}

/// One braille line chart.
struct Series<'a> {
    title: &'a str,
    data: &'a [(f64, f64)],
    x_bounds: (f64, f64),
    y_bounds: (f64, f64),
    colour: usize,
}

fn chart(frame: &mut Frame<'_>, area: Rect, ctx: &Context, s: &Series<'_>) {
    let theme = ctx.theme;
    let dataset = Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(theme.chart(s.colour))
        .data(s.data);
    let widget = Chart::new(vec![dataset])
        .block(
            Block::default()
                .borders(Borders::TOP)
                .title(s.title.to_string()),
        )
        .x_axis(
            Axis::default()
                .bounds([s.x_bounds.0, s.x_bounds.1])
                .labels(vec![
                    Span::raw(format!("{:.0}s", s.x_bounds.0)),
                    Span::raw("now"),
                ]),
        )
        .y_axis(
            Axis::default()
                .bounds([s.y_bounds.0, s.y_bounds.1])
                .labels(vec![
                    Span::raw(format!("{:.0}", s.y_bounds.0)),
                    Span::raw(format!("{:.0}", s.y_bounds.1)),
                ]),
        );
    frame.render_widget(widget, area);
}

/// A GPU's memory over time, total and split by process (the largest five), zoomable.
pub fn render_chart(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context, gpu: &str) {
    let t = ctx.theme;
    let span = CHART_SPANS[state.chart_span.min(CHART_SPANS.len() - 1)];
    let from = ctx.now - span.as_secs_f64();
    let Some(h) = state.history().gpu(gpu) else {
        f.render_widget(Paragraph::new("no history for this GPU yet"), area);
        return;
    };
    let index = state.shown.as_ref().and_then(|fr| {
        fr.sample
            .gpus
            .iter()
            .find(|g| g.uuid == gpu)
            .map(|g| g.index)
    });
    let total = h
        .latest()
        .and_then(|p| p.total)
        .map_or(1.0, |b| b as f64 / GIB);
    let used: Vec<(f64, f64)> = h
        .points()
        .filter(|p| p.t >= from)
        .filter_map(|p| p.used.map(|u| (p.t - ctx.now, u as f64 / GIB)))
        .collect();
    let mut procs: Vec<Line3> = state
        .history()
        .processes_on(gpu)
        .map(|(k, ph)| {
            let data: Vec<(f64, f64)> = ph
                .points()
                .filter(|p| p.t >= from)
                .filter_map(|p| p.used.map(|u| (p.t - ctx.now, u as f64 / GIB)))
                .collect();
            let last = data.last().map_or(0.0, |p| p.1);
            (format!("PID {}", k.pid), data, last)
        })
        .filter(|(_, d, _)| !d.is_empty())
        .collect();
    procs.sort_by(|a, b| b.2.total_cmp(&a.2));
    procs.truncate(5);
    let mut datasets = vec![
        Dataset::default()
            .name("used")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(t.title())
            .data(&used),
    ];
    for (i, (name, data, _)) in procs.iter().enumerate() {
        datasets.push(
            Dataset::default()
                .name(name.clone())
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(t.chart(i))
                .data(data),
        );
    }
    let title = format!(
        "GPU {} memory, last {} (GiB) · +/- zoom · Esc back",
        index.map_or_else(|| "?".to_string(), |i| i.to_string()),
        humantime::format_duration(span)
    );
    let c = Chart::new(datasets)
        .block(
            Block::default()
                .borders(Borders::TOP)
                .title(cut(&title, usize::from(area.width))),
        )
        .x_axis(
            Axis::default()
                .bounds([-span.as_secs_f64(), 0.0])
                .labels(vec![
                    Span::raw(format!("-{}", humantime::format_duration(span))),
                    Span::raw("now"),
                ]),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, total.max(0.1)])
                .labels(vec![Span::raw("0"), Span::raw(format!("{total:.0}"))]),
        );
    f.render_widget(c, area);
}

/// A process's peak and when it was: "now" while the latest sample is the peak (a growing
/// process), else how long ago ("15.2GiB (3 min ago)"; it said "(00:00 ago)").
fn peak_text(bytes: u64, when: f64, latest: f64, now: f64) -> String {
    if when >= latest {
        format!("{} (now)", fmt_bytes(bytes))
    } else {
        format!(
            "{} ({} ago)",
            fmt_bytes(bytes),
            fmt_eta((now - when).max(1.0))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_is_now_while_it_is_the_latest_sample_else_how_long_ago() {
        let gib = 1 << 30;
        assert_eq!(peak_text(15 * gib, 100.0, 100.0, 100.3), "15.0GiB (now)");
        assert_eq!(
            peak_text(15 * gib, 100.0, 280.0, 280.3),
            "15.0GiB (3 min ago)"
        );
        assert_eq!(
            peak_text(15 * gib, 100.0, 100.5, 100.6),
            "15.0GiB (1 s ago)"
        );
    }
}
