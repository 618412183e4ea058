//! The dashboard's layout: from the terminal size and how much of each variable part is shown
//! (GPUs, findings lines), the rectangles of the header, the GPU panels, the
//! body (table, tree, detail, chart), the findings and the footer, and where the table's
//! process rows go. Pure: the view draws into these rectangles and the state pages and hits
//! mouse clicks with the same ones; neither calls the other for it.

use ratatui::layout::Rect;

/// How much of each variable part the screen shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shown {
    /// GPU panels.
    pub gpus: usize,
    /// Lines the findings panel wants (it takes from 1 to a fifth of the screen).
    pub findings: usize,
}

/// How the GPU panels are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuGrid {
    pub columns: u16,
    /// Lines per GPU: 3 (full) or 1 (compact).
    pub lines: u16,
}

/// The screen's regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub header: Rect,
    pub gpus: Rect,
    pub grid: GpuGrid,
    pub body: Rect,
    /// The table's rows: the body below the table's header line.
    pub table_rows: Rect,
    pub findings: Rect,
    pub footer: Rect,
}

fn lines(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The most lines the findings panel takes: a fifth of the screen, at least 3.
pub fn findings_cap(full: Rect) -> u16 {
    (full.height / 5).max(3)
}

/// Chooses the GPU grid for the space there is.
pub fn gpu_grid(full: Rect, gpus: usize) -> GpuGrid {
    let n = lines(gpus).max(1);
    let columns = if full.width >= 160 && n >= 2 { 2 } else { 1 };
    let per_column = n.div_ceil(columns);
    // Panels may take up to 40 % of the screen before they shrink to one line per GPU.
    let budget = full.height.saturating_sub(4).saturating_mul(2) / 5;
    let lines = if per_column.saturating_mul(3) <= budget {
        3
    } else {
        1
    };
    GpuGrid { columns, lines }
}

/// The layout of `full` showing `shown`.
pub fn compute(full: Rect, shown: Shown) -> Layout {
    let grid = gpu_grid(full, shown.gpus);
    let gpu_height = lines(shown.gpus)
        .div_ceil(grid.columns)
        .saturating_mul(grid.lines);
    // The findings take the lines they need, up to a fifth of the screen (at least 3).
    let findings = lines(shown.findings).clamp(1, findings_cap(full));
    let bottom = full.y.saturating_add(full.height);
    let mut y = full.y;
    let take = |y: &mut u16, h: u16| {
        let h = h.min(bottom - *y);
        let r = Rect::new(full.x, *y, full.width, h);
        *y += h;
        r
    };
    let header = take(&mut y, 1);
    let gpus = take(&mut y, gpu_height);
    let body_h = bottom.saturating_sub(y).saturating_sub(findings + 1);
    let body = take(&mut y, body_h);
    let findings = take(&mut y, findings);
    let footer = take(&mut y, 1);
    let table_rows = Rect::new(
        body.x,
        body.y + 1.min(body.height),
        body.width,
        body.height.saturating_sub(1),
    );
    Layout {
        header,
        gpus,
        grid,
        body,
        table_rows,
        findings,
        footer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(gpus: usize, findings: usize) -> Shown {
        Shown { gpus, findings }
    }

    #[test]
    fn the_regions_tile_the_screen_and_the_table_rows_sit_in_the_body() {
        let full = Rect::new(0, 0, 120, 40);
        let l = compute(full, shown(2, 0));
        assert_eq!(
            l.grid,
            GpuGrid {
                columns: 1,
                lines: 3
            }
        );
        assert_eq!((l.header.y, l.header.height), (0, 1));
        assert_eq!((l.gpus.y, l.gpus.height), (1, 6));
        assert_eq!((l.body.y, l.body.height), (7, 31));
        assert_eq!(
            (l.findings.y, l.findings.height),
            (38, 1),
            "at least one line"
        );
        assert_eq!((l.footer.y, l.footer.height), (39, 1));
        // Below the table's header line, to the end of the body.
        assert_eq!((l.table_rows.y, l.table_rows.height), (8, 30));
        let more = compute(full, shown(2, 6));
        assert_eq!(more.findings.height, 6, "as many lines as findings");
        assert_eq!(more.table_rows.height, 40 - 7 - 6 - 1 - 1);
        let many = compute(full, shown(2, 30));
        assert_eq!(many.findings.height, 8, "at most a fifth of the screen");
        let small = compute(Rect::new(0, 0, 80, 12), shown(1, 30));
        assert_eq!(small.findings.height, 3, "at least three lines when needed");
    }

    #[test]
    fn many_gpus_go_compact_then_two_columns_on_wide_screens() {
        let l = compute(Rect::new(0, 0, 120, 40), shown(8, 1));
        assert_eq!(
            l.grid,
            GpuGrid {
                columns: 1,
                lines: 1
            }
        );
        assert_eq!(l.gpus.height, 8);
        let wide = compute(Rect::new(0, 0, 200, 60), shown(8, 1));
        assert_eq!(
            wide.grid,
            GpuGrid {
                columns: 2,
                lines: 3
            }
        );
        assert_eq!(wide.gpus.height, 12);
    }

    #[test]
    fn a_tiny_or_absurd_screen_never_overflows() {
        for (w, h) in [(0, 0), (1, 1), (10, 3), (u16::MAX, u16::MAX)] {
            let full = Rect::new(0, 0, w, h);
            let l = compute(full, shown(usize::MAX, usize::MAX));
            for r in [l.header, l.gpus, l.body, l.findings, l.footer, l.table_rows] {
                assert!(
                    u32::from(r.y) + u32::from(r.height) <= u32::from(h),
                    "{w}x{h}: {r:?}"
                );
            }
        }
    }
}
