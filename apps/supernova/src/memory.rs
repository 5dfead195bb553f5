//! How much memory this process may still allocate for one image.
//!
//! A FITS header says how many pixels follow, and a file of that length
//! proves nothing: a sparse file of 3.6 GB takes a few kilobytes of disk.
//! Before an image's pixels are allocated, their size is checked against
//! the smallest of a settable maximum ([`set_max_image_bytes`], the
//! command's `--max-image-mib`), the memory the kernel reports available,
//! and what the address-space and data-segment limits (`ulimit -v`,
//! `ulimit -d`) leave this process. Whatever still fails to allocate is
//! caught by a fallible reservation, so one image never aborts the process.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The default maximum for one image's pixels in memory, in MiB: 2 GiB
/// of `f32`, an image of about 23,000 × 23,000 pixels.
pub const DEFAULT_MAX_IMAGE_MIB: u64 = 2048;

static MAX_IMAGE_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_IMAGE_MIB << 20);

/// Sets the most bytes of pixels one image may take in memory, for every
/// image this process reads from now on.
pub fn set_max_image_bytes(bytes: u64) {
    MAX_IMAGE_BYTES.store(bytes, Ordering::Relaxed);
}

/// The most bytes of pixels one image may take in memory, as set.
pub fn max_image_bytes() -> u64 {
    MAX_IMAGE_BYTES.load(Ordering::Relaxed)
}

/// Which bound an [`AllocationLimit`] comes from; each has its own fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// The settable maximum ([`set_max_image_bytes`]).
    Setting,
    /// `MemAvailable` in `/proc/meminfo`.
    Available,
    /// `RLIMIT_AS` less the address space already in use.
    AddressSpace,
    /// `RLIMIT_DATA` less the data segment already in use.
    DataSegment,
}

/// The most bytes this process may allocate now, and what sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationLimit {
    /// Bytes.
    pub bytes: u64,
    /// The bound that gives the smallest number.
    pub source: LimitSource,
}

impl fmt::Display for AllocationLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.bytes;
        match self.source {
            LimitSource::Setting => write!(
                f,
                "the limit of {bytes} bytes per image ({} MiB); raise it with --max-image-mib \
                 or SUPERNOVA_MAX_IMAGE_MIB if the image is genuine",
                bytes >> 20
            ),
            LimitSource::Available => write!(
                f,
                "the {bytes} bytes of memory available on this machine (MemAvailable in \
                 /proc/meminfo); free memory or run on a machine with more"
            ),
            LimitSource::AddressSpace => write!(
                f,
                "the {bytes} bytes the address-space limit (ulimit -v) leaves this process; \
                 raise that limit"
            ),
            LimitSource::DataSegment => write!(
                f,
                "the {bytes} bytes the data-segment limit (ulimit -d) leaves this process; \
                 raise that limit"
            ),
        }
    }
}

/// The smallest of the bounds on what this process may allocate now. A
/// bound that cannot be read (no `/proc`, say) is left out; the setting
/// always counts.
pub fn allocation_limit() -> AllocationLimit {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let headroom = |resource, used_key| {
        let limit = soft_rlimit(resource)?;
        let used = kib_field(&status, used_key).unwrap_or(0);
        Some(limit.saturating_sub(used))
    };
    [
        (LimitSource::Setting, Some(max_image_bytes())),
        (LimitSource::Available, kib_field(&meminfo, "MemAvailable:")),
        (
            LimitSource::AddressSpace,
            headroom(libc::RLIMIT_AS, "VmSize:"),
        ),
        (
            LimitSource::DataSegment,
            headroom(libc::RLIMIT_DATA, "VmData:"),
        ),
    ]
    .into_iter()
    .filter_map(|(source, bytes)| bytes.map(|bytes| AllocationLimit { bytes, source }))
    .min_by_key(|limit| limit.bytes)
    .expect("the setting is always a bound")
}

/// The soft limit on `resource` in bytes, or `None` where it is unlimited
/// or cannot be read.
fn soft_rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a pointer valid for the call.
    let read = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
    (read && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The value of a `Key:   123 kB` line of a `/proc` file, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find_map(|line| line.strip_prefix(key))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_read_in_bytes() {
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:    2000 kB\n";
        assert_eq!(kib_field(meminfo, "MemAvailable:"), Some(2_048_000));
        assert_eq!(kib_field(meminfo, "MemFree:"), None);
        assert_eq!(kib_field("VmSize:\tgarbage kB\n", "VmSize:"), None);
    }

    #[test]
    fn the_limit_is_never_above_the_setting_or_the_memory_available() {
        let limit = allocation_limit();
        assert!(limit.bytes <= max_image_bytes(), "{limit:?}");
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let available = kib_field(&meminfo, "MemAvailable:").unwrap();
        // Available memory moves between the two reads; a margin of 1 GiB
        // covers a busy machine.
        assert!(limit.bytes <= available + (1 << 30), "{limit:?}");
    }

    #[test]
    fn each_source_names_its_fix() {
        let text = |source| {
            AllocationLimit {
                bytes: 3 << 20,
                source,
            }
            .to_string()
        };
        assert!(text(LimitSource::Setting).contains("--max-image-mib"));
        assert!(text(LimitSource::Setting).contains("3145728 bytes"));
        assert!(text(LimitSource::Available).contains("MemAvailable"));
        assert!(text(LimitSource::AddressSpace).contains("ulimit -v"));
        assert!(text(LimitSource::DataSegment).contains("ulimit -d"));
    }
}
