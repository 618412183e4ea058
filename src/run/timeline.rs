//! `run --timeline FILE.svg`: the job's memory, everyone else's memory and the capacity of
//! each GPU the job used, over the run, with the end (the failure) marked. A standalone SVG
//! (no scripts, no external fonts) that any browser opens.

use std::fmt::Write as _;

use super::monitor::GpuRun;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 230.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 82.0;
/// Characters of the verdict per line (two lines at most).
const VERDICT_LINE: usize = 120;
const PLOT_H: f64 = 160.0;
const JOB: &str = "#2f6fdf";
const EXTERNAL: &str = "#f28e2b";
const CAPACITY: &str = "#c0392b";

/// How the run ended, for the title and the marker.
#[derive(Debug, Clone)]
pub struct Ending {
    /// Unix seconds.
    pub at: f64,
    /// "exit code 1", "killed by SIGKILL (signal 9)".
    pub status: String,
    /// The diagnosis headline, when the job failed.
    pub cause: Option<String>,
    pub failed: bool,
}

/// Text for an SVG text node or attribute: markup escaped, and control characters (which
/// XML does not allow, and a job's command line may hold) shown escaped.
fn esc(s: &str) -> String {
    crate::text::for_markup(s).replace('"', "&quot;")
}

fn gib(b: f64) -> String {
    let g = b / f64::from(1u32 << 30);
    if g >= 10.0 {
        format!("{g:.0} GiB")
    } else {
        format!("{g:.1} GiB")
    }
}

fn clock(secs: f64) -> String {
    if secs < 10.0 {
        return format!("{:.1}s", secs.max(0.0));
    }
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Words of `text` in lines of at most `width` characters (a longer word is cut); the second
/// line ends in `…` when text is left over.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(String::new());
        }
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() {
            last.push(' ');
        }
        last.extend(word.chars().take(width));
    }
    if lines.len() > 2 {
        lines.truncate(2);
        lines[1].push('…');
    }
    lines
}

/// The picture: one panel per GPU in `gpus` (in order), time from `started` to the ending.
pub fn svg(command: &str, started: f64, gpus: &[&GpuRun], ending: &Ending) -> String {
    let height = TOP + PANEL * gpus.len().max(1) as f64 + 10.0;
    let end = ending
        .at
        .max(
            gpus.iter()
                .filter_map(|g| g.timeline.last())
                .map(|p| p.t)
                .fold(started, f64::max),
        )
        .max(started + 1.0);
    let span = end - started;
    let plot_w = WIDTH - LEFT - RIGHT;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = write!(
        out,
        r##"<rect width="100%" height="100%" fill="#ffffff"/><text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"##,
        esc(&format!("gpuwatch run: {command}"))
    );
    let verdict = match &ending.cause {
        Some(c) => format!("{} after {} — {c}", ending.status, clock(span)),
        None => format!("{} after {}", ending.status, clock(span)),
    };
    for (i, line) in wrap(&verdict, VERDICT_LINE).iter().take(2).enumerate() {
        let _ = write!(
            out,
            r#"<text x="{LEFT}" y="{}" fill="{}">{}</text>"#,
            40.0 + 16.0 * i as f64,
            if ending.failed { CAPACITY } else { "#333333" },
            esc(line)
        );
    }
    // Legend.
    let lx = WIDTH - RIGHT - 330.0;
    for (i, (color, label)) in [
        (JOB, "the job"),
        (EXTERNAL, "everyone else"),
        (CAPACITY, "capacity"),
    ]
    .iter()
    .enumerate()
    {
        let x0 = lx + i as f64 * 110.0;
        let _ = write!(
            out,
            r#"<rect x="{x0}" y="66" width="12" height="10" fill="{color}"/><text x="{}" y="75">{label}</text>"#,
            x0 + 16.0
        );
    }
    if gpus.is_empty() {
        let _ = write!(
            out,
            r#"<text x="{LEFT}" y="{}">The job held no GPU memory that the driver reported.</text>"#,
            TOP + 40.0
        );
    }
    let scale = Scale {
        started,
        span,
        plot_w,
    };
    for (i, g) in gpus.iter().enumerate() {
        panel(&mut out, g, TOP + PANEL * i as f64 + 20.0, &scale, ending);
    }
    out.push_str("</svg>\n");
    out
}

/// The time axis shared by the panels.
struct Scale {
    started: f64,
    span: f64,
    plot_w: f64,
}

impl Scale {
    fn x(&self, t: f64) -> f64 {
        LEFT + (t - self.started).clamp(0.0, self.span) / self.span * self.plot_w
    }
}

