//! The tree view's model: the rows read by [`crate::source::procdetail`], how each is drawn
//! (`├─`, `└─`, `│`), which subtrees are collapsed, and the tree's own cursor.
//!
//! The cursor is a PID, not a table row: the tree shows launchers and workers that hold no GPU
//! memory and have no table row. Entering the tree puts it on the table's selected process;
//! moving it onto a GPU process selects that process in the table too, so `Enter`, `w`, `K` act
//! on what the cursor is on (and on nothing when it is on a process without GPU memory).

use std::collections::BTreeSet;

use crate::source::procdetail::TreeRow;

/// The rows of the tree view and what the user did to them.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    rows: Vec<TreeRow>,
    /// Per row: what goes before its name ([`branches`]).
    branches: Vec<String>,
    /// Per row: how many rows its subtree has below it.
    descendants: Vec<usize>,
    /// PIDs whose subtrees are hidden; kept across reads while the PID is in the tree.
    collapsed: BTreeSet<u32>,
    /// The PID under the cursor.
    cursor: Option<u32>,
}

/// One row as the view draws it.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    pub row: &'a TreeRow,
    pub branch: &'a str,
    /// Rows hidden under it (collapsed), 0 when expanded or a leaf.
    pub hidden: usize,
    pub selected: bool,
}

