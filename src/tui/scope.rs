//! What the dashboard was asked to show (`tui --gpu LIST`, `--only-visible`, `--user NAME`): a
//! view of the frames, never a filter on what is sampled, analysed or sent to the alert sinks
//! (an alert is not lost to a view option). The GPU panels, the table and the findings panel
//! show the scoped GPUs; `--user` narrows the table (and the tree) to that user's processes
//! while the panels and findings still show every process's memory, since another user's
//! process on your GPU is what you need to see.

use crate::gpuref::{self, GpuRef};
use crate::model::{GpuSample, ProcSample, Sample};
use crate::triage::{CudaDevice, GpuView};

/// Which GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GpuChoice {
    #[default]
    All,
    /// `--gpu LIST`: NVML indices, UUIDs or unique prefixes (a MIG device names its GPU).
    Named(Vec<GpuRef>),
    /// `--only-visible`: the GPUs `CUDA_VISIBLE_DEVICES` names (its value when the dashboard
    /// started), numbered as `CUDA_DEVICE_ORDER` says.
    CudaVisible {
        visible: String,
        order: Option<String>,
    },
}

/// The dashboard's scope, resolved against the frame on screen.
#[derive(Debug, Clone, Default)]
pub struct ViewScope {
    gpus: GpuChoice,
    user: Option<String>,
    /// NVML indices of the GPUs shown for the frame on screen; `None`: every GPU.
    shown: Option<Vec<u32>>,
    /// The last problem met resolving the choice, so it is said once.
    said: Option<String>,
}

/// The longest part of a value quoted in the header.
const LABEL_MAX: usize = 60;

impl ViewScope {
    pub fn new(gpus: GpuChoice, user: Option<String>) -> Self {
        Self {
            gpus,
            user,
            shown: None,
            said: None,
        }
    }

    /// Resolves the GPU choice against a new sample (GPUs come and go; indices are named
    /// again after a reset). A problem not said before (a GPU that is not there) comes back
    /// once, for the message line.
    pub fn resolve(&mut self, sample: &Sample) -> Option<String> {
        let (shown, problem) = match &self.gpus {
            GpuChoice::All => (None, None),
            GpuChoice::Named(refs) => named(refs, sample),
            GpuChoice::CudaVisible { visible, order } => {
                cuda_visible(visible, order.as_deref(), sample)
            }
        };
        self.shown = shown;
        if problem == self.said {
            return None;
        }
        self.said.clone_from(&problem);
        problem
    }

    /// Whether the GPU is in scope.
    pub fn shows_gpu(&self, g: &GpuSample) -> bool {
        self.shown.as_ref().is_none_or(|s| s.contains(&g.index))
    }

    /// Whether the process is in scope (`--user`), on a GPU in scope.
    pub fn shows_process(&self, p: &ProcSample) -> bool {
        self.user
            .as_ref()
            .is_none_or(|u| p.host.user.as_deref() == Some(u.as_str()))
    }

    /// Whether a finding about the GPU with this UUID is in scope: findings about the source
    /// as a whole (no GPU) and about a GPU the sample no longer lists always are.
    pub fn shows_finding_on(&self, gpu_uuid: &str, sample: &Sample) -> bool {
        gpu_uuid.is_empty()
            || sample
                .gpus
                .iter()
                .find(|g| g.uuid == gpu_uuid)
                .is_none_or(|g| self.shows_gpu(g))
    }

