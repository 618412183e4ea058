//! The tree view (`t`): launchers, ranks and workers around the GPU processes, one line per
//! process: PID, user, GPU memory and SM % summed over its GPUs (and which GPUs), then the
//! branch (`├─`, `└─`, `│`) and the full command line, cut at the screen's edge. `*` marks a
//! watched process; a collapsed node says how many processes it hides. The model (rows,
//! collapsing, cursor) is [`crate::tui::tree`].

use std::collections::HashMap;
use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::{Context, cut};
use crate::model::ProcSample;
use crate::output::fmt_bytes;
use crate::tui::state::UiState;
use crate::tui::tree::{Shown, first_shown};

/// What the frame says about one PID, over all its GPUs.
#[derive(Default)]
struct OnGpu<'a> {
    /// Sum of the memory NVML gave; `None` when it gave none.
    memory: Option<u64>,
    sm: Option<f32>,
    gpus: Vec<u32>,
    /// The first of its samples (user, command, watched).
    sample: Option<&'a ProcSample>,
}

fn gpu_facts(state: &UiState) -> HashMap<u32, OnGpu<'_>> {
    let mut out: HashMap<u32, OnGpu<'_>> = HashMap::new();
    let Some(frame) = state.shown.as_ref() else {
        return out;
    };
    for g in &frame.sample.gpus {
        for p in &g.processes {
            let e = out.entry(p.pid).or_default();
            if let Some(b) = p.used_bytes {
                e.memory = Some(e.memory.unwrap_or(0).saturating_add(b));
            }
            if let Some(v) = p.sm_percent {
                e.sm = Some(e.sm.unwrap_or(0.0) + v);
            }
            if !e.gpus.contains(&g.index) {
                e.gpus.push(g.index);
            }
            e.sample.get_or_insert(p);
        }
    }
    out
}

/// The header line.
const HEADER: &str = "      PID USER       GPU-MEM  SM% GPU   TREE · COMMAND   -/+ collapse/expand";

/// One process's line (without its style).
fn text(s: &Shown<'_>, on_gpu: Option<&OnGpu<'_>>, watched: bool) -> String {
    let row = s.row;
    let sample = on_gpu.and_then(|g| g.sample);
    let clean = |v: &str| crate::text::clean(v).into_owned();
    let user = sample
        .and_then(|p| p.host.user.as_deref())
        .or(row.user.as_deref())
        .map_or_else(|| "-".to_string(), clean);
    let command = match sample {
        Some(p) if p.host.visible => p.host.display_command(),
        _ => row
            .command
            .clone()
            .or_else(|| (!row.name.is_empty()).then(|| row.name.clone()))
            .or_else(|| sample.map(|p| p.host.display_command()))
            .unwrap_or_else(|| "-".to_string()),
    };
    let (memory, sm, gpus) = match on_gpu {
        Some(g) => (
            g.memory.map_or_else(|| "n/a".to_string(), fmt_bytes),
            g.sm.map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}")),
            g.gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        None => (String::new(), String::new(), String::new()),
    };
    let mut line = String::with_capacity(64 + command.len());
    let _ = write!(
        line,
        "{} {:>7} {:<9} {memory:>8} {sm:>4} {:<5} {}",
        if watched { "*" } else { " " },
        row.pid,
        cut(&user, 9),
        cut(&gpus, 5),
        s.branch,
    );
    if s.hidden > 0 {
        let _ = write!(line, "[+{}] ", s.hidden);
    }
    line.push_str(&clean(&command));
    line
}

pub fn render(f: &mut Frame<'_>, area: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let width = usize::from(area.width);
    let mut lines = vec![Line::from(Span::styled(cut(HEADER, width), t.header()))];
    if state.tree.is_empty() {
        lines.push(Line::from(Span::styled(
            "reading the process tree…",
            t.dim(),
        )));
    }
    let facts = gpu_facts(state);
    let (shown, at) = state.tree.shown();
    let page = usize::from(area.height.saturating_sub(1));
    for s in shown.iter().skip(first_shown(at, page)).take(page) {
        let on_gpu = facts.get(&s.row.pid).filter(|_| s.row.on_gpu);
        let watched = on_gpu
            .and_then(|g| g.sample)
            .is_some_and(|p| state.is_watched(p));
        let mut style = if watched {
            t.mine()
        } else if on_gpu.is_some() {
            Style::new()
        } else {
            t.dim()
        };
        if s.selected {
            style = style.patch(t.selected());
        }
        lines.push(Line::from(Span::styled(
            cut(&text(s, on_gpu, watched), width),
            style,
        )));
    }
    super::draw_lines(f, area, &lines);
}
