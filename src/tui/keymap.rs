//! Every key binding, in one table. Input maps through it to a [`Command`]; the `?` help
//! overlay is generated from the same table, so the two cannot disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::state::{Command, Mode, SortKey};

/// Where a binding applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everywhere except while typing a filter or answering a dialog.
    Global,
    /// The process table (main and tree views).
    Table,
    /// The tree view only.
    Tree,
    /// The process detail view.
    Detail,
    /// The memory chart view.
    Chart,
    /// The kill confirmation.
    Dialog,
    /// The findings panel (`f`) and the findings view (`F`).
    Findings,
    /// The help overlay, while it is open.
    Help,
}

impl Scope {
    /// Where the keys of this scope work, as help texts title them.
    pub fn title(self) -> &'static str {
        match self {
            Scope::Global => "everywhere",
            Scope::Table => "process table",
            Scope::Tree => "tree view",
            Scope::Findings => "findings panel and view",
            Scope::Detail => "process detail",
            Scope::Chart => "memory chart",
            Scope::Dialog => "kill confirmation",
            Scope::Help => "this help",
        }
    }

    /// Every scope, in the order the help lists them.
    pub const ALL: [Scope; 8] = [
        Scope::Global,
        Scope::Table,
        Scope::Tree,
        Scope::Findings,
        Scope::Detail,
        Scope::Chart,
        Scope::Dialog,
        Scope::Help,
    ];
}

/// The keys that edit the process filter while it is typed (`/`), as help texts show them;
/// [`lookup`] maps them.
pub const FILTER_KEYS: &[(&str, &str)] = &[
    ("Enter", "keep the filter"),
    ("Esc", "drop the filter"),
    ("Backspace", "delete the last character"),
    ("Ctrl-U", "clear the text"),
];

/// One binding: the keys, what they do, and the help text.
pub struct Binding {
    pub keys: &'static [KeyCode],
    /// Ctrl must be held.
    pub ctrl: bool,
    pub scope: Scope,
    pub command: Command,
    /// The keys as the help shows them.
    pub label: &'static str,
    pub help: &'static str,
}

const fn b(
    keys: &'static [KeyCode],
    scope: Scope,
    command: Command,
    label: &'static str,
    help: &'static str,
) -> Binding {
    Binding {
        keys,
        ctrl: false,
        scope,
        command,
        label,
        help,
    }
}

