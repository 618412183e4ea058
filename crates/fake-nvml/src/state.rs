//! Process-global state of the double: the init refcount, the loaded scenario (reloaded when
//! its file changes) and the clock.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scenario::Scenario;

/// Environment variable naming the scenario file.
pub const ENV_SCENARIO: &str = "FAKE_NVML_SCENARIO";
/// Environment variable: unix time (seconds, float) of scenario t = 0.
pub const ENV_EPOCH: &str = "FAKE_NVML_EPOCH";
/// Environment variable: pin scenario time at this many seconds.
pub const ENV_FREEZE: &str = "FAKE_NVML_FREEZE";

/// How often (at most) calls look at the scenario file's metadata.
const RELOAD_CHECK: Duration = Duration::from_millis(50);

/// The scenario file as last seen.
struct Loaded {
    path: PathBuf,
    /// Modification time and size at the last (successful or not) parse.
    stamp: Option<(SystemTime, u64)>,
    /// The last scenario that parsed; `None` when the file never parsed.
    scenario: Option<Arc<Scenario>>,
    last_check: Instant,
}

#[derive(Default)]
pub struct State {
    /// `nvmlInit*` minus `nvmlShutdown` calls.
    pub init_count: u32,
    loaded: Option<Loaded>,
    /// Unix seconds of the first `nvmlInit` with the current scenario path (the default epoch).
    start_wall: Option<f64>,
    /// `FAKE_NVML_EPOCH`, read at `nvmlInit`.
    env_epoch: Option<f64>,
    /// `FAKE_NVML_FREEZE`, read at `nvmlInit`.
    env_freeze: Option<f64>,
    /// The last error printed, so that the same error is printed once.
    last_error: Option<String>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

/// Locks the state; a panic while it was held does not make it unusable.
pub fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wall-clock time as unix seconds.
pub fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn file_stamp(path: &PathBuf) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn env_f64(name: &str) -> Option<f64> {
    let raw = std::env::var(name).ok()?;
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Some(v),
        _ => {
            eprintln!("fake-nvml: ignoring {name}={raw:?}: not a number");
            None
        }
    }
}

/// Why `nvmlInit` cannot load a scenario.
pub enum LoadFailure {
    /// `FAKE_NVML_SCENARIO` is not set.
    NoScenario,
    /// The file does not read or parse (already reported on stderr).
    Invalid,
}

impl State {
    fn report(&mut self, message: String) {
        if self.last_error.as_deref() != Some(message.as_str()) {
            eprintln!("fake-nvml: {message}");
            self.last_error = Some(message);
        }
    }

    /// Called by `nvmlInit*`: reads the environment, loads the scenario named there (afresh
    /// when the path changed since the last init) and returns it.
    pub fn init_load(&mut self) -> Result<Arc<Scenario>, LoadFailure> {
        let Some(path) = std::env::var_os(ENV_SCENARIO).filter(|p| !p.is_empty()) else {
            return Err(LoadFailure::NoScenario);
        };
        let path = PathBuf::from(path);
        self.env_epoch = env_f64(ENV_EPOCH);
        self.env_freeze = env_f64(ENV_FREEZE);
        let same_path = self.loaded.as_ref().is_some_and(|l| l.path == path);
        if same_path {
            self.reload(false);
        } else {
            // A new scenario file: start from scratch (new default epoch, errors reported anew).
            self.loaded = Some(Loaded {
                path,
                stamp: None,
                scenario: None,
                last_check: Instant::now(),
            });
            self.start_wall = None;
            self.last_error = None;
            self.reload(true);
        }
        if self.start_wall.is_none() {
            self.start_wall = Some(wall_now());
        }
        self.current().ok_or(LoadFailure::Invalid)
    }

    /// The scenario in force, after the throttled check for a changed file.
    pub fn refresh(&mut self) -> Option<Arc<Scenario>> {
        let due = self
            .loaded
            .as_ref()
            .is_some_and(|l| l.last_check.elapsed() >= RELOAD_CHECK);
        if due {
            self.reload(false);
        }
        self.current()
    }

    fn current(&self) -> Option<Arc<Scenario>> {
        self.loaded.as_ref().and_then(|l| l.scenario.clone())
    }

    /// Re-parses the file when its mtime or size changed (or when `force`).
    fn reload(&mut self, force: bool) {
        let Some(loaded) = self.loaded.as_mut() else {
            return;
        };
        loaded.last_check = Instant::now();
        let stamp = file_stamp(&loaded.path);
        if !force && stamp == loaded.stamp {
            // Unchanged (and already reported if broken).
            return;
        }
        loaded.stamp = stamp;
        match Scenario::load(&loaded.path) {
            Ok(s) => {
                loaded.scenario = Some(Arc::new(s));
                self.last_error = None;
            }
            Err(e) => {
                let kept = if loaded.scenario.is_some() {
                    " (keeping the previous scenario)"
                } else {
                    ""
                };
                self.report(format!("{e}{kept}"));
            }
        }
    }

    /// Scenario time (seconds) now.
    pub fn time(&self, scenario: &Scenario) -> f64 {
        if let Some(f) = self.env_freeze.or(scenario.clock.freeze) {
            return f;
        }
        let speed = scenario.clock.speed.unwrap_or(1.0);
        (wall_now() - self.epoch(scenario)) * speed
    }

    /// Unix seconds of t = 0.
    pub fn epoch(&self, scenario: &Scenario) -> f64 {
        self.env_epoch
            .or(scenario.clock.epoch)
            .or(self.start_wall)
            .unwrap_or(0.0)
    }
}
