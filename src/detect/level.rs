//! How full a GPU's memory is, as one level (ok / warning / critical) every front end colours
//! by: the snapshot table, the dashboard and the cluster overview. The lines are the
//! near-capacity rule's ([`Rules::near_capacity_warn`], `…_critical`, `…_headroom`), so a
//! memory bar turns yellow where that rule would warn and red where it would be critical
//! (instantaneously: without the rule's minimum duration and hysteresis).

use super::Rules;

/// A GPU's memory level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemLevel {
    Ok,
    Warning,
    Critical,
}

/// The lines between the levels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemLevels {
    /// used/total at or above this fraction is a warning…
    pub warn: f64,
    /// …at or above this one, critical.
    pub critical: f64,
    /// Less free memory than this is a warning too, whatever the fraction.
    pub headroom: u64,
}

impl Default for MemLevels {
    /// The `[detect]` defaults.
    fn default() -> Self {
        Self::from(&Rules::default())
    }
}

impl From<&Rules> for MemLevels {
    fn from(r: &Rules) -> Self {
        Self {
            warn: r.near_capacity_warn,
            critical: r.near_capacity_critical,
            headroom: r.near_capacity_headroom,
        }
    }
}

impl MemLevels {
    /// The level of `used` of `total` with `free` bytes free (`None`: `total - used`).
    /// `None` when the total is unknown (0): no level is made up.
    pub fn level(&self, used: u64, total: u64, free: Option<u64>) -> Option<MemLevel> {
        if total == 0 {
            return None;
        }
        let ratio = used as f64 / total as f64;
        let free = free.unwrap_or_else(|| total.saturating_sub(used));
        Some(if ratio >= self.critical {
            MemLevel::Critical
        } else if ratio >= self.warn || free < self.headroom {
            MemLevel::Warning
        } else {
            MemLevel::Ok
        })
    }

    /// The level of a GPU's memory; `None` when it is unknown.
    pub fn of(&self, memory: Option<crate::model::Memory>) -> Option<MemLevel> {
        let m = memory?;
        self.level(m.used, m.total, Some(m.free))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn levels_follow_the_near_capacity_rule() {
        let l = MemLevels::default();
        let at = |used: u64| l.level(used * GIB, 100 * GIB, None);
        assert_eq!(at(50), Some(MemLevel::Ok));
        assert_eq!(at(89), Some(MemLevel::Ok));
        assert_eq!(at(90), Some(MemLevel::Warning));
        assert_eq!(at(96), Some(MemLevel::Warning));
        assert_eq!(at(97), Some(MemLevel::Critical));
        // A small card: 1.5 GiB free is under the 2 GiB headroom at 62 %.
        assert_eq!(l.level(2_560 << 20, 4 * GIB, None), Some(MemLevel::Warning));
        // The driver's free (reserved memory excluded) counts, not total - used.
        assert_eq!(
            l.level(50 * GIB, 100 * GIB, Some(GIB)),
            Some(MemLevel::Warning)
        );
        assert_eq!(l.level(5, 0, None), None);
        // The configured thresholds move the lines.
        let custom = MemLevels::from(&Rules {
            near_capacity_warn: 0.5,
            near_capacity_critical: 0.8,
            ..Rules::default()
        });
        assert_eq!(
            custom.level(60 * GIB, 100 * GIB, None),
            Some(MemLevel::Warning)
        );
        assert_eq!(
            custom.level(80 * GIB, 100 * GIB, None),
            Some(MemLevel::Critical)
        );
    }
}
