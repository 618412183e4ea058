//! The watched set: which processes are "mine". A GPU's memory splits into the watched set's
//! memory and external memory (everything else, unattributed memory included); see DESIGN §3.
//!
//! This module owns the `--watch` / `watch.specs` syntax (`pid:N`, `user:NAME`, `cmd:REGEX`)
//! and the matching rule. It does not look processes up itself: the caller passes the host
//! facts it already has and a parent lookup, so matching is pure and testable.

use std::fmt;
use std::str::FromStr;

use regex::Regex;

use crate::model::HostProc;

/// How far up the process tree a `pid:N` spec looks for `N`. Real trees are a few dozen
/// levels deep at most; the bound keeps a corrupt parent map from looping.
pub const MAX_ANCESTRY_DEPTH: usize = 256;

/// One entry of the watched set.
#[derive(Debug, Clone)]
pub enum WatchSpec {
    /// `pid:N`: process N and all its descendants.
    Pid(u32),
    /// `user:NAME`: processes of host user NAME (a number also matches the uid).
    User(String),
    /// `cmd:REGEX`: processes whose full command line (or name, when the command line is
    /// unknown) contains a match of REGEX.
    Cmd(Regex),
}

impl PartialEq for WatchSpec {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (WatchSpec::Pid(a), WatchSpec::Pid(b)) => a == b,
            (WatchSpec::User(a), WatchSpec::User(b)) => a == b,
            (WatchSpec::Cmd(a), WatchSpec::Cmd(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Eq for WatchSpec {}

/// Why a watch spec was refused: `invalid watch spec 'foo': expected pid:N, user:NAME or
/// cmd:REGEX`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid watch spec '{spec}': {problem}")]
pub struct WatchSpecError {
    /// The spec as given.
    pub spec: String,
    pub problem: WatchSpecProblem,
}

/// What is wrong with a watch spec (the part of the message after the spec).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchSpecProblem {
    #[error("expected pid:N, user:NAME or cmd:REGEX")]
    Form,
    #[error("'{0}' is not a process id (expected pid:N, N > 0)")]
    Pid(String),
    #[error("the {0} is empty")]
    Empty(&'static str),
    #[error("bad regex '{regex}': {error}")]
    Regex { regex: String, error: String },
}

impl FromStr for WatchSpec {
    type Err = WatchSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        parse_spec(spec).map_err(|problem| WatchSpecError {
            spec: spec.to_owned(),
            problem,
        })
    }
}

fn parse_spec(spec: &str) -> Result<WatchSpec, WatchSpecProblem> {
    let (kind, arg) = spec.split_once(':').ok_or(WatchSpecProblem::Form)?;
    match kind.trim() {
        "pid" => {
            let arg = arg.trim();
            match arg.parse::<u32>() {
                Ok(pid) if pid > 0 => Ok(WatchSpec::Pid(pid)),
                _ => Err(WatchSpecProblem::Pid(arg.to_owned())),
            }
        }
        "user" => {
            let name = arg.trim();
            if name.is_empty() {
                Err(WatchSpecProblem::Empty("user name"))
            } else {
                Ok(WatchSpec::User(name.to_owned()))
            }
        }
        "cmd" => {
            if arg.is_empty() {
                return Err(WatchSpecProblem::Empty("regex"));
            }
            Regex::new(arg)
                .map(WatchSpec::Cmd)
                .map_err(|e| WatchSpecProblem::Regex {
                    regex: arg.to_owned(),
                    error: one_line_regex_error(&e),
                })
        }
        _ => Err(WatchSpecProblem::Form),
    }
}

/// The regex crate draws syntax errors over several lines (pattern, caret, message); a config
/// or flag error wants one line, and the pattern is already quoted beside it.
fn one_line_regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(&text);
    last.trim().trim_start_matches("error: ").to_owned()
}

impl fmt::Display for WatchSpec {
    /// The spec as written: parsing the output gives the same spec back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchSpec::Pid(pid) => write!(f, "pid:{pid}"),
            WatchSpec::User(name) => write!(f, "user:{name}"),
            WatchSpec::Cmd(re) => write!(f, "cmd:{}", re.as_str()),
        }
    }
}