/// The key table. Order is the order of the help overlay.
pub const BINDINGS: &[Binding] = &[
    b(
        &[KeyCode::Char('q')],
        Scope::Global,
        Command::Quit,
        "q",
        "quit",
    ),
    Binding {
        keys: &[KeyCode::Char('c')],
        ctrl: true,
        scope: Scope::Global,
        command: Command::Quit,
        label: "Ctrl-C",
        help: "quit",
    },
    b(
        &[KeyCode::Char('?')],
        Scope::Global,
        Command::ToggleHelp,
        "?",
        "this help",
    ),
    b(
        &[KeyCode::Esc],
        Scope::Global,
        Command::Back,
        "Esc",
        "back / close",
    ),
    b(
        &[KeyCode::Up, KeyCode::Char('k')],
        Scope::Table,
        Command::Up,
        "↑ k",
        "previous process",
    ),
    b(
        &[KeyCode::Down, KeyCode::Char('j')],
        Scope::Table,
        Command::Down,
        "↓ j",
        "next process",
    ),
    b(
        &[KeyCode::PageUp],
        Scope::Table,
        Command::PageUp,
        "PgUp",
        "page up",
    ),
    b(
        &[KeyCode::PageDown],
        Scope::Table,
        Command::PageDown,
        "PgDn",
        "page down",
    ),
    b(
        &[KeyCode::Home],
        Scope::Table,
        Command::Home,
        "Home",
        "first process",
    ),
    b(
        &[KeyCode::End],
        Scope::Table,
        Command::End,
        "End",
        "last process",
    ),
    b(
        &[KeyCode::Right],
        Scope::Table,
        Command::ScrollRight,
        "→",
        "scroll right: command lines, columns",
    ),
    b(
        &[KeyCode::Left],
        Scope::Table,
        Command::ScrollLeft,
        "←",
        "scroll back left",
    ),
    b(
        &[KeyCode::Char('s')],
        Scope::Table,
        Command::SortNext,
        "s",
        "sort by the next column",
    ),
    b(
        &[KeyCode::Char('S')],
        Scope::Table,
        Command::SortReverse,
        "S",
        "reverse the sort",
    ),
    b(
        &[KeyCode::Char('M')],
        Scope::Table,
        Command::SortBy(SortKey::Memory),
        "M",
        "sort by GPU memory",
    ),
    b(
        &[KeyCode::Char('G')],
        Scope::Table,
        Command::SortBy(SortKey::Growth),
        "G",
        "sort by growth",
    ),
    b(
        &[KeyCode::Char('U')],
        Scope::Table,
        Command::SortBy(SortKey::Sm),
        "U",
        "sort by SM %",
    ),
    b(
        &[KeyCode::Char('C')],
        Scope::Table,
        Command::SortBy(SortKey::Cpu),
        "C",
        "sort by CPU %",
    ),
    b(
        &[KeyCode::Char('P')],
        Scope::Table,
        Command::SortBy(SortKey::Pid),
        "P",
        "sort by PID",
    ),
    b(
        &[KeyCode::Char('/')],
        Scope::Table,
        Command::FilterStart,
        "/",
        "filter (user, command, container, pid)",
    ),
    b(
        &[KeyCode::Char('g')],
        Scope::Global,
        Command::CycleGpu,
        "g",
        "show one GPU / all",
    ),
    b(
        &[KeyCode::Enter],
        Scope::Table,
        Command::OpenDetail,
        "Enter",
        "process detail",
    ),
    b(
        &[KeyCode::Char('t')],
        Scope::Table,
        Command::ToggleTree,
        "t",
        "tree view (parents, workers, ranks)",
    ),
    b(
        &[KeyCode::Char('-')],
        Scope::Tree,
        Command::TreeCollapse,
        "-",
        "collapse the subtree (on a leaf: its parent's)",
    ),
    b(
        &[KeyCode::Char('+'), KeyCode::Char('=')],
        Scope::Tree,
        Command::TreeExpand,
        "+",
        "expand the subtree",
    ),
    b(
        &[KeyCode::Char('c')],
        Scope::Global,
        Command::OpenChart,
        "c",
        "memory chart of the GPU",
    ),
    b(
        &[KeyCode::Char('f')],
        Scope::Table,
        Command::FocusFindings,
        "f",
        "keys to the findings panel",
    ),
    b(
        &[KeyCode::Char('F')],
        Scope::Global,
        Command::OpenFindings,
        "F",
        "all findings, with their history",
    ),
    b(
        &[KeyCode::Up, KeyCode::Char('k')],
        Scope::Findings,
        Command::Up,
        "↑ k",
        "previous finding",
    ),
    b(
        &[KeyCode::Down, KeyCode::Char('j')],
        Scope::Findings,
        Command::Down,
        "↓ j",
        "next finding",
    ),
    b(
        &[KeyCode::PageUp],
        Scope::Findings,
        Command::PageUp,
        "PgUp",
        "findings page up",
    ),
    b(
        &[KeyCode::PageDown],
        Scope::Findings,
        Command::PageDown,
        "PgDn",
        "findings page down",
    ),
    b(
        &[KeyCode::Home],
        Scope::Findings,
        Command::Home,
        "Home",
        "first finding",
    ),
    b(
        &[KeyCode::End],
        Scope::Findings,
        Command::End,
        "End",
        "last finding",
    ),
    b(
        &[KeyCode::Enter],
        Scope::Findings,
        Command::GoToFinding,
        "Enter",
        "its process, or its GPU alone",
    ),
    b(
        &[KeyCode::Char('f')],
        Scope::Findings,
        Command::FocusFindings,
        "f",
        "keys back to the table",
    ),
    b(
        &[KeyCode::Char('w')],
        Scope::Table,
        Command::ToggleWatchPid,
        "w",
        "watch / unwatch the process",
    ),
    b(
        &[KeyCode::Char('W')],
        Scope::Table,
        Command::ToggleWatchUser,
        "W",
        "watch / unwatch its user",
    ),
    b(
        &[KeyCode::Char('K'), KeyCode::F(9)],
        Scope::Table,
        Command::Kill,
        "K F9",
        "signal the process (asks first)",
    ),
    b(
        &[KeyCode::Char('p')],
        Scope::Global,
        Command::TogglePause,
        "p",
        "pause / resume the screen",
    ),
    b(
        &[KeyCode::Char('+'), KeyCode::Char('=')],
        Scope::Chart,
        Command::ZoomIn,
        "+",
        "zoom in (shorter span)",
    ),
    b(
        &[KeyCode::Char('-')],
        Scope::Chart,
        Command::ZoomOut,
        "-",
        "zoom out (longer span)",
    ),
    b(
        &[KeyCode::Up, KeyCode::Char('k')],
        Scope::Help,
        Command::Up,
        "↑ k",
        "scroll up",
    ),
    b(
        &[KeyCode::Down, KeyCode::Char('j')],
        Scope::Help,
        Command::Down,
        "↓ j",
        "scroll down",
    ),
    b(
        &[KeyCode::PageUp],
        Scope::Help,
        Command::PageUp,
        "PgUp",
        "page up",
    ),
    b(
        &[KeyCode::PageDown],
        Scope::Help,
        Command::PageDown,
        "PgDn",
        "page down",
    ),
    b(
        &[KeyCode::Home],
        Scope::Help,
        Command::Home,
        "Home",
        "first line",
    ),
    b(
        &[KeyCode::End],
        Scope::Help,
        Command::End,
        "End",
        "last line",
    ),
    b(
        &[KeyCode::Char('y')],
        Scope::Dialog,
        Command::Confirm,
        "y",
        "send the signal",
    ),
    b(
        &[KeyCode::Char('9')],
        Scope::Dialog,
        Command::ConfirmKill,
        "9",
        "send SIGKILL after SIGTERM",
    ),
    b(
        &[KeyCode::Char('n')],
        Scope::Dialog,
        Command::Back,
        "n",
        "cancel",
    ),
];

