//! The header line, the findings panel and the footer.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::Context;
use crate::model::{HostSummary, RecordingSpan, SourceKind};
use crate::tui::state::{Mode, SortKey, UiState};

/// The header: who and what is watched, how fresh the data is.
pub fn render(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let mut spans = vec![Span::styled("gpuwatch", t.title())];
    let link = state
        .link
        .as_ref()
        .map(|(url, link)| crate::remote::describe(link, url, ctx.mono));
    let Some(frame) = state.latest.as_ref() else {
        match link {
            Some((text, bad)) => {
                spans.push(Span::raw("  "));
                spans.push(Span::styled(text, if bad { t.bad() } else { t.dim() }));
            }
            None => match state.in_flight.as_ref().filter(|c| c.is_stuck(ctx.mono)) {
                // A driver that hangs before the first sample: say where.
                Some(c) => spans.push(Span::styled(
                    format!("  no sample yet: {}", c.describe(ctx.mono)),
                    t.bad(),
                )),
                None => spans.push(Span::raw("  waiting for the first sample…")),
            },
        }
        super::draw_lines(f, area, &[Line::from(spans)]);
        return;
    };
    let info = &frame.source;
    let clean = crate::text::clean;
    let mut facts = vec![clean(&info.host).into_owned(), info.kind.to_string()];
    if let Some(d) = &info.driver_version {
        facts.push(format!("driver {}", clean(d)));
    }
    if let Some(c) = &info.cuda_version {
        facts.push(format!("CUDA {}", clean(c)));
    }
    spans.push(Span::raw(format!(" · {}", facts.join(" · "))));
    spans.push(Span::raw(" · "));
    // What is on screen (older than the newest sample while paused).
    let shown = state.shown.as_ref().map_or(frame, |f| f);
    let replay = info.span.filter(|_| info.kind == SourceKind::Replay);
    if let Some(span) = replay {
        // A replay's samples are recorded: where in the recording the screen is, not how long
        // ago the sampler handed the sample over (always a fraction of a second).
        spans.push(Span::styled(
            replay_position(&span, shown.sample.taken_at),
            t.dim(),
        ));
    } else if ctx.stale(frame) {
        spans.push(Span::styled(
            format!("STALE {:.0}s", ctx.age(frame).as_secs_f64()),
            t.bad(),
        ));
    } else {
        spans.push(Span::styled(
            format!("sample {:.1}s ago", ctx.age(frame).as_secs_f64()),
            t.dim(),
        ));
    }
    if let Some((text, bad)) = link {
        // Connected: where from, dimmed. Down: the whole story, loud, before anything else.
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(text, if bad { t.bad() } else { t.dim() }));
    }
    if state.paused {
        // What is on screen is older than the newest sample: say how old (it said "sample
        // 0.0s ago · PAUSED", the newest sample's age, while the screen stood still). A
        // replay's position says where the screen is already.
        let age = (ctx.now - shown.sample.taken_at).max(0.0);
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            if replay.is_some() {
                "PAUSED (p)".to_string()
            } else {
                format!(
                    "PAUSED (p): the screen is from {} ago",
                    crate::output::fmt_eta(age)
                )
            },
            t.warn(),
        ));
    }
    let n = state.findings_lines(ctx.mono).len();
    if n > 0 {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            format!("{n} finding{}", if n == 1 { "" } else { "s" }),
            t.warn(),
        ));
    }
    if let Some(host) = &frame.host {
        let used: usize = spans.iter().map(Span::width).sum();
        spans.extend(host_summary(host, usize::from(area.width), used, t));
    }
    super::draw_lines(f, area, &[Line::from(spans)]);
}