impl WatchSpec {
    /// Whether this spec alone matches the process `pid` with host facts `proc`.
    pub fn matches(
        &self,
        proc: &HostProc,
        pid: u32,
        parent_of: &dyn Fn(u32) -> Option<u32>,
    ) -> bool {
        match self {
            WatchSpec::Pid(root) => {
                if pid == *root {
                    return true;
                }
                // Ancestry is only meaningful for processes this host can see (or saw before
                // they exited).
                proc.known() && is_descendant(pid, proc.ppid, *root, parent_of)
            }
            WatchSpec::User(name) => proc.known() && user_matches(proc, name),
            WatchSpec::Cmd(re) => {
                if !proc.known() {
                    return false;
                }
                match (proc.command.as_deref(), proc.name.as_deref()) {
                    (Some(cmd), _) if !cmd.is_empty() => re.is_match(cmd),
                    (_, Some(name)) => re.is_match(name),
                    _ => false,
                }
            }
        }
    }
}

fn user_matches(proc: &HostProc, name: &str) -> bool {
    if proc.user.as_deref() == Some(name) {
        return true;
    }
    match (name.parse::<u32>(), proc.uid) {
        (Ok(want), Some(uid)) => want == uid,
        _ => false,
    }
}

/// Walks up from `pid` (whose parent is `first_parent` when known) looking for `root`, at most
/// [`MAX_ANCESTRY_DEPTH`] steps, stopping at a cycle or at the top of the tree.
fn is_descendant(
    pid: u32,
    first_parent: Option<u32>,
    root: u32,
    parent_of: &dyn Fn(u32) -> Option<u32>,
) -> bool {
    let mut seen = vec![pid];
    let mut next = first_parent.or_else(|| parent_of(pid));
    while let Some(p) = next {
        if p == root {
            return true;
        }
        if p == 0 || seen.contains(&p) || seen.len() >= MAX_ANCESTRY_DEPTH {
            return false;
        }
        seen.push(p);
        next = parent_of(p);
    }
    false
}

/// The watched set: the configured specs, or, when there are none, the invoking user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSet {
    specs: Vec<WatchSpec>,
    default_user: Option<String>,
}

impl WatchSet {
    /// A watched set of `specs`; with no specs it is the processes of `invoking_user` (and
    /// nothing at all when the invoking user is unknown).
    pub fn new(specs: Vec<WatchSpec>, invoking_user: Option<String>) -> Self {
        let default_user = if specs.is_empty() {
            invoking_user
        } else {
            None
        };
        Self {
            specs,
            default_user,
        }
    }

    /// The configured specs (empty when the set is the invoking user's processes).
    pub fn specs(&self) -> &[WatchSpec] {
        &self.specs
    }

    /// The user whose processes are watched because no specs were given.
    pub fn default_user(&self) -> Option<&str> {
        self.default_user.as_deref()
    }

    /// The PIDs of a sample that are in the watched set, decided once: `pid:N` specs walk
    /// `/proc` for ancestors, so consumers look the answer up instead of asking per call.
    pub fn pids_in(
        &self,
        sample: &crate::model::Sample,
        parent_of: &dyn Fn(u32) -> Option<u32>,
    ) -> std::collections::HashSet<u32> {
        // The processes of one job share their ancestors (every rank walks up through the same
        // launcher and shell): each PID's parent is read once per sample, not once per walk.
        let known = std::cell::RefCell::new(std::collections::HashMap::new());
        let cached = |pid: u32| {
            *known
                .borrow_mut()
                .entry(pid)
                .or_insert_with(|| parent_of(pid))
        };
        sample
            .gpus
            .iter()
            .flat_map(|g| &g.processes)
            .filter(|p| self.matches(&p.host, p.pid, &cached))
            .map(|p| p.pid)
            .collect()
    }

