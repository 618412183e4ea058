//! Overlays: the help (generated from the key table) and the kill confirmation.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

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

pub fn render_kill(f: &mut Frame<'_>, full: Rect, state: &UiState, ctx: &Context) {
    let t = ctx.theme;
    let Some(k) = &state.kill else { return };
    let mut lines = vec![
        Line::from(Span::styled(format!("PID {}", k.pid), t.title())),
        Line::from(k.label.clone()),
        Line::raw(""),
    ];
    match &k.stage {
        KillStage::Confirm => lines.push(Line::from(vec![
            Span::raw("Send SIGTERM?  "),
            Span::styled("y", t.key()),
            Span::raw(" yes   "),
            Span::styled("n/Esc", t.key()),
            Span::raw(" no"),
        ])),
        KillStage::TermSent => lines.push(Line::from(vec![
            Span::raw("SIGTERM sent. If it does not exit: "),
            Span::styled("9", t.key()),
            Span::raw(" SIGKILL   "),
            Span::styled("Esc", t.key()),
            Span::raw(" close"),
        ])),
        KillStage::Done(m) => lines.push(Line::from(Span::styled(m.clone(), t.ok()))),
        KillStage::Failed(m) => lines.push(Line::from(Span::styled(m.clone(), t.bad()))),
    }
    let area = centered(full, 70, 7);
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" signal a process "),
        ),
        area,
    );
}