/// A replay's position: the recorded time of the sample on screen (UTC) and how far into the
/// recording it is, e.g. `at 2026-11-29 12:01:23 UTC · 01:23 of 10:00`.
fn replay_position(span: &RecordingSpan, taken_at: f64) -> String {
    let offset = span.offset(taken_at);
    let at = crate::times::format_rfc3339(span.start + offset).replacen('T', " ", 1);
    let at = at.strip_suffix('Z').unwrap_or(&at);
    let secs = |s: f64| s.max(0.0).round() as u64;
    format!(
        "at {at} UTC · {} of {}",
        crate::output::fmt_elapsed(secs(offset)),
        crate::output::fmt_elapsed(secs(span.length()))
    )
}

/// The host summary's label, the separator of its pieces, and the least gap before it.
const LABEL: &str = "host ";
const SEP: &str = " · ";
const GAP: usize = 3;

/// This host's CPU, memory, swap and load average, right-aligned after the header's facts
/// (`used` cells of `width`): the pieces that fit whole, memory first, then CPU, swap and
/// load; nothing when not even memory fits. Memory is coloured by the memory levels a GPU's
/// bar uses (host RAM running out kills training jobs), swap likewise while memory is at a
/// warning or worse and swap is in use.
fn host_summary(
    h: &HostSummary,
    width: usize,
    used: usize,
    t: crate::tui::theme::Theme,
) -> Vec<Span<'static>> {
    use crate::detect::MemLevel;
    use crate::output::fmt_bytes;
    let level = t
        .mem_levels
        .level(h.memory_used(), h.memory_total, Some(h.memory_available));
    let loud = level.filter(|l| *l >= MemLevel::Warning);
    let mem_style = loud.map_or_else(Style::new, |l| t.mem_level(Some(l)));
    let swap_style = if loud.is_some() && h.swap_used > 0 {
        let swap_full = h.swap_used as f64 >= 0.9 * h.swap_total as f64;
        t.mem_level(Some(if swap_full {
            MemLevel::Critical
        } else {
            loud.unwrap_or(MemLevel::Warning)
        }))
    } else {
        Style::new()
    };
    // (rank when cut, text, style), in the order shown.
    let mut pieces: Vec<(u8, String, Style)> = Vec::new();
    if let Some(cpu) = h.cpu_percent {
        pieces.push((1, format!("CPU {cpu:.0}%"), Style::new()));
    }
    if h.memory_total > 0 {
        let mem = format!(
            "mem {}/{}",
            fmt_bytes(h.memory_used()),
            fmt_bytes(h.memory_total)
        );
        pieces.push((0, mem, mem_style));
    }
    if h.swap_total > 0 {
        let swap = format!(
            "swap {}/{}",
            fmt_bytes(h.swap_used),
            fmt_bytes(h.swap_total)
        );
        pieces.push((2, swap, swap_style));
    }
    if let Some([one, five, fifteen]) = h.load {
        pieces.push((
            3,
            format!("load {one:.2} {five:.2} {fifteen:.2}"),
            Style::new(),
        ));
    }
    let cells = |chosen: &[&(u8, String, Style)]| {
        LABEL.len()
            + chosen.iter().map(|p| p.1.chars().count()).sum::<usize>()
            + SEP.chars().count() * chosen.len().saturating_sub(1)
    };
    let room = width.saturating_sub(used + GAP);
    let mut ranked: Vec<&(u8, String, Style)> = pieces.iter().collect();
    ranked.sort_by_key(|p| p.0);
    let mut keep = ranked.len();
    while keep > 0 && cells(&ranked[..keep]) > room {
        keep -= 1;
    }
    if keep == 0 {
        return Vec::new();
    }
    let ranks: Vec<u8> = ranked[..keep].iter().map(|p| p.0).collect();
    let chosen: Vec<&(u8, String, Style)> =
        pieces.iter().filter(|p| ranks.contains(&p.0)).collect();
    let pad = width.saturating_sub(used + cells(&chosen));
    let mut out = vec![Span::raw(" ".repeat(pad)), Span::styled(LABEL, t.dim())];
    for (i, (_, text, style)) in chosen.into_iter().enumerate() {
        if i > 0 {
            out.push(Span::styled(SEP, t.dim()));
        }
        out.push(Span::styled(text.clone(), *style));
    }
    out
}

