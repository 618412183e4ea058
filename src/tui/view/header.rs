//! The header line, the findings panel and the footer.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

use super::Context;
use crate::detect::Severity;
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
    if let Some(scope) = state.scope.label() {
        // Limited from the command line (tui --gpu, --only-visible, --user): say so up front.
        spans.push(Span::styled(format!(" · only {scope}"), t.warn()));
    }
    spans.push(Span::raw(" · "));
    if ctx.stale(frame) {
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
        // 0.0s ago · PAUSED", the newest sample's age, while the screen stood still).
        let shown = state.shown.as_ref().map_or(frame, |f| f);
        let age = (ctx.now - shown.sample.taken_at).max(0.0);
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            format!(
                "PAUSED (p): the screen is from {} ago",
                crate::output::fmt_eta(age)
            ),
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
    super::draw_lines(f, area, &[Line::from(spans)]);
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
