//! Renders the dashboard on the built-in demo (a minute of history, then the first process
//! selected) into an SVG, for the README: `cargo run --example screenshot > assets/screenshots/demo.svg`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::model::Frame;
use gpuwatch::source::GpuSource;
use gpuwatch::source::scripted::{DEMO_START, ScriptedSource};
use gpuwatch::tui::state::{Command, UiState};
use gpuwatch::tui::theme::Theme;
use gpuwatch::tui::view::{Context, render};
use gpuwatch::watch::WatchSet;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};

const W: u16 = 130;
const H: u16 = 36;

fn colour(c: Color, default: &str) -> String {
    match c {
        Color::Black => "#1e1e1e".into(),
        Color::Red => "#e06c75".into(),
        Color::Green => "#98c379".into(),
        Color::Yellow => "#e5c07b".into(),
        Color::Blue => "#61afef".into(),
        Color::Magenta => "#c678dd".into(),
        Color::Cyan => "#56b6c2".into(),
        Color::Gray | Color::White => "#dcdfe4".into(),
        Color::Rgb(r, g, b) => format!("#{r:02x}{g:02x}{b:02x}"),
        _ => default.into(),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn main() {
    let src = ScriptedSource::demo().expect("the demo parses");
    let info = Arc::new(src.info());
    let now = 1_795_953_600.0;
    // As the dashboard shows it 10 s after start: the demo's past (11 minutes before
    // DEMO_START) run through the analysis, then 10 frames (fixed times, so the SVG is the
    // same on every run).
    let shown = 10.0;
    let at = |back: f64| src.sample_at(DEMO_START + shown - back, now - back);
    let mut analyzer = gpuwatch::analysis::Analyzer::new(
        gpuwatch::detect::Rules::default(),
        Duration::from_mins(10),
        gpuwatch::analysis::Detail::Full,
        WatchSet::new(Vec::new(), Some("alice".into())),
    );
    analyzer.prime(
        src.past_at(
            DEMO_START,
            now - shown,
            gpuwatch::source::PREROLL,
            Duration::from_secs(1),
        ),
        &info,
    );
    let mut st = UiState::new(analyzer, false);
    let mut last = Instant::now();
    for i in 0..shown as u32 {
        let back = shown - 1.0 - f64::from(i);
        last = Instant::now();
        st.on_frame(Arc::new(Frame {
            seq: u64::from(i) + 1,
            source: Arc::clone(&info),
            sample: at(back),
            published: last,
            interval: Duration::from_secs(1),
            host: None,
        }));
    }
    st.update(Command::Resize(W, H));
    let ctx = Context {
        now,
        mono: last + Duration::from_millis(400),
        theme: Theme::new(true),
    };
    let mut term = Terminal::new(TestBackend::new(W, H)).expect("terminal");
    term.draw(|f| render(f, &st, &ctx)).expect("draw");
    let buf = term.backend().buffer();
    let (cw, ch) = (8.4_f64, 17.0_f64);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{:.0}" font-family="DejaVu Sans Mono, Menlo, monospace" font-size="14">"#,
        f64::from(W) * cw + 16.0,
        f64::from(H) * ch + 16.0
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#1e1e1e"/>"##
    );
    for y in 0..H {
        for x in 0..W {
            let cell = &buf[(x, y)];
            let sym = cell.symbol();
            let reversed = cell.modifier.contains(Modifier::REVERSED);
            let (px, py) = (8.0 + f64::from(x) * cw, 8.0 + f64::from(y) * ch);
            let fg = colour(cell.fg, "#dcdfe4");
            if reversed {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{px:.1}" y="{py:.1}" width="{cw:.1}" height="{ch:.1}" fill="{fg}"/>"#
                );
            }
            if sym.trim().is_empty() {
                continue;
            }
            let fill = if reversed { "#1e1e1e".to_string() } else { fg };
            let weight = if cell.modifier.contains(Modifier::BOLD) {
                r#" font-weight="bold""#
            } else {
                ""
            };
            let opacity = if cell.modifier.contains(Modifier::DIM) {
                r#" opacity="0.6""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r#"<text x="{px:.1}" y="{:.1}" fill="{fill}"{weight}{opacity}>{}</text>"#,
                py + ch * 0.78,
                escape(sym)
            );
        }
    }
    svg.push_str("</svg>\n");
    print!("{svg}");
}
