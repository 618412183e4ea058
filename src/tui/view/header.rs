//! The header line, the findings panel and the footer.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::Context;
use crate::detect::Severity;
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
    let mut pieces = pieces(state, ctx, frame, link);
    let room = usize::from(area.width).saturating_sub(spans_width(&spans));
    fit_ranked(&mut pieces, room, " · ".chars().count(), Some(0));
    for (_, piece) in pieces {
        spans.push(Span::raw(" · "));
        spans.push(piece);
    }
    if let Some(host) = &frame.host {
        let used: usize = spans.iter().map(Span::width).sum();
        spans.extend(host_summary(host, usize::from(area.width), used, t));
    }
    super::draw_lines(f, area, &[Line::from(spans)]);
}

/// The header's pieces after `gpuwatch`, in the order shown, each with its rank (0: always
/// kept): what does not fit is left out whole, the least important first (CUDA, driver, source,
/// host), never cut mid-word; freshness, a broken link, PAUSED, the findings count and a scope
/// stay.
fn pieces(
    state: &UiState,
    ctx: &Context,
    frame: &std::sync::Arc<crate::model::Frame>,
    link: Option<(String, bool)>,
) -> Vec<(u8, Span<'static>)> {
    let t = ctx.theme;
    let info = &frame.source;
    let clean = crate::text::clean;
    let mut pieces: Vec<(u8, Span<'static>)> = vec![
        (4, Span::raw(clean(&info.host).into_owned())),
        (5, Span::raw(info.kind.to_string())),
    ];
    if let Some(d) = &info.driver_version {
        pieces.push((6, Span::raw(format!("driver {}", clean(d)))));
    }
    if let Some(c) = &info.cuda_version {
        pieces.push((7, Span::raw(format!("CUDA {}", clean(c)))));
    }
    if let Some(scope) = state.scope.label() {
        // Limited from the command line (tui --gpu, --only-visible, --user): say so up front.
        pieces.push((1, Span::styled(format!("only {scope}"), t.warn())));
    }
    // What is on screen (older than the newest sample while paused).
    let shown = state.shown.as_ref().map_or(frame, |f| f);
    let replay = info.span.filter(|_| info.kind == SourceKind::Replay);
    let fresh = if let Some(span) = replay {
        // A replay's samples are recorded: where in the recording the screen is, not how long
        // ago the sampler handed the sample over (always a fraction of a second).
        Span::styled(replay_position(&span, shown.sample.taken_at), t.dim())
    } else if ctx.stale(frame) {
        Span::styled(
            format!("STALE {:.0}s", ctx.age(frame).as_secs_f64()),
            t.bad(),
        )
    } else {
        Span::styled(
            format!("sample {:.1}s ago", ctx.age(frame).as_secs_f64()),
            t.dim(),
        )
    };
    pieces.push((0, fresh));
    if let Some((text, bad)) = link {
        // Connected: where from, dimmed. Down: the whole story, loud, before anything else.
        pieces.push((
            if bad { 0 } else { 3 },
            Span::styled(text, if bad { t.bad() } else { t.dim() }),
        ));
    }
    if state.paused {
        // What is on screen is older than the newest sample: say how old (it said "sample
        // 0.0s ago · PAUSED", the newest sample's age, while the screen stood still). A
        // replay's position says where the screen is already.
        let age = (ctx.now - shown.sample.taken_at).max(0.0);
        pieces.push((
            0,
            Span::styled(
                if replay.is_some() {
                    "PAUSED (p)".to_string()
                } else {
                    format!(
                        "PAUSED (p): the screen is from {} ago",
                        crate::output::fmt_eta(age)
                    )
                },
                t.warn(),
            ),
        ));
    }
    let n = state.findings_count(ctx.mono);
    if n > 0 {
        pieces.push((
            0,
            Span::styled(
                format!("{n} finding{}", if n == 1 { "" } else { "s" }),
                t.warn(),
            ),
        ));
    }
    pieces
}