    /// Whether process `pid` (host facts `proc`) is in the watched set. `parent_of` gives the
    /// parent of a PID, for `pid:N` specs that watch a whole tree. A process the host cannot
    /// see and never saw (`proc.known() == false`) matches only a `pid:N` naming it exactly; one
    /// that exited is matched on its last known facts.
    pub fn matches(
        &self,
        proc: &HostProc,
        pid: u32,
        parent_of: &dyn Fn(u32) -> Option<u32>,
    ) -> bool {
        if self.specs.is_empty() {
            return match &self.default_user {
                Some(user) => proc.known() && proc.user.as_deref() == Some(user.as_str()),
                None => false,
            };
        }
        self.specs.iter().any(|s| s.matches(proc, pid, parent_of))
    }
}

impl fmt::Display for WatchSet {
    /// A one-line description for headers and logs, e.g. `user alice` or `pid:42, cmd:train`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.specs.is_empty() {
            return match &self.default_user {
                Some(user) => write!(f, "user {user}"),
                None => f.write_str("nothing (invoking user unknown)"),
            };
        }
        for (i, spec) in self.specs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{spec}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn spec(s: &str) -> WatchSpec {
        s.parse().unwrap()
    }

    fn host(user: &str, name: &str, command: Option<&str>, ppid: Option<u32>) -> HostProc {
        HostProc {
            visible: true,
            name: Some(name.to_owned()),
            command: command.map(str::to_owned),
            user: Some(user.to_owned()),
            uid: Some(1000),
            ppid,
            ..HostProc::default()
        }
    }

    fn invisible() -> HostProc {
        HostProc::default()
    }

    fn no_parents(_: u32) -> Option<u32> {
        None
    }

    #[test]
    fn parses_each_form() {
        assert_eq!(spec("pid:42"), WatchSpec::Pid(42));
        assert_eq!(spec("user:alice"), WatchSpec::User("alice".into()));
        assert_eq!(spec("cmd:python .*train").to_string(), "cmd:python .*train");
        // A regex may contain ':' itself.
        assert_eq!(spec("cmd:a:b").to_string(), "cmd:a:b");
    }

    #[test]
    fn display_round_trips() {
        for s in ["pid:7", "user:bob", "cmd:^torchrun\\b"] {
            assert_eq!(spec(s).to_string(), s);
            assert_eq!(spec(&spec(s).to_string()), spec(s));
        }
    }

    #[test]
    fn bad_specs_say_what_is_expected() {
        let err = "foo".parse::<WatchSpec>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid watch spec 'foo': expected pid:N, user:NAME or cmd:REGEX"
        );
        let err = "host:x".parse::<WatchSpec>().unwrap_err();
        assert_eq!(err.problem, WatchSpecProblem::Form);
        let err = "pid:abc".parse::<WatchSpec>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid watch spec 'pid:abc': 'abc' is not a process id (expected pid:N, N > 0)"
        );
        assert!("pid:0".parse::<WatchSpec>().is_err());
        assert!("user:".parse::<WatchSpec>().is_err());
        assert!("cmd:".parse::<WatchSpec>().is_err());
    }

    #[test]
    fn bad_regex_names_the_regex_and_the_error() {
        let err = "cmd:train(".parse::<WatchSpec>().unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("invalid watch spec 'cmd:train(': bad regex 'train(': "),
            "{text}"
        );
        assert_eq!(
            text,
            "invalid watch spec 'cmd:train(': bad regex 'train(': unclosed group"
        );
    }

    #[test]
    fn pid_matches_itself_and_descendants() {
        // 1 ─ 10 ─ 20 ─ 30 ; 1 ─ 11
        let parents: HashMap<u32, u32> = [(10, 1), (20, 10), (30, 20), (11, 1)].into();
        let parent_of = |p: u32| parents.get(&p).copied();
        let set = WatchSet::new(vec![WatchSpec::Pid(10)], Some("alice".into()));
        let p = |ppid| host("bob", "x", None, ppid);
        assert!(set.matches(&p(Some(1)), 10, &parent_of));
        assert!(set.matches(&p(Some(10)), 20, &parent_of));
        assert!(set.matches(&p(Some(20)), 30, &parent_of));
        // The parent link may come from the lookup alone.
        assert!(set.matches(&p(None), 30, &parent_of));
        assert!(!set.matches(&p(Some(1)), 11, &parent_of));
        assert!(!set.matches(&p(None), 1, &parent_of));
    }

    #[test]
    fn pid_walk_survives_cycles_and_deep_chains() {
        let cycle = |p: u32| Some(if p == 5 { 6 } else { 5 });
        let set = WatchSet::new(vec![WatchSpec::Pid(99)], None);
        assert!(!set.matches(&host("a", "x", None, None), 5, &cycle));
        // A chain deeper than the bound is not followed to the end.
        let chain = |p: u32| (p > 1).then(|| p - 1);
        let set = WatchSet::new(vec![WatchSpec::Pid(1)], None);
        assert!(set.matches(&host("a", "x", None, None), 100, &chain));
        assert!(!set.matches(&host("a", "x", None, None), 10_000, &chain));
    }

    #[test]
    fn user_matches_name_or_uid() {
        let set = WatchSet::new(vec![spec("user:alice")], None);
        assert!(set.matches(&host("alice", "x", None, None), 1, &no_parents));
        assert!(!set.matches(&host("bob", "x", None, None), 1, &no_parents));
        let by_uid = WatchSet::new(vec![spec("user:1000")], None);
        assert!(by_uid.matches(&host("bob", "x", None, None), 1, &no_parents));
    }

    #[test]
    fn cmd_searches_command_line_then_name() {
        let set = WatchSet::new(vec![spec("cmd:train\\.py")], None);
        let with_cmd = host("a", "python3", Some("python3 /src/train.py --lr 1"), None);
        assert!(set.matches(&with_cmd, 1, &no_parents));
        let other_cmd = host("a", "train.py", Some("python3 eval.py"), None);
        assert!(!set.matches(&other_cmd, 1, &no_parents));
        let name_only = host("a", "train.py", None, None);
        assert!(set.matches(&name_only, 1, &no_parents));
        let empty_cmd = host("a", "train.py", Some(""), None);
        assert!(set.matches(&empty_cmd, 1, &no_parents));
    }

    #[test]
    fn invisible_processes_match_only_their_pid() {
        let ghost = invisible();
        let parent_of = |_| Some(7);
        assert!(WatchSet::new(vec![WatchSpec::Pid(3)], None).matches(&ghost, 3, &parent_of));
        assert!(!WatchSet::new(vec![WatchSpec::Pid(7)], None).matches(&ghost, 3, &parent_of));
        let mut ghost_with_facts = invisible();
        ghost_with_facts.user = Some("alice".into());
        ghost_with_facts.name = Some("train".into());
        assert!(!WatchSet::new(vec![spec("user:alice")], None).matches(
            &ghost_with_facts,
            3,
            &no_parents
        ));
        assert!(!WatchSet::new(vec![spec("cmd:train")], None).matches(
            &ghost_with_facts,
            3,
            &no_parents
        ));
        assert!(!WatchSet::new(vec![], Some("alice".into())).matches(
            &ghost_with_facts,
            3,
            &no_parents
        ));
    }

    /// A process that exited while the driver still lists it keeps its last known user,
    /// command and parent: it stays mine under every kind of spec.
    #[test]
    fn exited_processes_match_on_their_last_known_facts() {
        let mut gone = host("alice", "python", Some("python train.py"), Some(10));
        gone.visible = false;
        gone.exited = true;
        let parents = |p: u32| (p == 10).then_some(1);
        for set in [
            WatchSet::new(vec![], Some("alice".into())),
            WatchSet::new(vec![spec("user:alice")], None),
            WatchSet::new(vec![spec("cmd:train")], None),
            WatchSet::new(vec![WatchSpec::Pid(10)], None),
        ] {
            assert!(set.matches(&gone, 3, &parents), "{set}");
        }
        assert!(!WatchSet::new(vec![], Some("bob".into())).matches(&gone, 3, &parents));
    }

    #[test]
    fn empty_specs_mean_the_invoking_user() {
        let set = WatchSet::new(vec![], Some("alice".into()));
        assert_eq!(set.default_user(), Some("alice"));
        assert!(set.matches(&host("alice", "x", None, None), 1, &no_parents));
        assert!(!set.matches(&host("bob", "x", None, None), 1, &no_parents));
        assert_eq!(set.to_string(), "user alice");
        let unknown = WatchSet::new(vec![], None);
        assert!(!unknown.matches(&host("alice", "x", None, None), 1, &no_parents));
    }

    #[test]
    fn explicit_specs_replace_the_invoking_user() {
        let set = WatchSet::new(vec![spec("pid:5"), spec("cmd:train")], Some("alice".into()));
        assert_eq!(set.default_user(), None);
        assert!(!set.matches(&host("alice", "x", None, None), 1, &no_parents));
        assert!(set.matches(&host("bob", "train", None, None), 1, &no_parents));
        assert_eq!(set.to_string(), "pid:5, cmd:train");
    }

    /// A process on a GPU, with its parent as the host reported it.
    fn gpu_proc(pid: u32, parent: Option<u32>) -> crate::model::ProcSample {
        crate::model::ProcSample {
            pid,
            kind: crate::model::ProcKind::Compute,
            used_bytes: Some(1),
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: host("bob", "python", None, parent),
        }
    }

    /// A sample of these GPUs' process lists.
    fn sample_of(gpus: Vec<Vec<crate::model::ProcSample>>) -> crate::model::Sample {
        crate::model::Sample {
            taken_at: 0.0,
            gpus: gpus
                .into_iter()
                .enumerate()
                .map(|(i, processes)| {
                    let mut g = crate::model::GpuSample::empty(i as u32, format!("GPU-{i}"));
                    g.processes = processes;
                    g
                })
                .collect(),
            errors: vec![],
            collect_seconds: 0.0,
        }
    }

    #[test]
    fn pids_in_decides_once_per_sample_with_descendants() {
        let sample = sample_of(vec![vec![gpu_proc(20, Some(10)), gpu_proc(30, Some(1))]]);
        let set = WatchSet::new(vec![WatchSpec::Pid(10)], None);
        let mine = set.pids_in(&sample, &|_| None);
        assert_eq!(
            mine.into_iter().collect::<Vec<_>>(),
            vec![20],
            "the child of pid 10 only"
        );
    }

    #[test]
    fn pids_in_reads_each_ancestor_once_per_sample() {
        // shell 10 → launcher 11 → ranks 100..108 on two GPUs; the spec names the shell.
        let ranks = |r: std::ops::Range<u32>| r.map(|pid| gpu_proc(pid, Some(11))).collect();
        let sample = sample_of(vec![ranks(100..104), ranks(104..108)]);
        let reads = std::cell::RefCell::new(Vec::new());
        let parent_of = |pid: u32| {
            reads.borrow_mut().push(pid);
            match pid {
                11 => Some(10),
                10 => Some(1),
                _ => None,
            }
        };
        let set = WatchSet::new(vec![WatchSpec::Pid(10)], None);
        assert_eq!(set.pids_in(&sample, &parent_of).len(), 8);
        assert_eq!(
            *reads.borrow(),
            vec![11],
            "the launcher's parent, read once for 8 ranks"
        );
    }
}
