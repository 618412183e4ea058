//! Colours and emphasis. One theme works on dark and light terminals: it uses the terminal's
//! own foreground for text and only the 8 basic colours (which every palette maps to something
//! readable) for meaning. With colours off (`--no-color`, `NO_COLOR`) meaning is kept through
//! bold, reverse and symbols alone.

use ratatui::style::{Color, Modifier, Style};

use crate::detect::{MemLevel, MemLevels};

/// Styles by meaning, not by colour.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    pub color: bool,
    /// Where memory turns to a warning and critical ([`crate::detect::MemLevels`]).
    pub mem_levels: MemLevels,
}

impl Theme {
    /// With the `[detect]` defaults' memory levels.
    pub fn new(color: bool) -> Self {
        Self {
            color,
            mem_levels: MemLevels::default(),
        }
    }

    /// With the memory levels of the `[detect]` thresholds in use.
    #[must_use]
    pub fn with_mem_levels(self, mem_levels: MemLevels) -> Self {
        Self { mem_levels, ..self }
    }

    /// A GPU's memory, coloured by its level; dim when unknown.
    pub fn memory(self, memory: Option<crate::model::Memory>) -> Style {
        self.mem_level(self.mem_levels.of(memory))
    }

    /// The style of a memory level (dim when there is none).
    pub fn mem_level(self, level: Option<MemLevel>) -> Style {
        match level {
            None => self.dim(),
            Some(MemLevel::Ok) => self.ok(),
            Some(MemLevel::Warning) => self.warn(),
            Some(MemLevel::Critical) => self.bad(),
        }
    }

    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    pub fn text(self) -> Style {
        Style::new()
    }
    pub fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }
    pub fn title(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }
    /// The selected row.
    pub fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    /// Watched processes ("mine").
    pub fn mine(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub fn external(self) -> Style {
        self.fg(Color::Yellow)
    }
    pub fn unattributed(self) -> Style {
        self.fg(Color::Magenta)
    }
    pub fn free(self) -> Style {
        self.dim()
    }
    pub fn ok(self) -> Style {
        self.fg(Color::Green)
    }
    pub fn warn(self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }
    pub fn bad(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub fn key(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub fn chart(self, series: usize) -> Style {
        const PALETTE: [Color; 6] = [
            Color::Cyan,
            Color::Yellow,
            Color::Green,
            Color::Magenta,
            Color::Blue,
            Color::Red,
        ];
        self.fg(PALETTE[series % PALETTE.len()])
    }

    /// A level against thresholds: ok below `warn`, warn below `bad`, bad above.
    pub fn level(self, value: f64, warn: f64, bad: f64) -> Style {
        if value >= bad {
            self.bad()
        } else if value >= warn {
            self.warn()
        } else {
            self.ok()
        }
    }
}