/// Leaves out of `pieces` (rank, text, in the order shown; each costs its width and `sep`)
/// the least important (the highest rank, the later of equal ones) until they fit in `room`,
/// whole: a piece is never cut. Ranks up to `keep` stay even when they do not fit. The header's
/// facts and its host summary are fitted so.
fn fit_ranked(pieces: &mut Vec<(u8, Span<'static>)>, room: usize, sep: usize, keep: Option<u8>) {
    let cost = |pieces: &[(u8, Span<'static>)]| -> usize {
        pieces.iter().map(|(_, p)| p.width() + sep).sum()
    };
    while cost(pieces) > room {
        let Some(worst) = pieces
            .iter()
            .enumerate()
            .filter(|(_, (rank, _))| keep.is_none_or(|k| *rank > k))
            .max_by_key(|(i, (rank, _))| (*rank, *i))
            .map(|(i, _)| i)
        else {
            break;
        };
        pieces.remove(worst);
    }
}

fn spans_width(spans: &[Span<'_>]) -> usize {
    spans.iter().map(Span::width).sum()
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
    let mut pieces: Vec<(u8, Span<'static>)> = Vec::new();
    if let Some(cpu) = h.cpu_percent {
        pieces.push((1, Span::raw(format!("CPU {cpu:.0}%"))));
    }
    if h.memory_total > 0 {
        let mem = format!(
            "mem {}/{}",
            fmt_bytes(h.memory_used()),
            fmt_bytes(h.memory_total)
        );
        pieces.push((0, Span::styled(mem, mem_style)));
    }
    if h.swap_total > 0 {
        let swap = format!(
            "swap {}/{}",
            fmt_bytes(h.swap_used),
            fmt_bytes(h.swap_total)
        );
        pieces.push((2, Span::styled(swap, swap_style)));
    }
    if let Some([one, five, fifteen]) = h.load {
        pieces.push((
            3,
            Span::raw(format!("load {one:.2} {five:.2} {fifteen:.2}")),
        ));
    }
    // The label and the separators between the pieces kept: LABEL + Σ (piece + SEP) − SEP.
    let sep = SEP.chars().count();
    let room = (width + sep).saturating_sub(used + GAP + LABEL.len());
    fit_ranked(&mut pieces, room, sep, None);
    if pieces.is_empty() {
        return Vec::new();
    }
    let cells = LABEL.len()
        + pieces.iter().map(|(_, p)| p.width()).sum::<usize>()
        + sep * (pieces.len() - 1);
    let pad = width.saturating_sub(used + cells);
    let mut out = vec![Span::raw(" ".repeat(pad)), Span::styled(LABEL, t.dim())];
    for (i, (_, piece)) in pieces.into_iter().enumerate() {
        if i > 0 {
            out.push(Span::styled(SEP, t.dim()));
        }
        out.push(piece);
    }
    out
}

pub fn render_findings(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let list = state.findings_lines(ctx.mono);
    let height = usize::from(area.height);
    let lines: Vec<Line> = if list.is_empty() {
        vec![Line::from(Span::styled("✓ no findings", t.dim()))]
    } else {
        let cursor = state.findings_cursor.min(list.len() - 1);
        let focus = state.findings_focus;
        // The window keeps the cursor in view while the panel has the keys.
        let start = if focus {
            (cursor + 1).saturating_sub(height)
        } else {
            0
        };
        let end = (start + height).min(list.len());
        let cut_off = end - start < list.len();
        (start..end)
            .map(|i| {
                let line = &list[i];
                let mut text = format!("! {}", line.text);
                if cut_off && i + 1 == end {
                    // Said first, so that a long finding does not cut it off.
                    let count = if focus {
                        format!("({}–{end} of {})", start + 1, list.len())
                    } else {
                        format!("({} of {} shown, f: scroll)", end - start, list.len())
                    };
                    text = format!("{count} {text}");
                }
                let mut style = match line.severity {
                    Severity::Critical => t.bad(),
                    Severity::Info => t.dim(),
                    Severity::Warning => t.warn(),
                };
                if focus && i == cursor {
                    style = style.patch(t.selected());
                }
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
        SortKey::Type => "type",
        SortKey::Container => "container",
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
            super::draw_lines(f, area, &[whole_hints(&spans, area.width)]);
            return;
        }
        if state.mode() == Mode::Findings {
            hint(&mut spans, "Esc", "back".into());
            hint(&mut spans, "↑↓", "move".into());
            hint(&mut spans, "⏎", "go to".into());
            if state.view == crate::tui::state::View::Findings {
                hint(&mut spans, "F", "close".into());
            } else {
                hint(&mut spans, "F", "all findings".into());
            }
            hint(&mut spans, "p", pause.into());
            hint(&mut spans, "?", "help".into());
            hint(&mut spans, "q", "quit".into());
            super::draw_lines(f, area, &[whole_hints(&spans, area.width)]);
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
        hint(&mut spans, "f", "findings".into());
        hint(&mut spans, "⏎", "detail".into());
        hint(&mut spans, "t", "tree".into());
        hint(&mut spans, "c", "chart".into());
        if !state.read_only {
            hint(&mut spans, "K", "kill".into());
        }
        hint(&mut spans, "p", pause.into());
        whole_hints(&spans, area.width)
    };
    super::draw_lines(f, area, &[line]);
}

/// The key hints (a key span and its text span each) that fit in `width` whole: a hint that
/// does not fit is left out, never cut ("f finding").
fn whole_hints(spans: &[Span<'static>], width: u16) -> Line<'static> {
    let mut used = 0usize;
    let mut kept = Vec::with_capacity(spans.len());
    for pair in spans.chunks(2) {
        let w: usize = pair
            .iter()
            .map(|s| s.content.trim_end().chars().count())
            .sum();
        if used + w > usize::from(width) {
            break;
        }
        used += pair
            .iter()
            .map(|s| s.content.chars().count())
            .sum::<usize>();
        kept.extend(pair.iter().cloned());
    }
    Line::from(kept)
}
