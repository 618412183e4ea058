//! `gpuwatch pick`: the best GPU(s) for a new job — most free memory, then least utilisation.

pub use crate::config::PickFormat;
use crate::model::{GpuSample, MigMode, Sample};

/// Why no answer could be given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PickError {
    #[error("{}", none_fits(*.min_free, .best.as_ref(), *.wanted, *.fitting))]
    NoneFits {
        min_free: u64,
        /// The best candidate that did not fit: (index, free bytes).
        best: Option<(u32, u64)>,
        wanted: usize,
        fitting: usize,
    },
}

fn none_fits(min_free: u64, best: Option<&(u32, u64)>, wanted: usize, fitting: usize) -> String {
    let need = crate::output::fmt_bytes(min_free);
    if fitting == 0 {
        return format!("no GPU has {need} free{}", best_text(best));
    }
    // Some fit, not as many as asked for: say how many, not that none does.
    format!(
        "{wanted} GPUs with {need} free were asked for, and only {fitting} {} it{}",
        if fitting == 1 { "has" } else { "have" },
        best_text(best)
    )
}

fn best_text(best: Option<&(u32, u64)>) -> String {
    match best {
        Some((i, free)) => format!(
            " (the most free is GPU {i} with {})",
            crate::output::fmt_bytes(*free)
        ),
        None => " (no GPU reports its memory)".to_string(),
    }
}

/// Why a GPU cannot take a new job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// NVML reports it lost (it fell off the bus): nothing can run there.
    Lost,
    /// Split into MIG devices: the job goes to one of them, not the whole GPU.
    Mig,
    /// Its memory could not be read.
    MemoryUnknown,
}

/// Why `g` cannot take a new job, or `None` when it can (the rule `pick` and `run --gpu`
/// share).
pub(crate) fn unfit(g: &GpuSample) -> Option<Unfit> {
    if g.lost {
        Some(Unfit::Lost)
    } else if g.mig_mode == Some(MigMode::Enabled) {
        Some(Unfit::Mig)
    } else if g.memory.is_none() {
        Some(Unfit::MemoryUnknown)
    } else {
        None
    }
}

/// A GPU that can take work (see [`unfit`]), and its free memory.
fn candidate(g: &GpuSample) -> Option<u64> {
    match unfit(g) {
        None => g.memory.map(|m| m.free),
        Some(_) => None,
    }
}

/// The `count` best GPUs with at least `min_free` bytes free, best first.
pub fn pick(sample: &Sample, min_free: u64, count: usize) -> Result<Vec<&GpuSample>, PickError> {
    let mut ranked: Vec<(&GpuSample, u64)> = sample
        .gpus
        .iter()
        .filter_map(|g| candidate(g).map(|free| (g, free)))
        .collect();
    ranked.sort_by(|(a, fa), (b, fb)| {
        fb.cmp(fa)
            .then_with(|| {
                let ua = a.util_gpu.unwrap_or(f32::MAX);
                let ub = b.util_gpu.unwrap_or(f32::MAX);
                ua.total_cmp(&ub)
            })
            .then(a.index.cmp(&b.index))
    });
    let best = ranked.first().map(|(g, free)| (g.index, *free));
    let fitting: Vec<&GpuSample> = ranked
        .into_iter()
        .filter(|(_, free)| *free >= min_free)
        .map(|(g, _)| g)
        .collect();
    if fitting.len() < count.max(1) {
        return Err(PickError::NoneFits {
            min_free,
            best,
            wanted: count,
            fitting: fitting.len(),
        });
    }
    Ok(fitting.into_iter().take(count.max(1)).collect())
}

/// The answer as the user asked for it.
pub fn format(gpus: &[&GpuSample], format: PickFormat) -> String {
    match format {
        PickFormat::Index => gpus
            .iter()
            .map(|g| g.index.to_string())
            .collect::<Vec<_>>()
            .join(","),
        PickFormat::Uuid => gpus
            .iter()
            .map(|g| device_id(g))
            .collect::<Vec<_>>()
            .join(","),
        PickFormat::Env => format!(
            "CUDA_VISIBLE_DEVICES={}",
            gpus.iter()
                .map(|g| device_id(g))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// The GPU's UUID for `CUDA_VISIBLE_DEVICES`, or its index when the UUID is not one (empty, or
/// holding anything but letters, digits and `-`, as a crafted recording or scenario could):
/// the output is pasted into shells (`export $(gpuwatch pick)`), so it must not word-split.
fn device_id(g: &GpuSample) -> String {
    let valid = !g.uuid.is_empty()
        && g.uuid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
    if valid {
        g.uuid.clone()
    } else {
        g.index.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Memory;

    fn gpu(index: u32, free_gib: u64, util: Option<f32>) -> GpuSample {
        let mut g = GpuSample::empty(index, format!("GPU-{index}"));
        g.memory = Some(Memory {
            total: 80 << 30,
            reserved: None,
            used: (80 << 30) - (free_gib << 30),
            free: free_gib << 30,
        });
        g.util_gpu = util;
        g
    }

    fn sample(gpus: Vec<GpuSample>) -> Sample {
        Sample {
            taken_at: 0.0,
            gpus,
            errors: vec![],
            collect_seconds: 0.0,
        }
    }

    #[test]
    fn a_uuid_that_would_word_split_a_shell_is_replaced_by_the_index() {
        let mut evil = gpu(3, 40, None);
        evil.uuid = "GPU-x LD_PRELOAD=/tmp/x.so".into();
        let mut empty = gpu(4, 40, None);
        empty.uuid = String::new();
        let fine = gpu(5, 40, None);
        let picked = [&evil, &empty, &fine];
        assert_eq!(
            format(&picked, PickFormat::Env),
            "CUDA_VISIBLE_DEVICES=3,4,GPU-5"
        );
        assert_eq!(format(&picked, PickFormat::Uuid), "3,4,GPU-5");
    }

    #[test]
    fn most_free_then_least_utilised() {
        let s = sample(vec![
            gpu(0, 10, Some(0.0)),
            gpu(1, 40, Some(90.0)),
            gpu(2, 40, Some(5.0)),
        ]);
        let picked = pick(&s, 0, 2).expect("fits");
        assert_eq!(
            picked.iter().map(|g| g.index).collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert_eq!(
            format(&picked, PickFormat::Env),
            "CUDA_VISIBLE_DEVICES=GPU-2,GPU-1"
        );
        assert_eq!(format(&picked, PickFormat::Index), "2,1");
    }

    #[test]
    fn none_fits_names_the_best() {
        let s = sample(vec![gpu(0, 3, None), gpu(1, 5, None)]);
        let err = pick(&s, 8 << 30, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no GPU has 8.0GiB free (the most free is GPU 1 with 5.0GiB)"
        );
    }

    #[test]
    fn lost_and_unknown_gpus_are_skipped() {
        let mut lost = gpu(0, 70, None);
        lost.lost = true;
        let unknown = GpuSample::empty(1, "GPU-1".into());
        let s = sample(vec![lost, unknown, gpu(2, 1, None)]);
        let picked = pick(&s, 0, 1).expect("one fits");
        assert_eq!(picked[0].index, 2);
    }

    #[test]
    fn count_larger_than_fitting_is_an_error() {
        let s = sample(vec![gpu(0, 30, None), gpu(1, 2, None)]);
        let err = pick(&s, 10 << 30, 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "2 GPUs with 10.0GiB free were asked for, and only 1 has it (the most free is GPU 0 with 30.0GiB)"
        );
    }
}
