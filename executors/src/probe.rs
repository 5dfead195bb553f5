//! The hardware probe: what this machine offers, and the executor labels
//! that follow from it.
//!
//! Labels derived from a probe:
//!
//! | label | when |
//! |---|---|
//! | `cpu`, `cores=N`, `mem=G` | always; `N` usable cores, `G` GiB of memory (rounded down) |
//! | `host:NAME` | always |
//! | `site:NAME` | when a site is given, or `CONSTELLATION_SITE` is set |
//! | `gpu`, `gpu:MODEL`, `gpus=N` | when CUDA finds devices |
//!
//! Names are lowercased and characters that separate contexts (`, | > =`
//! and spaces) become `-`, so `NVIDIA H100 80GB HBM3` is `gpu:nvidia-h100-80gb-hbm3`.
//! [`Hardware::executor_context`] adds `anywhere` last, so a labelled
//! executor still runs activities that do not care where they run.

use std::fmt;

use constellation::{Context, ExecutorContext};
use serde::{Deserialize, Serialize};

/// The environment variable that names the site when none is given.
pub const SITE_VAR: &str = "CONSTELLATION_SITE";

/// One GPU as the driver describes it. Defined here, not in the `gpu`
/// module, so that a build without CUDA still has the probe's types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// The driver's device ordinal, as `CUDA_VISIBLE_DEVICES` counts.
    pub ordinal: usize,
    /// The marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Total device memory in bytes.
    pub memory_bytes: u64,
    /// Compute capability as (major, minor), e.g. (9, 0).
    pub compute_capability: (u32, u32),
}

impl GpuInfo {
    /// The executor label naming this GPU's model, e.g.
    /// `gpu:nvidia-h100-80gb-hbm3`.
    pub fn model_label(&self) -> String {
        format!("gpu:{}", label_name(&self.name))
    }
}

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hardware {
    /// The host name.
    pub hostname: String,
    /// Cores this process may use (affinity and cgroup limits applied).
    pub cores: usize,
    /// Memory in bytes: the machine's, or the cgroup limit if lower.
    pub memory_bytes: u64,
    /// GPUs CUDA reports; empty without a driver.
    pub gpus: Vec<GpuInfo>,
    /// Why no GPU was found, when none was: no driver, no devices, or no CUDA support built in.
    pub gpu_note: Option<String>,
    /// The site, if known.
    pub site: Option<String>,
}

impl Hardware {
    /// Probes this machine. `site` wins over `CONSTELLATION_SITE`.
    pub fn probe(site: Option<&str>) -> Hardware {
        let site = site
            .map(str::to_string)
            .or_else(|| std::env::var(SITE_VAR).ok())
            .filter(|s| !s.trim().is_empty());
        let (gpus, gpu_note) = probe_gpus();
        Hardware {
            hostname: hostname(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: memory_bytes(),
            gpus,
            gpu_note,
            site,
        }
    }

    /// The labels this hardware earns, most specific first.
    pub fn labels(&self) -> Vec<Context> {
        let mut labels = Vec::new();
        if let Some(first) = self.gpus.first() {
            labels.push(Context::new("gpu"));
            labels.push(Context::new(&first.model_label()));
            labels.push(Context::new("gpus").with_rank(self.gpus.len() as i64));
        }
        labels.push(Context::new("cpu"));
        labels.push(Context::new("cores").with_rank(self.cores as i64));
        labels.push(Context::new("mem").with_rank((self.memory_bytes >> 30) as i64));
        labels.push(Context::new(&format!(
            "host:{}",
            label_name(&self.hostname)
        )));
        if let Some(site) = &self.site {
            labels.push(Context::new(&format!("site:{}", label_name(site))));
        }
        labels
    }

    /// The executor context for this machine: user labels, then the
    /// probed ones unless `replace` is set, then `anywhere`.
    pub fn executor_context(&self, user: &[Context], replace: bool) -> ExecutorContext {
        let mut contexts: Vec<Context> = user.to_vec();
        if !replace {
            for label in self.labels() {
                if !contexts.iter().any(|c| c.label == label.label) {
                    contexts.push(label);
                }
            }
        }
        if !contexts.contains(&Context::anywhere()) {
            contexts.push(Context::anywhere());
        }
        ExecutorContext::new(contexts)
    }
}

impl fmt::Display for Hardware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "host    {}", self.hostname)?;
        writeln!(f, "site    {}", self.site.as_deref().unwrap_or("(none)"))?;
        writeln!(f, "cores   {}", self.cores)?;
        writeln!(
            f,
            "memory  {:.1} GiB",
            self.memory_bytes as f64 / (1u64 << 30) as f64
        )?;
        if self.gpus.is_empty() {
            let note = self.gpu_note.as_deref().unwrap_or("none found");
            writeln!(f, "gpus    none ({note})")?;
        }
        for gpu in &self.gpus {
            writeln!(
                f,
                "gpu {}   {} ({:.1} GiB)",
                gpu.ordinal,
                gpu.name,
                gpu.memory_bytes as f64 / (1u64 << 30) as f64
            )?;
        }
        let labels: Vec<String> = self.labels().iter().map(ToString::to_string).collect();
        write!(f, "labels  {}", labels.join(","))
    }
}

