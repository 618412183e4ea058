//! A GPU as a person names it (`snapshot --gpu`, `run --gpu`, `history who --gpu`, the
//! history API's `?gpu=`): an NVML index, a full UUID (`GPU-…`, or `MIG-…` for a MIG device),
//! or a prefix of one that names a single device. One parser and one resolver, so every
//! command accepts the same names and refuses them with the same errors.

use std::fmt;

/// The longest name accepted: a UUID is 40 characters, an old-style MIG name
/// (`MIG-GPU-…/gi/ci`) a few more.
const MAX_LEN: usize = 96;

/// At most this many GPUs are listed in an error.
const LIST_MAX: usize = 16;

/// What the user wrote, checked but not yet resolved against the GPUs there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRef {
    /// An NVML index.
    Index(u32),
    /// A UUID or a prefix of one, as written (matched without regard to ASCII case).
    Uuid(String),
}

impl fmt::Display for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Uuid(u) => f.write_str(u),
        }
    }
}

const EXPECTED: &str = "expected an NVML index, a UUID (GPU-… or MIG-…) or a unique prefix of one";

impl std::str::FromStr for GpuRef {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let t = text.trim();
        let quoted = || textlimit::excerpt(t, textlimit::QUOTE_MAX);
        if t.is_empty() {
            return Err(format!("the GPU is empty ({EXPECTED})"));
        }
        if t.bytes().all(|b| b.is_ascii_digit()) {
            return t.parse::<u32>().map(Self::Index).map_err(|_| {
                format!(
                    "'{}' is not a GPU index (expected a whole number up to {})",
                    quoted(),
                    u32::MAX
                )
            });
        }
        if t.len() > MAX_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("'{}' is not a GPU name ({EXPECTED})", quoted()));
        }
        Ok(Self::Uuid(t.to_string()))
    }
}

/// A device that can be named: a GPU, or a MIG device on one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device<'a> {
    /// The NVML index of the GPU (of the parent GPU for a MIG device); `None` where the
    /// caller has no single index for it.
    pub index: Option<u32>,
    pub uuid: &'a str,
    /// For a MIG device, the UUID of its GPU.
    pub parent: Option<&'a str>,
}

impl fmt::Display for Device<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A UUID from a history file is outside input: quoted short.
        let uuid = textlimit::excerpt(self.uuid, MAX_LEN);
        match (self.index, self.parent) {
            (Some(i), None) => write!(f, "{i} ({uuid})"),
            (None, None) => f.write_str(&uuid),
            (Some(i), Some(_)) => write!(f, "{uuid} on GPU {i}"),
            (None, Some(parent)) => {
                write!(f, "{uuid} on GPU {}", textlimit::excerpt(parent, MAX_LEN))
            }
        }
    }
}

/// The GPUs of a sample, each followed by its MIG devices that have a UUID.
pub fn devices(sample: &crate::model::Sample) -> Vec<Device<'_>> {
    let mut out = Vec::new();
    for g in &sample.gpus {
        out.push(Device {
            index: Some(g.index),
            uuid: &g.uuid,
            parent: None,
        });
        out.extend(g.mig_devices.iter().filter_map(|m| {
            m.uuid.as_deref().map(|uuid| Device {
                index: Some(g.index),
                uuid,
                parent: Some(&g.uuid),
            })
        }));
    }
    out
}

/// The device `wanted` names among `devices`, or an error that says why, naming `flag` (e.g.
/// `--gpu`) and listing the GPUs `place` (e.g. "here", "in the history").
///
/// An index names the GPU with that index (never a MIG device). A UUID names the device with
/// that UUID; a prefix names the one device whose UUID starts with it. Case is ignored (NVML
/// writes lower-case hex; people copy upper-case from other tools).
pub fn resolve<'a>(
    flag: &str,
    wanted: &GpuRef,
    devices: &[Device<'a>],
    place: &str,
) -> Result<Device<'a>, String> {
    let found = match wanted {
        GpuRef::Index(i) => devices
            .iter()
            .find(|d| d.parent.is_none() && d.index == Some(*i))
            .copied(),
        GpuRef::Uuid(text) => {
            let starts = |d: &&Device<'_>| {
                d.uuid
                    .get(..text.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(text))
            };
            let hits: Vec<Device<'a>> = devices.iter().filter(starts).copied().collect();
            match hits.as_slice() {
                [] => None,
                [one] => Some(*one),
                many => {
                    if let Some(exact) = many.iter().find(|d| d.uuid.len() == text.len()) {
                        Some(*exact)
                    } else {
                        return Err(format!(
                            "{flag} '{wanted}' matches {} devices ({}): give more of the UUID",
                            many.len(),
                            list(many)
                        ));
                    }
                }
            }
        }
    };
    found.ok_or_else(|| {
        let gpus: Vec<Device<'_>> = devices.to_vec();
        format!(
            "{flag} '{wanted}' is not a GPU {place} ({EXPECTED}; {})",
            if gpus.is_empty() {
                "there are none".to_string()
            } else {
                format!("GPUs: {}", list(&gpus))
            }
        )
    })
}

