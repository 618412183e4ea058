//! `gpuwatch man [--dir DIR]`: the man pages, from the command-line definition (`clap_mangen`)
//! plus the sections clap knows nothing of, each generated from where the program keeps it:
//! KEYS from the dashboard's key table, FINDINGS from the detector's rules.

use std::path::Path;

use clap::CommandFactory;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, italic, roman};

use crate::app::{Failure, Result, write_stdout};
use crate::cli::{Cli, ManArgs};

pub(crate) fn man(args: &ManArgs) -> Result<u8> {
    let pages =
        pages().map_err(|e| Failure::runtime(format!("cannot render the man pages: {e}")))?;
    let Some(dir) = &args.dir else {
        // The first page is gpuwatch(1).
        let (_, text) = pages
            .first()
            .ok_or_else(|| Failure::runtime("no man page"))?;
        write_stdout(text)?;
        return Ok(0);
    };
    write_pages(dir, &pages)?;
    crate::eprintln_safe!(
        "gpuwatch: wrote {} man pages to {}",
        pages.len(),
        crate::text::clean(&dir.display().to_string())
    );
    Ok(0)
}

fn write_pages(dir: &Path, pages: &[(String, String)]) -> Result<()> {
    let named = |e: std::io::Error, what: &Path| {
        Failure::setup(format!("cannot write '{}': {e}", what.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| named(e, dir))?;
    for (name, text) in pages {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| named(e, &path))?;
    }
    Ok(())
}

/// Which of our own sections a page has.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Keys,
    Findings,
    /// FILES: the configuration, the history, or both.
    Files {
        config: bool,
        history: bool,
    },
    Environment,
}

/// The sections of the page of `gpuwatch PATH…` (`[]`: gpuwatch(1), which has them all).
fn sections(path: &[&str]) -> &'static [Section] {
    use Section::{Environment, Files, Findings, Keys};
    const BOTH: Section = Files {
        config: true,
        history: true,
    };
    match path {
        [] => &[Keys, Findings, BOTH, Environment],
        ["tui"] => &[Keys, Findings, Environment],
        ["daemon"] => &[Findings, BOTH, Environment],
        ["history", ..] => &[Files {
            config: false,
            history: true,
        }],
        ["print-config"] => &[Files {
            config: true,
            history: false,
        }],
        ["run"] => &[Environment],
        _ => &[],
    }
}

/// Every page, gpuwatch.1 first, then gpuwatch-COMMAND.1 for each command (and
/// gpuwatch-history-who.1 for nested ones): file name and roff text.
fn pages() -> std::io::Result<Vec<(String, String)>> {
    // No `help` subcommand: it has no page, so no page may name one.
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut all = Vec::new();
    collect(&root, &mut Vec::new(), &mut all);
    let names: Vec<String> = all
        .iter()
        .map(|(_, c)| Man::new(c.clone()).get_filename())
        .collect();
    all.iter()
        .zip(&names)
        .map(|((path, cmd), name)| {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            render(cmd, &path, &names).map(|text| (name.clone(), text))
        })
        .collect()
}

fn collect(
    cmd: &clap::Command,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, clap::Command)>,
) {
    out.push((path.clone(), cmd.clone()));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name().to_owned());
        collect(sub, path, out);
        path.pop();
    }
}