impl Tree {
    /// New rows from a read of the process table; the collapsed set and the cursor keep to
    /// the PIDs still there.
    pub fn set_rows(&mut self, rows: Vec<TreeRow>) {
        let depths: Vec<usize> = rows.iter().map(|r| r.depth).collect();
        self.branches = branches(&depths);
        self.descendants = descendants(&depths);
        self.collapsed
            .retain(|pid| rows.iter().any(|r| r.pid == *pid));
        self.rows = rows;
        if self.cursor.is_some_and(|pid| !self.is_visible_pid(pid)) {
            self.cursor = self.visible().first().map(|&i| self.rows[i].pid);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every row read, collapsed or not.
    pub fn rows(&self) -> &[TreeRow] {
        &self.rows
    }

    /// Indices of the rows not inside a collapsed subtree, in display order.
    pub fn visible(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.rows.len());
        let mut i = 0;
        while i < self.rows.len() {
            out.push(i);
            if self.collapsed.contains(&self.rows[i].pid) {
                i += self.descendants[i];
            }
            i += 1;
        }
        out
    }

    fn is_visible_pid(&self, pid: u32) -> bool {
        self.visible().iter().any(|&i| self.rows[i].pid == pid)
    }

    /// The visible rows as drawn, and the position of the cursor among them.
    pub fn shown(&self) -> (Vec<Shown<'_>>, Option<usize>) {
        let visible = self.visible();
        let mut at = None;
        let shown = visible
            .iter()
            .enumerate()
            .map(|(n, &i)| {
                let row = &self.rows[i];
                let selected = self.cursor == Some(row.pid);
                if selected {
                    at = Some(n);
                }
                Shown {
                    row,
                    branch: &self.branches[i],
                    hidden: if self.collapsed.contains(&row.pid) {
                        self.descendants[i]
                    } else {
                        0
                    },
                    selected,
                }
            })
            .collect();
        (shown, at)
    }

    /// The PID under the cursor.
    pub fn cursor(&self) -> Option<u32> {
        self.cursor
    }

    /// Puts the cursor on `pid` (when it is shown), else leaves it.
    pub fn point_at(&mut self, pid: u32) {
        if self.is_visible_pid(pid) || self.rows.is_empty() {
            self.cursor = Some(pid);
        }
    }

    /// Moves the cursor `by` visible rows (clamped at both ends); the PID it lands on.
    pub fn move_by(&mut self, by: isize) -> Option<u32> {
        let visible = self.visible();
        let last = visible.len().checked_sub(1)?;
        let now = self
            .cursor
            .and_then(|pid| visible.iter().position(|&i| self.rows[i].pid == pid));
        let to = match now {
            Some(n) => n.saturating_add_signed(by).min(last),
            None => 0,
        };
        self.cursor = Some(self.rows[visible[to]].pid);
        self.cursor
    }

    /// Moves the cursor to the first (`false`) or last (`true`) visible row.
    pub fn move_to_end(&mut self, last: bool) -> Option<u32> {
        self.move_by(if last { isize::MAX } else { isize::MIN })
    }

    /// Collapses the cursor's subtree; on a leaf or a collapsed node, its parent's (the cursor
    /// moves to the parent). Whether anything changed.
    pub fn collapse(&mut self) -> bool {
        let Some(i) = self.cursor_index() else {
            return false;
        };
        let pid = self.rows[i].pid;
        if self.descendants[i] > 0 && !self.collapsed.contains(&pid) {
            return self.collapsed.insert(pid);
        }
        let depth = self.rows[i].depth;
        let Some(parent) = (0..i).rev().find(|&j| self.rows[j].depth < depth) else {
            return false;
        };
        let parent = self.rows[parent].pid;
        self.cursor = Some(parent);
        self.collapsed.insert(parent)
    }

    /// Expands the cursor's subtree. Whether it was collapsed.
    pub fn expand(&mut self) -> bool {
        self.cursor.is_some_and(|pid| self.collapsed.remove(&pid))
    }

    fn cursor_index(&self) -> Option<usize> {
        let pid = self.cursor?;
        self.rows.iter().position(|r| r.pid == pid)
    }
}

/// The first visible row drawn when `page` rows fit and the cursor is the `at`-th visible row:
/// the top, until the cursor would fall below the page; then the cursor is on the last line.
pub fn first_shown(at: Option<usize>, page: usize) -> usize {
    at.map_or(0, |i| (i + 1).saturating_sub(page))
}

/// What goes before each row's name, given the rows' depths in pre-order: `├─ ` for a node
/// with a later sibling, `└─ ` for the last one, and for each ancestor below the root `│  `
/// while that ancestor has a later sibling, else blanks. Roots (depth 0) get nothing.
pub fn branches(depths: &[usize]) -> Vec<String> {
    // Backwards: whether a later row at the same depth shares the parent.
    let mut last = vec![true; depths.len()];
    let mut later: Vec<bool> = Vec::new();
    for (i, &d) in depths.iter().enumerate().rev() {
        later.resize(d + 1, false);
        last[i] = !later[d];
        later[d] = true;
    }
    // Forwards: which ancestors still have siblings to come (their `│` continues).
    let mut open: Vec<bool> = Vec::new();
    depths
        .iter()
        .zip(&last)
        .map(|(&d, &is_last)| {
            open.resize(d + 1, false);
            let mut s = String::with_capacity(3 * d);
            for &more in open.iter().take(d).skip(1) {
                s.push_str(if more { "│  " } else { "   " });
            }
            if d > 0 {
                s.push_str(if is_last { "└─ " } else { "├─ " });
            }
            open[d] = !is_last;
            s
        })
        .collect()
}

/// Per row of a pre-order list of depths: how many rows follow it inside its subtree.
fn descendants(depths: &[usize]) -> Vec<usize> {
    let mut out = vec![0; depths.len()];
    // Rows whose subtree is still open, by index.
    let mut stack: Vec<usize> = Vec::new();
    for (i, &d) in depths.iter().enumerate() {
        while stack.last().is_some_and(|&j| depths[j] >= d) {
            let j = stack.pop().unwrap_or_default();
            out[j] = i - j - 1;
        }
        stack.push(i);
    }
    for j in stack {
        out[j] = depths.len() - j - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(depths: &[usize]) -> Vec<String> {
        branches(depths)
            .into_iter()
            .zip(depths)
            .map(|(b, d)| format!("{b}{d}"))
            .collect()
    }

    #[test]
    fn siblings_at_several_depths() {
        // launcher ─┬ rank0 ─┬ worker
        //           │        └ worker ─ grandchild
        //           ├ rank1 ─ worker
        //           └ rank2
        // other root ─ child
        let depths = [0, 1, 2, 2, 3, 1, 2, 1, 0, 1];
        assert_eq!(
            drawn(&depths),
            vec![
                "0",
                "├─ 1",
                "│  ├─ 2",
                "│  └─ 2",
                "│     └─ 3",
                "├─ 1",
                "│  └─ 2",
                "└─ 1",
                "0",
                "└─ 1",
            ]
        );
    }

    #[test]
    fn a_last_child_stops_its_line_but_not_its_uncles() {
        let depths = [0, 1, 2, 3, 2, 1];
        assert_eq!(
            drawn(&depths),
            vec!["0", "├─ 1", "│  ├─ 2", "│  │  └─ 3", "│  └─ 2", "└─ 1"]
        );
        assert!(branches(&[]).is_empty());
        assert_eq!(drawn(&[0, 0]), vec!["0", "0"]);
    }

    #[test]
    fn subtree_sizes() {
        assert_eq!(
            descendants(&[0, 1, 2, 2, 3, 1, 2, 1, 0, 1]),
            vec![7, 3, 0, 1, 0, 1, 0, 0, 1, 0]
        );
        assert!(descendants(&[]).is_empty());
    }

    fn row(pid: u32, depth: usize) -> TreeRow {
        TreeRow {
            pid,
            name: format!("p{pid}"),
            depth,
            on_gpu: false,
            user: None,
            command: None,
        }
    }

    fn tree() -> Tree {
        let mut t = Tree::default();
        t.set_rows(vec![
            row(10, 0),
            row(11, 1),
            row(12, 2),
            row(13, 1),
            row(20, 0),
        ]);
        t
    }

    fn pids(t: &Tree) -> Vec<u32> {
        t.visible().iter().map(|&i| t.rows()[i].pid).collect()
    }

    #[test]
    fn collapse_hides_the_subtree_and_counts_it() {
        let mut t = tree();
        t.point_at(10);
        assert!(t.collapse());
        assert_eq!(pids(&t), vec![10, 20]);
        let (shown, at) = t.shown();
        assert_eq!((shown[0].hidden, shown[1].hidden, at), (3, 0, Some(0)));
        assert_eq!(t.move_by(1), Some(20));
        assert_eq!(t.move_by(5), Some(20));
        assert_eq!(t.move_by(-1), Some(10));
        assert!(t.expand());
        assert_eq!(pids(&t), vec![10, 11, 12, 13, 20]);
        assert!(!t.expand());
    }

    #[test]
    fn collapse_on_a_leaf_folds_its_parent() {
        let mut t = tree();
        t.point_at(12);
        assert!(t.collapse());
        assert_eq!(t.cursor(), Some(11));
        assert_eq!(pids(&t), vec![10, 11, 13, 20]);
        // Again on the now collapsed node: its parent.
        assert!(t.collapse());
        assert_eq!((t.cursor(), pids(&t)), (Some(10), vec![10, 20]));
        // A root leaf has no parent.
        t.point_at(20);
        assert!(!t.collapse());
    }

    #[test]
    fn a_new_read_keeps_collapsed_pids_and_moves_a_hidden_cursor() {
        let mut t = tree();
        t.point_at(10);
        t.collapse();
        t.set_rows(vec![row(10, 0), row(11, 1), row(20, 0), row(21, 1)]);
        assert_eq!(pids(&t), vec![10, 20, 21]);
        t.point_at(21);
        t.set_rows(vec![row(10, 0), row(11, 1)]);
        assert_eq!(t.cursor(), Some(10), "21 is gone");
        t.set_rows(Vec::new());
        assert_eq!(t.move_by(1), None);
    }
}