fn list(devices: &[Device<'_>]) -> String {
    let mut out: Vec<String> = devices
        .iter()
        .take(LIST_MAX)
        .map(ToString::to_string)
        .collect();
    if devices.len() > LIST_MAX {
        out.push(format!("and {} more", devices.len() - LIST_MAX));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-ab12cd34-0000-0000-0000-000000000001";
    const B: &str = "GPU-ab99cd34-0000-0000-0000-000000000002";
    const M: &str = "MIG-5f00aa11-0000-0000-0000-000000000003";

    fn devs() -> Vec<Device<'static>> {
        vec![
            Device {
                index: Some(0),
                uuid: A,
                parent: None,
            },
            Device {
                index: Some(1),
                uuid: B,
                parent: None,
            },
            Device {
                index: Some(1),
                uuid: M,
                parent: Some(B),
            },
        ]
    }

    fn get(text: &str) -> Result<Device<'static>, String> {
        let r: GpuRef = text.parse()?;
        resolve("--gpu", &r, &devs(), "here")
    }

    #[test]
    fn names_resolve() {
        assert_eq!(get("1").unwrap().uuid, B);
        assert_eq!(get(" 0 ").unwrap().uuid, A);
        assert_eq!(get(A).unwrap().uuid, A);
        assert_eq!(get("GPU-AB12").unwrap().uuid, A, "case is ignored");
        assert_eq!(get("gpu-ab99").unwrap().uuid, B);
        let m = get("MIG-5f").unwrap();
        assert_eq!((m.uuid, m.parent, m.index), (M, Some(B), Some(1)));
    }

    #[test]
    fn ambiguity_and_absence_list_the_gpus() {
        let e = get("GPU-ab").unwrap_err();
        assert!(e.contains("matches 2 devices"), "{e}");
        assert!(e.contains(A) && e.contains(B), "{e}");
        let e = get("7").unwrap_err();
        assert!(e.contains("--gpu '7' is not a GPU here"), "{e}");
        assert!(e.contains(&format!("0 ({A})")), "{e}");
        assert!(e.contains(&format!("{M} on GPU 1")), "{e}");
        let e = get("GPU-ffff").unwrap_err();
        assert!(e.contains("is not a GPU here"), "{e}");
        let none = resolve("--gpu", &GpuRef::Index(0), &[], "in the history").unwrap_err();
        assert!(
            none.contains("in the history") && none.contains("none"),
            "{none}"
        );
    }

    #[test]
    fn hostile_names_are_refused_with_what_was_expected() {
        for bad in [
            "",
            "  ",
            "99999999999",
            "GPU-\u{1b}[2J",
            &"a".repeat(500),
            "GPU a",
        ] {
            let e = bad.parse::<GpuRef>().unwrap_err();
            assert!(e.contains("expected"), "{bad:?}: {e}");
            assert!(e.len() < 400, "{bad:?}: the quote is bounded");
        }
    }

    #[test]
    fn an_index_never_names_a_mig_device_and_many_gpus_are_bounded() {
        let uuids: Vec<String> = (0..40).map(|i| format!("GPU-{i:04}")).collect();
        let many: Vec<Device<'_>> = uuids
            .iter()
            .enumerate()
            .map(|(i, u)| Device {
                index: Some(i as u32),
                uuid: u,
                parent: None,
            })
            .collect();
        let e = resolve("--gpu", &GpuRef::Index(99), &many, "here").unwrap_err();
        assert!(e.contains("and 24 more"), "{e}");
        // A hostile file's UUIDs are quoted short.
        let huge = format!("GPU-{}", "f".repeat(100_000));
        let hostile: Vec<Device<'_>> = (0..20)
            .map(|i| Device {
                index: Some(i),
                uuid: &huge,
                parent: None,
            })
            .collect();
        let e = resolve("--gpu", &GpuRef::Index(99), &hostile, "here").unwrap_err();
        assert!(e.len() < 4_000, "{} bytes", e.len());
        let only_mig = [Device {
            index: Some(0),
            uuid: M,
            parent: Some(A),
        }];
        assert!(resolve("--gpu", &GpuRef::Index(0), &only_mig, "here").is_err());
    }
}