fn render(cmd: &clap::Command, path: &[&str], names: &[String]) -> std::io::Result<String> {
    let man = Man::new(cmd.clone()).source(concat!("gpuwatch ", env!("CARGO_PKG_VERSION")));
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut chunk = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut out = Vec::new();
        render(&mut out).map(|()| chunks.push(out))
    };
    chunk(&|w| man.render_title(w))?;
    chunk(&|w| man.render_name_section(w))?;
    chunk(&|w| man.render_synopsis_section(w))?;
    chunk(&|w| man.render_description_section(w))?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        chunk(&|w| man.render_options_section(w))?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        chunk(&|w| man.render_subcommands_section(w))?;
    }
    let mut roff = Roff::default();
    for section in sections(path) {
        match section {
            Section::Keys => keys(&mut roff),
            Section::Findings => findings(&mut roff),
            Section::Files { config, history } => files(&mut roff, *config, *history),
            Section::Environment => environment(&mut roff),
        }
    }
    exit_status(&mut roff, path);
    see_also(&mut roff, &man.get_filename(), names);
    chunk(&|w| roff.to_writer(w))?;
    if cmd.get_version().is_some() {
        chunk(&|w| man.render_version_section(w))?;
    }
    // Each chunk starts with roff's preamble (the apostrophe string): once is enough.
    let mut page = String::new();
    for c in &chunks {
        let text = String::from_utf8_lossy(c);
        page.push_str(if page.is_empty() {
            &text
        } else {
            text.strip_prefix(PREAMBLE).unwrap_or(&text)
        });
    }
    Ok(page)
}

/// What `roff` writes before every document it renders.
const PREAMBLE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// `.TP` TERM, then TEXT.
fn entry(roff: &mut Roff, term: clap_mangen::roff::Inline, text: &str) {
    roff.control("TP", []);
    roff.text([term]);
    roff.text([roman(text)]);
}

/// The dashboard's keys: the key table itself, by where the keys work.
fn keys(roff: &mut Roff) {
    use crate::tui::keymap::{BINDINGS, FILTER_KEYS};
    roff.control("SH", ["KEYS"]);
    roff.text([roman(
        "The dashboard (gpuwatch, gpuwatch tui) answers these keys; ? shows them on screen.",
    )]);
    let mut scopes = Vec::new();
    for b in BINDINGS {
        if !scopes.contains(&b.scope) {
            scopes.push(b.scope);
        }
    }
    for scope in scopes {
        roff.control("SS", [scope.title()]);
        for b in BINDINGS.iter().filter(|b| b.scope == scope) {
            entry(roff, bold(b.label), b.help);
        }
    }
    roff.control("SS", ["while typing a filter (/)"]);
    for (label, help) in FILTER_KEYS {
        entry(roff, bold(*label), help);
    }
    roff.control("SS", ["mouse"]);
    roff.text([roman("A click selects a process; the wheel scrolls.")]);
}

/// The detector's rules.
fn findings(roff: &mut Roff) {
    roff.control("SH", ["FINDINGS"]);
    roff.text([roman(
        "The detector judges every sample with these rules; the dashboard lists their \
         findings, the daemon logs them, exports them and sends them to the alert sinks \
         ([alerts]). Their thresholds are [detect] keys of the configuration (gpuwatch \
         print-config --defaults documents each one).",
    )]);
    for rule in crate::detect::RuleKind::ALL {
        entry(roff, bold(rule.name()), rule.summary());
    }
}

fn files(roff: &mut Roff, config: bool, history: bool) {
    roff.control("SH", ["FILES"]);
    if config {
        entry(
            roff,
            italic("$XDG_CONFIG_HOME/gpuwatch/config.toml"),
            "The configuration, unless --config PATH names another. Without XDG_CONFIG_HOME (or \
         when it is not an absolute path): ~/.config/gpuwatch/config.toml. A missing file \
         means every default; gpuwatch print-config --defaults prints the documented defaults, \
         gpuwatch print-config the configuration in effect.",
        );
    }
    if history {
        entry(
            roff,
            italic("$XDG_STATE_HOME/gpuwatch/history.sqlite"),
            "The local history the daemon records (daemon --history PATH, --no-history) and \
         gpuwatch history reads (--history PATH). Without XDG_STATE_HOME: \
         ~/.local/state/gpuwatch/history.sqlite. Next to it: PATH.lock, which the one daemon \
         writing the file holds (with its PID in it), and SQLite's PATH-wal and PATH-shm.",
        );
    }
}

