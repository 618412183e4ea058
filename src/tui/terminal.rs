//! The terminal guard: raw mode, the alternate screen and mouse capture on entry; everything
//! restored on drop, and by the panic hook *before* the panic is reported, so a crash never
//! leaves a broken terminal behind.

use std::io::Write;
use std::sync::Once;

use crossterm::cursor::{Hide, Show};
use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

/// Restores the terminal when dropped.
pub struct TerminalGuard {
    _private: (),
}

static HOOK: Once = Once::new();

impl TerminalGuard {
    /// Takes over the terminal.
    pub fn enter() -> std::io::Result<Self> {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        enable_raw_mode()?;
        let guard = Self { _private: () };
        execute!(
            std::io::stdout(),
            EnterAlternateScreen,
            EnableMouseCapture,
            Hide
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal back as it was. Safe to call more than once.
pub fn restore() {
    let mut out = std::io::stdout();
    let _ = execute!(out, DisableMouseCapture, LeaveAlternateScreen, Show);
    let _ = disable_raw_mode();
    let _ = out.flush();
}