pub fn render_findings(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let list = state.findings_lines(ctx.mono);
    let lines: Vec<Line> = if list.is_empty() {
        vec![Line::from(Span::styled("✓ no findings", t.dim()))]
    } else {
        let more = list.len().saturating_sub(usize::from(area.height));
        list.iter()
            .take(usize::from(area.height))
            .enumerate()
            .map(|(i, s)| {
                let mut text = format!("! {s}");
                if more > 0 && i + 1 == usize::from(area.height) {
                    // Said first, so that a long finding does not cut it off.
                    text = format!(
                        "({} of {} shown) ! {s}",
                        usize::from(area.height),
                        list.len()
                    );
                }
                let style = if s.starts_with("[critical]") {
                    t.bad()
                } else if s.starts_with("[info]") {
                    t.dim()
                } else {
                    t.warn()
                };
                Line::from(Span::styled(
                    super::cut(&text, usize::from(area.width)),
                    style,
                ))
            })
            .collect()
    };
    super::draw_lines(f, area, &lines);
}

fn sort_name(key: SortKey) -> &'static str {
    match key {
        SortKey::Memory => "memory",
        SortKey::Growth => "growth",
        SortKey::Peak => "peak",
        SortKey::Sm => "SM%",
        SortKey::Cpu => "CPU%",
        SortKey::Rss => "RSS",
        SortKey::Elapsed => "elapsed",
        SortKey::Pid => "PID",
        SortKey::User => "user",
        SortKey::Gpu => "GPU",
        SortKey::Command => "command",
    }
}

pub fn render_footer(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let line = if state.filter_editing {
        Line::from(vec![
            Span::styled("/", t.key()),
            Span::raw(format!(" filter: {}▏", state.filter)),
            Span::styled("  Enter keep · Ctrl-U erase · Esc clear", t.dim()),
        ])
    } else if let Some(m) = &state.message {
        Line::from(Span::styled(m.clone(), t.warn()))
    } else {
        let mut spans = Vec::new();
        let hint = |spans: &mut Vec<Span<'static>>, k: &'static str, what: String| {
            spans.push(Span::styled(k, t.key()));
            spans.push(Span::raw(format!(" {what}  ")));
        };
        let pause = if state.paused { "resume" } else { "pause" };
        // Detail and chart views: their own keys, not the table's.
        if matches!(state.mode(), Mode::Detail | Mode::Chart) {
            hint(&mut spans, "Esc", "back".into());
            if state.mode() == Mode::Chart {
                hint(&mut spans, "+/-", "zoom".into());
            } else {
                hint(&mut spans, "c", "chart".into());
            }
            hint(&mut spans, "g", "GPU".into());
            hint(&mut spans, "p", pause.into());
            hint(&mut spans, "?", "help".into());
            hint(&mut spans, "q", "quit".into());
            super::draw_lines(f, area, &[Line::from(spans)]);
            return;
        }
        hint(&mut spans, "q", "quit".into());
        hint(&mut spans, "?", "help".into());
        hint(
            &mut spans,
            "s",
            format!(
                "sort:{}{}",
                sort_name(state.sort),
                if state.descending { "↓" } else { "↑" }
            ),
        );
        let filter = if state.filter.is_empty() {
            "filter".to_string()
        } else {
            format!("filter:{}", state.filter)
        };
        hint(&mut spans, "/", filter);
        let gpu = state
            .gpu_filter
            .map_or_else(|| "GPU:all".to_string(), |i| format!("GPU:{i}"));
        hint(&mut spans, "g", gpu);
        hint(&mut spans, "⏎", "detail".into());
        hint(&mut spans, "t", "tree".into());
        hint(&mut spans, "c", "chart".into());
        if !state.read_only {
            hint(&mut spans, "K", "kill".into());
        }
        hint(&mut spans, "p", pause.into());
        Line::from(spans)
    };
    super::draw_lines(f, area, &[line]);
}