/// One GPU's panel, its plot's top edge at `top`.
fn panel(out: &mut String, g: &GpuRun, top: f64, scale: &Scale, ending: &Ending) {
    let (started, span, plot_w) = (scale.started, scale.span, scale.plot_w);
    let x = |t: f64| scale.x(t);
    let bottom = top + PLOT_H;
    let total = g
        .total
        .or_else(|| g.timeline.iter().map(|p| p.total).max())
        .unwrap_or(1)
        .max(1) as f64;
    let y = |b: f64| bottom - (b / total).clamp(0.0, 1.05) * PLOT_H;
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
        top - 6.0,
        esc(&format!(
            "GPU {} · {} · {}",
            g.index,
            g.name.as_deref().unwrap_or("GPU"),
            g.uuid
        ))
    );
    // Grid and axes.
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let yy = y(total * frac);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555555">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            yy + 4.0,
            gib(total * frac)
        );
    }
    for k in 0..=4 {
        let t = started + span * f64::from(k) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555555">+{}</text>"##,
            x(t),
            bottom + 16.0,
            clock(t - started)
        );
    }
    if !g.timeline.is_empty() {
        // Stacked areas: the job from 0, everyone else on top of it.
        let pts = &g.timeline;
        let mut job = String::new();
        let mut ext = String::new();
        for p in pts {
            let _ = write!(job, "{:.1},{:.1} ", x(p.t), y(p.job as f64));
            let _ = write!(ext, "{:.1},{:.1} ", x(p.t), y((p.job + p.external) as f64));
        }
        let first = x(pts[0].t);
        let last = x(pts[pts.len() - 1].t);
        let mut job_back = String::new();
        for p in pts.iter().rev() {
            let _ = write!(job_back, "{:.1},{:.1} ", x(p.t), y(p.job as f64));
        }
        let _ = write!(
            out,
            r#"<polygon points="{ext}{job_back}" fill="{EXTERNAL}" fill-opacity="0.75"/><polygon points="{first:.1},{bottom:.1} {job}{last:.1},{bottom:.1}" fill="{JOB}" fill-opacity="0.85"/>"#
        );
    }
    let _ = write!(
        out,
        r#"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{CAPACITY}" stroke-width="1.5" stroke-dasharray="6 3"/>"#,
        y(total),
        LEFT + plot_w,
        y(total)
    );
    if let Some((b, t)) = g.job_peak {
        let _ = write!(
            out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{JOB}" stroke="white"/><text x="{:.1}" y="{:.1}" fill="{JOB}">job peak {}</text>"#,
            x(t),
            y(b as f64),
            (x(t) + 6.0).min(LEFT + plot_w - 110.0),
            (y(b as f64) - 6.0).max(top + 10.0),
            gib(b as f64)
        );
    }
    // The end: a red line where the job failed, grey where it ended well.
    let ex = x(ending.at);
    let color = if ending.failed { CAPACITY } else { "#888888" };
    let _ = write!(
        out,
        r#"<line x1="{ex:.1}" y1="{top:.1}" x2="{ex:.1}" y2="{bottom:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{color}">{}</text>"#,
        ex - 4.0,
        top + 12.0,
        esc(if ending.failed {
            "failed here"
        } else {
            "ended"
        })
    );
}

#[cfg(test)]
mod tests {
    use super::super::monitor::Point;
    use super::*;

    const GIB: u64 = 1 << 30;

    fn run() -> GpuRun {
        GpuRun {
            index: 2,
            uuid: "GPU-abc".into(),
            name: Some("NVIDIA H200".into()),
            total: Some(80 * GIB),
            job_peak: Some((60 * GIB, 1010.0)),
            external_peak: None,
            timeline: (0..=10u32)
                .map(|k| Point {
                    t: 1000.0 + f64::from(k),
                    job: u64::from(k) * 6 * GIB,
                    external: 15 * GIB,
                    total: 80 * GIB,
                })
                .collect(),
            point_span: 0.0,
        }
    }

    #[test]
    fn texts_are_valid_xml_whatever_the_command_line() {
        assert_eq!(
            esc("a\x1b]0;t\x07\"<b>&"),
            "a\\e]0;t\\x07&quot;&lt;b&gt;&amp;"
        );
    }

    #[test]
    fn the_picture_has_the_areas_the_capacity_and_the_failure() {
        let g = run();
        let text = svg(
            "python train.py --batch-size 64 <&>",
            1000.0,
            &[&g],
            &Ending {
                at: 1010.5,
                status: "exit code 1".into(),
                cause: Some("CUDA out of memory: another process held 15 GiB".into()),
                failed: true,
            },
        );
        assert!(text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(text.trim_end().ends_with("</svg>"));
        assert!(
            text.contains("python train.py --batch-size 64 &lt;&amp;&gt;"),
            "escaped"
        );
        assert!(text.contains("exit code 1 after 11s — CUDA out of memory"));
        assert!(text.contains("GPU 2 · NVIDIA H200 · GPU-abc"));
        assert!(text.contains("job peak 60 GiB"));
        assert!(text.contains("failed here"));
        assert_eq!(text.matches("<polygon").count(), 2);
        assert!(text.contains("80 GiB"), "the capacity on the axis");
    }

    #[test]
    fn no_gpu_memory_is_said_in_words() {
        let text = svg(
            "true",
            1000.0,
            &[],
            &Ending {
                at: 1001.0,
                status: "exit code 0".into(),
                cause: None,
                failed: false,
            },
        );
        assert!(text.contains("held no GPU memory"));
        assert!(!text.contains("failed here"));
    }
}
