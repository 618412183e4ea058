//! The split of a GPU's memory by whose it is: one rule for every front end.

use crate::model::{GpuSample, ProcSample};

/// A GPU's memory split by whose it is. *External* is everything in `used` that is not mine:
/// other processes and memory no visible process accounts for (DESIGN §3). A share that would
/// need an unknown value (a process whose memory NVML does not report, a process list that
/// could not be read) is `None`, never a sum that counts the unknown as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSplit {
    pub used: u64,
    pub total: u64,
    /// The driver's free memory (`total − reserved − used`).
    pub free: u64,
    /// The watched processes' memory.
    pub mine: Option<u64>,
    /// `used − mine`.
    pub external: Option<u64>,
    /// Other processes' memory (the part of `external` a process is named for).
    pub others: Option<u64>,
    /// `used − Σ every process`: held by no process visible here.
    pub unattributed: Option<u64>,
    /// For drawing only (a bar's cells, never a figure): the sums of the watched and the other
    /// processes' values that are known; the rest of `used` is unattributed or of unknown owner.
    pub drawn_mine: u64,
    pub drawn_others: u64,
}

impl MemSplit {
    /// The split of `g`; `None` when its memory is unknown.
    pub fn of(g: &GpuSample, watched: &dyn Fn(&ProcSample) -> bool) -> Option<Self> {
        let m = g.memory?;
        let mut mine = Some(0u64);
        let mut others = Some(0u64);
        let (mut drawn_mine, mut drawn_others) = (0u64, 0u64);
        if g.processes_unavailable {
            mine = None;
            others = None;
        } else {
            for p in &g.processes {
                let is_mine = watched(p);
                let (share, drawn) = if is_mine {
                    (&mut mine, &mut drawn_mine)
                } else {
                    (&mut others, &mut drawn_others)
                };
                *drawn = drawn.saturating_add(p.used_bytes.unwrap_or(0));
                *share = match (*share, p.used_bytes) {
                    (Some(sum), Some(b)) => Some(sum.saturating_add(b)),
                    _ => None,
                };
            }
        }
        Some(Self {
            used: m.used,
            total: m.total,
            free: m.free,
            mine,
            external: mine.map(|b| m.used.saturating_sub(b)),
            others,
            unattributed: g.unattributed_bytes(),
            drawn_mine,
            drawn_others,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_support::{gpu, proc};

    #[test]
    fn external_is_everything_not_mine_unattributed_included() {
        let g = gpu(60, vec![proc(1, Some(30)), proc(2, Some(20))]);
        let s = MemSplit::of(&g, &|p| p.pid == 1).unwrap();
        assert_eq!(s.mine, Some(30));
        assert_eq!(s.others, Some(20));
        assert_eq!(s.unattributed, Some(10));
        assert_eq!(s.external, Some(30), "20 of process 2 + 10 unattributed");
    }

    #[test]
    fn an_unknown_value_is_never_summed() {
        // A watched process without a figure: mine and external are unknown.
        let g = gpu(60, vec![proc(1, None), proc(2, Some(20))]);
        let s = MemSplit::of(&g, &|p| p.pid == 1).unwrap();
        assert_eq!((s.mine, s.external, s.unattributed), (None, None, None));
        assert_eq!(s.others, Some(20));
        // Another user's process without a figure: mine is known, so is external.
        let s = MemSplit::of(&g, &|p| p.pid == 2).unwrap();
        assert_eq!((s.mine, s.external), (Some(20), Some(40)));
        assert_eq!((s.others, s.unattributed), (None, None));
        // No process list: nothing but the device figures.
        let mut g = gpu(60, vec![]);
        g.processes_unavailable = true;
        let s = MemSplit::of(&g, &|_| true).unwrap();
        assert_eq!((s.mine, s.external, s.others), (None, None, None));
        assert_eq!(s.used, 60);
    }
}