fn environment(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, text) in [
        (
            "GPUWATCH_NVML_LIB",
            "The NVML library to load, as --nvml-library (which wins).",
        ),
        (
            "GPUWATCH_LOG",
            "What --log-file records: a level (error, warn, info, debug, trace) or \
             tracing's per-module filter syntax. Default: info.",
        ),
        (
            "NO_COLOR",
            "Set and not empty: no colours, as --no-color, unless --color says otherwise.",
        ),
        (
            "XDG_CONFIG_HOME, HOME",
            "Where the configuration is looked for (FILES).",
        ),
        (
            "XDG_STATE_HOME, HOME",
            "Where the local history is (FILES).",
        ),
        (
            "USER, LOGNAME",
            "The invoking user's name when /etc/passwd has no entry for the user ID (the \
             processes that are \"mine\" by default).",
        ),
        (
            "CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER",
            "run passes them to the job as they are unless --gpu sets them, and reads them to \
             tell which GPUs the job sees when it explains a failure; tui --only-visible \
             shows only the GPUs they name (CUDA_DEVICE_ORDER=PCI_BUS_ID numbers GPUs by bus \
             id).",
        ),
    ] {
        entry(roff, bold(name), text);
    }
    roff.control("PP", []);
    roff.text([roman(
        "A command the [alerts] configuration runs gets the finding in GPUWATCH_EVENT, \
         GPUWATCH_RULE, GPUWATCH_SEVERITY, GPUWATCH_GPU, GPUWATCH_GPU_INDEX, GPUWATCH_PID, \
         GPUWATCH_SUMMARY, GPUWATCH_TIME_TO_FULL_S and GPUWATCH_JSON.",
    )]);
}

fn exit_status(roff: &mut Roff, path: &[&str]) {
    roff.control("SH", ["EXIT STATUS"]);
    if path == ["run"] {
        roff.text([roman(
            "The job's exit status: its exit code, or 128 + N when signal N killed it (137 \
             for SIGKILL); 127 when CMD is not found, 126 when it cannot be executed. When \
             gpuwatch does not start the job (a --gpu it cannot use, no GPU with --min-free \
             free), it exits 1 or 2 as below, without running CMD.",
        )]);
    }
    for (code, text) in [
        (
            "0",
            "Success (also for --help and --version, and when the reader of the output goes \
             away, as with | head).",
        ),
        (
            "1",
            "The command ran but could not do what was asked: no GPU fits (pick, run --gpu \
             auto), no first sample within --hang-timeout, the output cannot be written, the \
             dashboard failed.",
        ),
        (
            "2",
            "Bad usage or a setup that cannot work: an unknown or misplaced option, a bad \
             value, a bad configuration file, NVML that cannot be loaded, a file that cannot \
             be read, an address the daemon cannot listen on.",
        ),
    ] {
        entry(roff, bold(code), text);
    }
}

/// The other pages this one refers to: gpuwatch(1) names every command's page, a command's
/// page names gpuwatch(1), its parent's and its own commands' pages. Only emitted pages.
fn see_also(roff: &mut Roff, this: &str, names: &[String]) {
    let stem = this.strip_suffix(".1").unwrap_or(this);
    let related: Vec<&String> = names
        .iter()
        .filter(|n| n.as_str() != this)
        .filter(|n| {
            let other = n.strip_suffix(".1").unwrap_or(n);
            other == "gpuwatch"
                || stem == "gpuwatch"
                || other.starts_with(&format!("{stem}-"))
                || stem
                    .strip_prefix(other)
                    .is_some_and(|rest| rest.starts_with('-') && !rest[1..].contains('-'))
        })
        .collect();
    if related.is_empty() {
        return;
    }
    roff.control("SH", ["SEE ALSO"]);
    let refs: Vec<String> = related
        .iter()
        .map(|n| {
            let (page, section) = n.rsplit_once('.').unwrap_or((n, "1"));
            format!("{page}({section})")
        })
        .collect();
    roff.text([roman(refs.join(", "))]);
}