    /// What the header says the screen is limited to; `None` when it shows everything.
    pub fn label(&self) -> Option<String> {
        let clean = |s: &str| crate::text::clean(&textlimit::excerpt(s, LABEL_MAX)).into_owned();
        let mut parts = Vec::new();
        match &self.gpus {
            GpuChoice::All => {}
            GpuChoice::Named(refs) => {
                let names: Vec<String> = refs.iter().map(ToString::to_string).collect();
                parts.push(format!("GPU {}", clean(&names.join(","))));
            }
            GpuChoice::CudaVisible { visible, .. } if visible.trim().is_empty() => {
                parts.push("CUDA_VISIBLE_DEVICES= (no GPU)".to_string());
            }
            GpuChoice::CudaVisible { visible, .. } => {
                parts.push(format!("CUDA_VISIBLE_DEVICES={}", clean(visible)));
            }
        }
        if let Some(u) = &self.user {
            parts.push(format!("user {}", clean(u)));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// `--gpu LIST`: the GPUs it names here, and what it names that is not here.
fn named(refs: &[GpuRef], sample: &Sample) -> (Option<Vec<u32>>, Option<String>) {
    let devices = gpuref::devices(sample);
    let mut shown = Vec::new();
    let mut problems = Vec::new();
    for r in refs {
        match gpuref::resolve("--gpu", r, &devices, "here") {
            Ok(d) => shown.extend(d.index),
            Err(e) => problems.push(e),
        }
    }
    shown.sort_unstable();
    shown.dedup();
    (
        Some(shown),
        (!problems.is_empty()).then(|| problems.join("; ")),
    )
}

/// `--only-visible`: the GPUs `visible` names as CUDA reads it (a MIG instance names the GPU
/// it is on), and where CUDA would stop reading it.
fn cuda_visible(
    visible: &str,
    order: Option<&str>,
    sample: &Sample,
) -> (Option<Vec<u32>>, Option<String>) {
    let views: Vec<GpuView> = sample
        .gpus
        .iter()
        .map(|g| GpuView {
            index: g.index,
            uuid: g.uuid.clone(),
            pci_bus_id: g.pci_bus_id.clone(),
            name: g.name.clone().unwrap_or_default(),
            total: 0,
            used: 0,
            free: 0,
            processes: Vec::new(),
        })
        .collect();
    let ordered = crate::triage::cuda_order(order, &views);
    let named = crate::triage::cuda_visible(visible, ordered.as_deref(), &views);
    let devices = gpuref::devices(sample);
    let mut shown = Vec::new();
    let mut problem = None;
    for d in &named {
        match d {
            CudaDevice::Gpu(i) => shown.push(*i),
            CudaDevice::Mig(entry) => {
                // `MIG-<uuid>`, or the old `MIG-GPU-<uuid>/<gi>/<ci>`: the GPU it is on.
                let wanted = entry
                    .strip_prefix("MIG-")
                    .filter(|rest| rest.starts_with("GPU-"))
                    .map_or(*entry, |rest| rest.split('/').next().unwrap_or(rest));
                match wanted
                    .parse::<GpuRef>()
                    .and_then(|r| gpuref::resolve("CUDA_VISIBLE_DEVICES", &r, &devices, "here"))
                {
                    Ok(dev) => shown.extend(dev.index),
                    Err(e) => {
                        problem.get_or_insert(e);
                    }
                }
            }
        }
    }
    let entries: Vec<&str> = visible
        .split(',')
        .map(str::trim)
        .take_while(|e| !e.is_empty())
        .collect();
    if problem.is_none()
        && let Some(stop) = entries.get(named.len())
    {
        let numbering = if ordered.is_none() && stop.bytes().all(|b| b.is_ascii_digit()) {
            ": with GPUs of different models, CUDA's numbering is not knowable here (set \
             CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID)"
        } else {
            ": it is not one GPU here, or it repeats one"
        };
        problem = Some(format!(
            "CUDA_VISIBLE_DEVICES: CUDA reads no further than '{}'{numbering}",
            textlimit::excerpt(stop, textlimit::QUOTE_MAX)
        ));
    }
    shown.sort_unstable();
    shown.dedup();
    (Some(shown), problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, HostProc, MigDeviceSample, ProcKind};

    fn sample() -> Sample {
        let mut gpus: Vec<GpuSample> = (0..4)
            .map(|i| {
                let mut g = GpuSample::empty(i, format!("GPU-{i}{i}{i}{i}aaaa-0000"));
                g.name = Some("NVIDIA H200".into());
                g.pci_bus_id = Some(format!("00000000:{:02X}:00.0", 0x18 + i));
                g
            })
            .collect();
        gpus[2].mig_devices.push(MigDeviceSample {
            index: 0,
            uuid: Some("MIG-5f00aa11-0000".into()),
            gpu_instance: Some(1),
            compute_instance: Some(0),
            memory: None,
        });
        Sample {
            taken_at: 0.0,
            gpus,
            errors: Vec::new(),
            collect_seconds: 0.0,
        }
    }

    fn shown(scope: &mut ViewScope) -> (Vec<u32>, Option<String>) {
        let s = sample();
        let problem = scope.resolve(&s);
        let gpus = s
            .gpus
            .iter()
            .filter(|g| scope.shows_gpu(g))
            .map(|g| g.index)
            .collect();
        (gpus, problem)
    }

    fn visible(v: &str, order: Option<&str>) -> ViewScope {
        ViewScope::new(
            GpuChoice::CudaVisible {
                visible: v.into(),
                order: order.map(Into::into),
            },
            None,
        )
    }

    #[test]
    fn gpu_list_names_gpus_by_index_uuid_or_mig_device() {
        let refs = |t: &[&str]| GpuChoice::Named(t.iter().map(|r| r.parse().unwrap()).collect());
        let mut s = ViewScope::new(refs(&["3", "GPU-1111", "MIG-5f"]), None);
        assert_eq!(shown(&mut s), (vec![1, 2, 3], None));
        assert_eq!(s.label().as_deref(), Some("GPU 3,GPU-1111,MIG-5f"));
        let mut s = ViewScope::new(refs(&["1", "7"]), None);
        let (gpus, problem) = shown(&mut s);
        assert_eq!(gpus, [1]);
        assert!(problem.unwrap().contains("--gpu '7' is not a GPU here"));
        assert_eq!(shown(&mut s).1, None, "a problem is said once");
        let mut all = ViewScope::default();
        assert_eq!(shown(&mut all), (vec![0, 1, 2, 3], None));
        assert_eq!(all.label(), None);
    }

    #[test]
    fn only_visible_reads_cuda_visible_devices_as_cuda_does() {
        assert_eq!(shown(&mut visible("2,0", None)).0, [0, 2]);
        assert_eq!(shown(&mut visible("GPU-3333", None)).0, [3]);
        assert_eq!(shown(&mut visible("MIG-5f00aa11-0000", None)).0, [2]);
        assert_eq!(
            shown(&mut visible("MIG-GPU-1111aaaa-0000/1/0", None)).0,
            [1]
        );
        // Empty: no GPU, and the header says so.
        let mut none = visible("", None);
        assert_eq!(shown(&mut none), (vec![], None));
        assert_eq!(
            none.label().as_deref(),
            Some("CUDA_VISIBLE_DEVICES= (no GPU)")
        );
        // CUDA stops at the first entry that names no GPU here.
        let (gpus, problem) = shown(&mut visible("1,9,2", None));
        assert_eq!(gpus, [1]);
        assert!(problem.unwrap().contains("no further than '9'"));
        // By PCI bus id: here the same order as NVML's.
        assert_eq!(shown(&mut visible("3", Some("PCI_BUS_ID"))).0, [3]);
    }

    #[test]
    fn mixed_models_make_cuda_numbers_unknowable_but_not_uuids() {
        let mut s = sample();
        s.gpus[1].name = Some("NVIDIA A100".into());
        let mut scope = visible("0", None);
        let problem = scope.resolve(&s).unwrap();
        assert!(problem.contains("not knowable"), "{problem}");
        assert!(!s.gpus.iter().any(|g| scope.shows_gpu(g)));
        let mut scope = visible("GPU-1111", None);
        assert_eq!(scope.resolve(&s), None);
        assert!(scope.shows_gpu(&s.gpus[1]) && !scope.shows_gpu(&s.gpus[0]));
    }

    #[test]
    fn user_scopes_processes_and_labels_are_clean() {
        let scope = ViewScope::new(GpuChoice::All, Some("al\u{1b}[2Jice".into()));
        let mut p = ProcSample {
            pid: 1,
            kind: ProcKind::Compute,
            used_bytes: None,
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: HostProc::default(),
        };
        p.host.user = Some("bob".into());
        assert!(!scope.shows_process(&p));
        let label = scope.label().unwrap();
        assert!(!label.contains('\u{1b}'), "{label:?}");
        let alice = ViewScope::new(GpuChoice::All, Some("alice".into()));
        p.host.user = Some("alice".into());
        assert!(alice.shows_process(&p));
        // Findings: about GPUs in scope, or about no GPU.
        let s = sample();
        let mut one = visible("1", None);
        one.resolve(&s);
        assert!(one.shows_finding_on(&s.gpus[1].uuid, &s));
        assert!(!one.shows_finding_on(&s.gpus[0].uuid, &s));
        assert!(one.shows_finding_on("", &s));
    }
}
