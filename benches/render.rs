//! Render time of one dashboard frame: 8 GPUs × 200 processes in a 200×60 buffer, with a
//! minute of history behind it (sparklines, growth, peaks). Target (issue 3): ≤ 1 ms.
//! Run: `cargo bench --bench render`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use gpuwatch::model::Frame;
use gpuwatch::source::GpuSource;
use gpuwatch::source::scripted::ScriptedSource;
use gpuwatch::tui::state::{Command, UiState};
use gpuwatch::tui::theme::Theme;
use gpuwatch::tui::view::{Context, render};
use gpuwatch::watch::WatchSet;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use scenario::Scenario;

fn scenario(gpus: usize, procs: usize) -> String {
    let mut s = String::new();
    for g in 0..gpus {
        let _ = writeln!(
            s,
            "[[gpu]]\nmemory_total = \"143771MiB\"\nutil_gpu = {{ linear = [[0, 10], [60, 90]], noise = 5 }}"
        );
        for p in 0..procs {
            let _ = writeln!(
                s,
                "[[gpu.process]]\npid = {}\nused = {{ linear = [[0, \"{}MiB\"], [60, \"{}MiB\"]] }}\nsm = {}\nhost = {{ user = \"user{}\", command = \"python train.py --rank {p} --config configs/model-{g}.yaml\", cpu = 100, rss = \"2GiB\" }}",
                10_000 + g * 1000 + p,
                100 + p * 3,
                100 + p * 5,
                p % 100,
                p % 7
            );
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let src = ScriptedSource::new(Scenario::parse(&scenario(8, 200)).expect("valid"), "bench");
    let info = Arc::new(src.info());
    let mut st = UiState::new(
        gpuwatch::analysis::Analyzer::new(
            gpuwatch::detect::Rules::default(),
            Duration::from_mins(10),
            gpuwatch::analysis::Detail::Full,
            WatchSet::new(Vec::new(), Some("user1".into())),
        ),
        false,
    );
    let now = 1_795_953_600.0;
    let mut last = Instant::now();
    for i in 0..60u32 {
        last = Instant::now();
        st.on_frame(Arc::new(Frame {
            seq: u64::from(i) + 1,
            source: Arc::clone(&info),
            sample: src.sample_at(f64::from(i), now - 59.0 + f64::from(i)),
            published: last,
            interval: Duration::from_secs(1),
            host: None,
        }));
    }
    st.update(Command::Resize(200, 60));
    assert_eq!(st.rows.len(), 1600);
    let ctx = Context {
        now,
        mono: last + Duration::from_millis(300),
        theme: Theme::new(true),
    };
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    c.bench_function("render 8 GPUs x 200 processes, 200x60", |b| {
        b.iter(|| {
            term.draw(|f| render(f, &st, &ctx)).expect("draw");
        });
    });
}

criterion_group!(render_bench, bench);
criterion_main!(render_bench);