/// The command a key means in this mode, if any.
pub fn lookup(key: KeyEvent, mode: Mode) -> Option<Command> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if mode == Mode::Filter {
        // Typing: every printable key is text.
        return match key.code {
            KeyCode::Char('c') if ctrl => Some(Command::Quit),
            // As in a shell's line editor: the whole text goes, editing goes on.
            KeyCode::Char('u') if ctrl => Some(Command::FilterErase),
            KeyCode::Char(c) if !ctrl => Some(Command::FilterInput(c)),
            KeyCode::Backspace => Some(Command::FilterBackspace),
            KeyCode::Enter => Some(Command::FilterAccept),
            KeyCode::Esc => Some(Command::FilterCancel),
            _ => None,
        };
    }
    BINDINGS
        .iter()
        .filter(|b| b.ctrl == ctrl && applies(b.scope, mode))
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.command)
}

/// Whether bindings of `scope` are live in `mode`.
pub fn applies(scope: Scope, mode: Mode) -> bool {
    match mode {
        Mode::Dialog => matches!(scope, Scope::Dialog) || matches!(scope, Scope::Global),
        Mode::Table => matches!(scope, Scope::Global | Scope::Table),
        Mode::Tree => matches!(scope, Scope::Global | Scope::Table | Scope::Tree),
        Mode::Detail => matches!(scope, Scope::Global | Scope::Detail),
        Mode::Chart => matches!(scope, Scope::Global | Scope::Chart),
        Mode::Findings => matches!(scope, Scope::Global | Scope::Findings),
        Mode::Help => matches!(scope, Scope::Global | Scope::Help),
        Mode::Filter => false,
    }
}