/// `text` as one label part: lowercase ASCII letters, digits, `.` and `_`,
/// with every run of other characters (spaces, the context separators
/// `, | > =`, `:`) turned into one `-`; `unknown` if nothing is left.
pub fn label_name(text: &str) -> String {
    let mut name = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    while name.ends_with('-') {
        name.pop();
    }
    if name.is_empty() {
        name.push_str("unknown");
    }
    name
}

#[cfg(feature = "cuda")]
fn probe_gpus() -> (Vec<GpuInfo>, Option<String>) {
    match crate::gpu::probe() {
        Ok(gpus) if gpus.is_empty() => (Vec::new(), Some("the CUDA driver sees no devices".into())),
        Ok(gpus) => (gpus, None),
        Err(error) => (Vec::new(), Some(error.to_string())),
    }
}

#[cfg(not(feature = "cuda"))]
fn probe_gpus() -> (Vec<GpuInfo>, Option<String>) {
    (
        Vec::new(),
        Some("built without the `cuda` feature".to_string()),
    )
}

/// This machine's host name, read once: the shell executor names it in
/// every result and in its stream files' names.
pub(crate) fn host_name() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(hostname)
}

/// This machine's host name, or `unknown`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // when the name fits, and we stop at the first NUL or the end.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match ok {
        true if end > 0 => String::from_utf8_lossy(&buf[..end]).into_owned(),
        _ => "unknown".to_string(),
    }
}

/// The machine's memory, or the cgroup's limit when that is lower, as a
/// batch job sees it.
fn memory_bytes() -> u64 {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo_total(&text))
        .unwrap_or(0);
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .find_map(|text| text.trim().parse::<u64>().ok());
    match cgroup {
        Some(limit) if limit > 0 && (machine == 0 || limit < machine) => limit,
        _ => machine,
    }
}

fn parse_meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Hardware {
        Hardware {
            hostname: "node042.cluster".into(),
            cores: 16,
            memory_bytes: 64 << 30,
            gpus: vec![GpuInfo {
                ordinal: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_bytes: 80 << 30,
                compute_capability: (9, 0),
            }],
            gpu_note: None,
            site: Some("VU Amsterdam".into()),
        }
    }

    #[test]
    fn labels_follow_from_the_hardware() {
        let labels: Vec<String> = sample().labels().iter().map(ToString::to_string).collect();
        assert_eq!(
            labels,
            [
                "gpu",
                "gpu:nvidia-h100-80gb-hbm3",
                "gpus=1",
                "cpu",
                "cores=16",
                "mem=64",
                "host:node042.cluster",
                "site:vu-amsterdam"
            ]
        );
    }

    #[test]
    fn no_gpu_means_no_gpu_label() {
        let hardware = Hardware {
            gpus: vec![],
            ..sample()
        };
        assert!(hardware
            .labels()
            .iter()
            .all(|c| !c.label.name().starts_with("gpu")));
    }

    #[test]
    fn user_labels_come_first_or_replace_the_probed_ones() {
        let user = vec![
            Context::new("fast-disk"),
            Context::new("cores").with_rank(4),
        ];
        let added = sample().executor_context(&user, false).to_string();
        assert!(added.starts_with("fast-disk > cores=4 > gpu"), "{added}");
        assert!(!added.contains("cores=16"), "{added}");
        assert!(added.ends_with("> anywhere"), "{added}");
        let replaced = sample().executor_context(&user, true).to_string();
        assert_eq!(replaced, "fast-disk > cores=4 > anywhere");
    }

    #[test]
    fn the_real_probe_never_panics_and_finds_a_cpu() {
        let hardware = Hardware::probe(Some("test-site"));
        assert!(hardware.cores >= 1);
        assert!(hardware.memory_bytes > 0);
        assert!(!hardware.hostname.is_empty());
        assert!(hardware.gpus.is_empty() == hardware.gpu_note.is_some());
        let text = hardware.to_string();
        assert!(text.contains("site:test-site"), "{text}");
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        assert_eq!(
            parse_meminfo_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(parse_meminfo_total("garbage"), None);
    }

    #[test]
    fn names_become_labels() {
        assert_eq!(label_name(" A100, SXM|4 "), "a100-sxm-4");
        assert_eq!(label_name("node-7.das6"), "node-7.das6");
        assert_eq!(label_name("::"), "unknown");
    }
}
