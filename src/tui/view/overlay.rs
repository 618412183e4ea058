//! Overlays: the help (generated from the key table) and the kill confirmation.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::Context;
use crate::tui::keymap::{HelpLine, help_lines, help_page};
use crate::tui::state::{KillStage, UiState};

fn centered(full: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(full.width);
    let h = height.min(full.height);
    Rect::new(
        full.x + (full.width - w) / 2,
        full.y + (full.height - h) / 2,
        w,
        h,
    )
}

/// The help: every binding, by where it applies. Taller than the screen, it scrolls
/// ([`UiState::help_scroll`]) and its bottom border says which lines are shown.
pub fn render_help(f: &mut Frame<'_>, full: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let all = help_lines();
    let (page, max) = help_page(full.height);
    let first = state.help_scroll.min(max);
    let lines: Vec<Line<'_>> = all
        .iter()
        .skip(first)
        .take(page)
        .map(|l| match l {
            HelpLine::Title(title) => Line::from(Span::styled(*title, t.header())),
            HelpLine::Key(b) => Line::from(vec![
                Span::styled(format!("  {:<8}", b.label), t.key()),
                Span::raw(b.help),
            ]),
            HelpLine::Note(note) => Line::from(Span::styled(*note, t.dim())),
        })
        .collect();
    let area = centered(full, 60, u16::try_from(page + 2).unwrap_or(u16::MAX));
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(" keys (? or Esc to close) ");
    if max > 0 {
        block = block.title_bottom(format!(
            " lines {}–{} of {} · ↑↓ PgUp PgDn ",
            first + 1,
            first + lines.len(),
            all.len()
        ));
    }
    f.render_widget(Clear, area);
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// The kill confirmation: the process, then the question or the outcome. Every text is
/// wrapped to the dialog's width and the dialog is as tall as its text (the screen at most:
/// then the label gives up lines first, so the question or the refusal stays whole).
pub fn render_kill(f: &mut Frame<'_>, full: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let Some(k) = &state.kill else { return };
    let width = full.width.min(70);
    let inner = usize::from(width.saturating_sub(2)).max(1);
    // The question or the outcome: its text, then its keys (on the same line when both fit).
    let (text, style, keys): (String, Style, &[(&str, &str)]) = match &k.stage {
        KillStage::Confirm => (
            "Send SIGTERM?".to_string(),
            Style::new(),
            &[("y", " yes   "), ("n/Esc", " no")],
        ),
        KillStage::TermSent => (
            "SIGTERM sent. If it does not exit:".to_string(),
            Style::new(),
            &[("9", " SIGKILL   "), ("Esc", " close")],
        ),
        KillStage::Done(m) => (m.clone(), t.ok(), &[]),
        KillStage::Failed(m) => (m.clone(), t.bad(), &[]),
    };
    let mut outcome: Vec<Line<'_>> = super::wrap(&text, inner)
        .into_iter()
        .map(|l| Line::from(Span::styled(l, style)))
        .collect();
    if !keys.is_empty() {
        let hint_len: usize = keys
            .iter()
            .map(|(k, w)| k.chars().count() + w.chars().count())
            .sum();
        let spans = keys
            .iter()
            .flat_map(|(k, what)| [Span::styled(*k, t.key()), Span::raw(*what)]);
        let last = outcome.last_mut().expect("wrap gives a line");
        if last.width() + 2 + hint_len <= inner {
            last.spans.push(Span::raw("  "));
            last.spans.extend(spans);
        } else {
            outcome.push(Line::from(spans.collect::<Vec<_>>()));
        }
    }
    let mut label = super::wrap(&k.label, inner);
    // Border, PID line, blank line and the outcome come first.
    let room = usize::from(full.height).saturating_sub(4 + outcome.len());
    if label.len() > room {
        label.truncate(room.max(1));
        if let Some(l) = label.last_mut() {
            *l = super::cut(&format!("{l} …"), inner);
        }
    }
    let mut lines = vec![Line::from(Span::styled(
        format!("PID {}", k.pid),
        t.title(),
    ))];
    lines.extend(label.into_iter().map(Line::from));
    lines.push(Line::raw(""));
    lines.extend(outcome);
    let area = centered(
        full,
        width,
        u16::try_from(lines.len() + 2).unwrap_or(u16::MAX),
    );
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" signal a process "),
        ),
        area,
    );
}
