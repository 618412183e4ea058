//! The terminal guard: raw mode, the alternate screen and mouse capture on entry; everything
//! restored on drop, and by the panic hook *before* the panic is reported, so a crash never
//! leaves a broken terminal behind.
//!
//! [`ScreenSignals`]: the signals a full-screen view answers, so none of them leaves the
//! terminal in the view's modes. SIGTERM, SIGHUP, SIGINT and SIGQUIT end the view (the guard
//! restores the terminal). SIGTSTP (`kill -TSTP`; Ctrl-Z itself is a key in raw mode) restores
//! the terminal, stops the process, and on SIGCONT (`fg`) re-enters the modes for a redraw; a
//! SIGCONT after a stop that could not be caught (SIGSTOP) re-enters them too, since the shell
//! may have reset the terminal meanwhile.

use std::io::Write;
use std::sync::Once;

use crossterm::cursor::{Hide, Show};
use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use tokio::signal::unix::{Signal, SignalKind, signal};

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
        let guard = Self { _private: () };
        reenter()?;
        Ok(guard)
    }
}

/// Puts the terminal (back) into the view's modes: raw, the alternate screen, mouse capture,
/// no cursor.
fn reenter() -> std::io::Result<()> {
    enable_raw_mode()?;
    execute!(
        std::io::stdout(),
        EnterAlternateScreen,
        EnableMouseCapture,
        Hide
    )
}

/// Clears the screen and makes the next draw repaint every cell (at start; after a stop, the
/// screen holds the shell's output). Not `Terminal::clear`, which asks the terminal for the
/// cursor position (ESC[6n) and fails after 2 s without an answer: some terminals (serial
/// consoles, some web and IDE terminals, `script` logs replayed) never answer, and once the
/// input thread reads the terminal the answer never reaches `clear` anyway. Nothing in the
/// dashboards asks the terminal anything.
pub fn repaint<W: std::io::Write>(
    term: &mut ratatui::Terminal<ratatui::backend::CrosstermBackend<W>>,
) -> std::io::Result<()> {
    let size = term.size()?;
    term.resize(ratatui::layout::Rect::new(0, 0, size.width, size.height))
}

/// What a [`ScreenSignals`] signal asks of the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenSignal {
    /// End the view (SIGTERM, SIGHUP, SIGINT, SIGQUIT).
    Quit,
    /// The process was stopped and continued: the modes are back; clear and redraw everything.
    Resumed,
}

/// The signals a full-screen view answers (see the module docs). Create it before
/// [`TerminalGuard::enter`], so no signal is missed in between.
pub struct ScreenSignals {
    term: Signal,
    hup: Signal,
    int: Signal,
    quit: Signal,
    tstp: Signal,
    cont: Signal,
}

impl ScreenSignals {
    /// Installs the handlers (on the current tokio runtime).
    pub fn new() -> std::io::Result<Self> {
        let raw = |n: i32| signal(SignalKind::from_raw(n));
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            tstp: raw(rustix::process::Signal::TSTP.as_raw())?,
            cont: raw(rustix::process::Signal::CONT.as_raw())?,
        })
    }

    /// Waits for the next signal. SIGTSTP is handled here: the terminal is restored, the
    /// process stops, and once continued the modes are re-entered ([`ScreenSignal::Resumed`]).
    pub async fn recv(&mut self) -> std::io::Result<ScreenSignal> {
        tokio::select! {
            _ = self.term.recv() => Ok(ScreenSignal::Quit),
            _ = self.hup.recv() => Ok(ScreenSignal::Quit),
            _ = self.int.recv() => Ok(ScreenSignal::Quit),
            _ = self.quit.recv() => Ok(ScreenSignal::Quit),
            _ = self.tstp.recv() => {
                restore();
                // SIGSTOP, as a shell's default SIGTSTP would stop us (the handler can't be
                // taken back); this returns once something sends SIGCONT (`fg`, `bg`).
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::STOP,
                );
                reenter()?;
                Ok(ScreenSignal::Resumed)
            }
            _ = self.cont.recv() => {
                reenter()?;
                Ok(ScreenSignal::Resumed)
            }
        }
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