/// One line of the help overlay.
#[derive(Clone, Copy)]
pub enum HelpLine {
    /// A section: where the keys below it apply.
    Title(&'static str),
    Key(&'static Binding),
    Note(&'static str),
}

/// The help overlay's lines, from the key table: each scope's title, then its bindings.
pub fn help_lines() -> Vec<HelpLine> {
    let mut out = Vec::with_capacity(BINDINGS.len() + 8);
    for scope in Scope::ALL {
        if !BINDINGS.iter().any(|b| b.scope == scope) {
            continue;
        }
        let title = scope.title();
        out.push(HelpLine::Title(title));
        out.extend(
            BINDINGS
                .iter()
                .filter(|b| b.scope == scope)
                .map(HelpLine::Key),
        );
    }
    out.push(HelpLine::Note(
        "mouse: click selects a process, the wheel scrolls",
    ));
    out
}

/// How many help lines a screen `height` rows high shows at once (inside the overlay's
/// border), and the most the help can scroll.
pub fn help_page(height: u16) -> (usize, usize) {
    let n = help_lines().len();
    let page = usize::from(height).min(n + 2).saturating_sub(2).max(1);
    (page, n.saturating_sub(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn no_key_is_bound_twice_in_one_mode() {
        for mode in [
            Mode::Table,
            Mode::Detail,
            Mode::Chart,
            Mode::Dialog,
            Mode::Findings,
            Mode::Tree,
            Mode::Help,
        ] {
            let mut seen = std::collections::HashSet::new();
            for b in BINDINGS.iter().filter(|b| applies(b.scope, mode)) {
                for k in b.keys {
                    assert!(seen.insert((*k, b.ctrl)), "{k:?} bound twice in {mode:?}");
                }
            }
        }
    }

    #[test]
    fn the_filter_keys_help_shows_are_the_ones_lookup_maps() {
        for (label, _) in FILTER_KEYS {
            let event = match *label {
                "Enter" => key(KeyCode::Enter),
                "Esc" => key(KeyCode::Esc),
                "Backspace" => key(KeyCode::Backspace),
                "Ctrl-U" => KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL),
                other => panic!("unknown label {other}"),
            };
            assert!(
                matches!(
                    lookup(event, Mode::Filter),
                    Some(
                        Command::FilterAccept
                            | Command::FilterCancel
                            | Command::FilterBackspace
                            | Command::FilterErase
                    )
                ),
                "{label}"
            );
        }
    }

    #[test]
    fn keys_map_to_commands_by_mode() {
        assert_eq!(
            lookup(key(KeyCode::Char('j')), Mode::Table),
            Some(Command::Down)
        );
        assert_eq!(lookup(key(KeyCode::F(9)), Mode::Table), Some(Command::Kill));
        assert_eq!(lookup(key(KeyCode::Char('y')), Mode::Table), None);
        assert_eq!(lookup(key(KeyCode::Char('-')), Mode::Table), None);
        assert_eq!(
            lookup(key(KeyCode::Char('-')), Mode::Tree),
            Some(Command::TreeCollapse)
        );
        assert_eq!(
            lookup(key(KeyCode::Char('+')), Mode::Tree),
            Some(Command::TreeExpand)
        );
        assert_eq!(
            lookup(key(KeyCode::Char('j')), Mode::Tree),
            Some(Command::Down)
        );
        assert_eq!(
            lookup(key(KeyCode::Char('y')), Mode::Dialog),
            Some(Command::Confirm)
        );
        assert_eq!(
            lookup(key(KeyCode::Char('q')), Mode::Filter),
            Some(Command::FilterInput('q'))
        );
        assert_eq!(
            lookup(
                KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
                Mode::Filter
            ),
            Some(Command::Quit)
        );
        assert_eq!(
            lookup(key(KeyCode::Char('+')), Mode::Chart),
            Some(Command::ZoomIn)
        );
        assert_eq!(
            lookup(
                KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL),
                Mode::Filter
            ),
            Some(Command::FilterErase)
        );
    }
}

#[cfg(test)]
mod readme {
    use super::BINDINGS;

    /// The README's key table lists every binding, so the two cannot drift apart.
    #[test]
    fn readme_lists_every_binding() {
        let readme = include_str!("../../README.md");
        for b in BINDINGS {
            let row = format!("| `{}` | {} |", b.label, b.help);
            assert!(readme.contains(&row), "README.md lacks the key row {row}");
        }
    }
}
