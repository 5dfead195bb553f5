//! Submission backoff: a sans-IO governor per backend.
//!
//! When submissions fail (scheduler down, account over quota, bad
//! arguments), retrying at once just hammers the scheduler and fills the
//! allocation root with failed directories. After each consecutive failure
//! the governor makes submitters wait: 5 s, then doubling up to 10 min.
//! After 5 consecutive failures the backend is *paused* until someone calls
//! [`Governor::resume`] (a human who fixed the cause) or a submission
//! succeeds.
//!
//! The state machine takes the time as an argument (UNIX seconds) and does
//! no I/O, so it is tested step by step with explicit times; [`load`] and
//! [`Governor::save`] keep it in `<root>/backoff-<backend>.json` so that
//! separate CLI invocations share it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::glidein::alloc::{write_atomic, AllocError};
use crate::glidein::spec::Backend;

/// Tunables of the governor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Wait after the first failure, in seconds.
    pub initial_delay: f64,
    /// Longest wait, in seconds.
    pub max_delay: f64,
    /// Consecutive failures after which the backend is paused.
    pub pause_after: u32,
}

impl Default for Policy {
    /// 5 s doubling to 10 min; pause after 5 consecutive failures.
    fn default() -> Self {
        Self {
            initial_delay: 5.0,
            max_delay: 600.0,
            pause_after: 5,
        }
    }
}

impl Policy {
    /// The wait after `failures` consecutive failures (1 → initial delay).
    pub fn delay(&self, failures: u32) -> f64 {
        if failures == 0 {
            return 0.0;
        }
        let doublings = (failures - 1).min(63) as i32;
        (self.initial_delay * 2f64.powi(doublings)).min(self.max_delay)
    }
}

/// Whether a submission may go ahead now.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Submit now.
    Open,
    /// Wait until `until` (UNIX seconds), `secs` from now.
    Wait {
        /// When submission is allowed again.
        until: f64,
        /// Seconds left to wait.
        secs: f64,
    },
    /// Paused until resumed; `reason` says why.
    Paused {
        /// Human-readable reason, with the last error.
        reason: String,
    },
}

/// Backoff state of one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Governor {
    /// The backend this governs.
    pub backend: Backend,
    /// Failures since the last success or resume.
    pub consecutive_failures: u32,
    /// Earliest time of the next submission (UNIX seconds), if waiting.
    pub retry_at: Option<f64>,
    /// Set once `pause_after` consecutive failures happened.
    pub paused: bool,
    /// The error of the most recent failure.
    pub last_error: Option<String>,
    /// Tunables (not persisted: the code's defaults apply to every run).
    #[serde(skip)]
    pub policy: Policy,
}

impl Governor {
    /// A fresh governor: submissions allowed.
    pub fn new(backend: Backend) -> Self {
        Self {
            backend,
            consecutive_failures: 0,
            retry_at: None,
            paused: false,
            last_error: None,
            policy: Policy::default(),
        }
    }

    /// Whether a submission may go ahead at `now` (UNIX seconds).
    pub fn next_allowed(&self, now: f64) -> Gate {
        if self.paused {
            return Gate::Paused {
                reason: self.pause_reason(),
            };
        }
        match self.retry_at {
            // If the clock went backwards, never wait longer than max_delay.
            Some(until) if until > now => Gate::Wait {
                until,
                secs: (until - now).min(self.policy.max_delay),
            },
            _ => Gate::Open,
        }
    }

    /// Why the backend is paused (meaningful only when it is).
    pub fn pause_reason(&self) -> String {
        format!(
            "{} submissions are paused after {} consecutive failures; last error: {}",
            self.backend,
            self.consecutive_failures,
            self.last_error.as_deref().unwrap_or("(none recorded)")
        )
    }

    /// Records a failed submission at `now`.
    pub fn record_failure(&mut self, now: f64, error: &str) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.last_error = Some(error.trim().to_string());
        self.retry_at = Some(now + self.policy.delay(self.consecutive_failures));
        if self.consecutive_failures >= self.policy.pause_after {
            self.paused = true;
        }
    }

    /// Records a successful submission: everything is forgiven.
    pub fn record_success(&mut self) {
        self.reset();
    }

    /// Lifts a pause (and any wait): the user says the cause is fixed. The
    /// failure count starts over, so a still-broken backend gets the full
    /// sequence of short retries again before pausing.
    pub fn resume(&mut self) {
        self.reset();
    }

    fn reset(&mut self) {
        self.consecutive_failures = 0;
        self.retry_at = None;
        self.paused = false;
        self.last_error = None;
    }

    /// Writes the state to `<root>/backoff-<backend>.json` atomically.
    pub fn save(&self, root: &Path) -> Result<(), BackoffError> {
        fs::create_dir_all(root).map_err(|source| AllocError::Io {
            action: "create directory",
            path: root.to_path_buf(),
            source,
        })?;
        let mut json = serde_json::to_vec_pretty(self).expect("governor serializes");
        json.push(b'\n');
        write_atomic(&path(root, self.backend), &json)?;
        Ok(())
    }
}

/// Problems reading or writing the backoff file.
#[derive(Debug, Error)]
pub enum BackoffError {
    /// The file exists but does not parse.
    #[error("backoff state {} is corrupt ({source}); delete it to reset submission backoff for this backend", path.display())]
    Corrupt {
        /// The backoff file.
        path: PathBuf,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// The file is for another backend (copied or renamed by hand).
    #[error("backoff state {} is for backend {found}, not {expected}; delete it to reset", path.display())]
    WrongBackend {
        /// The backoff file.
        path: PathBuf,
        /// Backend we wanted.
        expected: Backend,
        /// Backend in the file.
        found: Backend,
    },
    /// Reading or writing failed.
    #[error(transparent)]
    Io(#[from] AllocError),
}

/// The backoff file of `backend` under `root`.
pub fn path(root: &Path, backend: Backend) -> PathBuf {
    root.join(format!("backoff-{}.json", backend.name()))
}

/// Loads the governor of `backend`; a missing file means no backoff.
pub fn load(root: &Path, backend: Backend) -> Result<Governor, BackoffError> {
    let path = path(root, backend);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Governor::new(backend)),
        Err(source) => {
            return Err(AllocError::Io {
                action: "read",
                path,
                source,
            }
            .into())
        }
    };
    let gov: Governor = serde_json::from_slice(&bytes).map_err(|source| BackoffError::Corrupt {
        path: path.clone(),
        source,
    })?;
    if gov.backend != backend {
        return Err(BackoffError::WrongBackend {
            path,
            expected: backend,
            found: gov.backend,
        });
    }
    Ok(gov)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glidein::alloc::testing::TempDir;

    const T0: f64 = 1_700_000_000.0;

    fn wait_secs(gate: Gate) -> f64 {
        match gate {
            Gate::Wait { secs, .. } => secs,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn fresh_governor_is_open() {
        assert_eq!(Governor::new(Backend::Slurm).next_allowed(T0), Gate::Open);
    }

    #[test]
    fn delays_double_from_five_seconds_to_ten_minutes() {
        let p = Policy::default();
        let delays: Vec<f64> = (0..=10).map(|n| p.delay(n)).collect();
        assert_eq!(
            delays,
            [0.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0, 600.0, 600.0]
        );
        assert_eq!(p.delay(u32::MAX), 600.0);
    }

    #[test]
    fn step_by_step_to_pause_and_back() {
        let mut g = Governor::new(Backend::Slurm);
        // 1st failure: wait 5 s.
        g.record_failure(T0, "sbatch: error: Unable to contact slurm controller");
        assert_eq!(wait_secs(g.next_allowed(T0)), 5.0);
        assert_eq!(wait_secs(g.next_allowed(T0 + 4.0)), 1.0);
        assert_eq!(g.next_allowed(T0 + 5.0), Gate::Open);
        // 2nd failure at T0+5: wait 10 s.
        g.record_failure(T0 + 5.0, "again");
        assert_eq!(
            g.next_allowed(T0 + 5.0),
            Gate::Wait {
                until: T0 + 15.0,
                secs: 10.0
            }
        );
        assert_eq!(g.next_allowed(T0 + 15.0), Gate::Open);
        // 3rd and 4th: 20 s, 40 s.
        g.record_failure(T0 + 15.0, "again");
        assert_eq!(wait_secs(g.next_allowed(T0 + 15.0)), 20.0);
        g.record_failure(T0 + 35.0, "again");
        assert_eq!(wait_secs(g.next_allowed(T0 + 35.0)), 40.0);
        assert!(!g.paused);
        // 5th: paused, whatever the time.
        g.record_failure(T0 + 75.0, "Invalid account");
        let Gate::Paused { reason } = g.next_allowed(T0 + 10_000.0) else {
            panic!("should be paused");
        };
        assert!(reason.contains("slurm submissions are paused after 5 consecutive failures"));
        assert!(reason.contains("last error: Invalid account"), "{reason}");
        // Resume: open at once, count starts over.
        g.resume();
        assert_eq!(g.next_allowed(T0 + 76.0), Gate::Open);
        assert_eq!(g.consecutive_failures, 0);
        g.record_failure(T0 + 80.0, "still broken");
        assert_eq!(wait_secs(g.next_allowed(T0 + 80.0)), 5.0);
    }

    #[test]
    fn success_resets_everything() {
        let mut g = Governor::new(Backend::Pbs);
        for i in 0..4 {
            g.record_failure(T0 + f64::from(i) * 100.0, "x");
        }
        g.record_success();
        assert_eq!(g, Governor::new(Backend::Pbs));
        // Even a pause is lifted by a success (e.g. a manual submit).
        for _ in 0..5 {
            g.record_failure(T0, "x");
        }
        assert!(g.paused);
        g.record_success();
        assert_eq!(g.next_allowed(T0), Gate::Open);
    }

    #[test]
    fn custom_policy_reaches_the_cap() {
        let mut g = Governor::new(Backend::Ssh);
        g.policy.pause_after = 100;
        for _ in 0..9 {
            g.record_failure(T0, "x");
        }
        assert_eq!(wait_secs(g.next_allowed(T0)), 600.0);
    }

    #[test]
    fn clock_going_backwards_waits_at_most_max_delay() {
        let mut g = Governor::new(Backend::Local);
        g.record_failure(T0, "x");
        assert_eq!(wait_secs(g.next_allowed(T0 - 86_400.0)), 600.0);
    }

    #[test]
    fn persisted_between_invocations() {
        let tmp = TempDir::new("backoff");
        let root = tmp.path().join("allocations");
        assert_eq!(
            load(&root, Backend::Slurm).unwrap(),
            Governor::new(Backend::Slurm)
        );
        let mut g = Governor::new(Backend::Slurm);
        g.record_failure(T0, "boom");
        g.save(&root).unwrap();
        assert!(root.join("backoff-slurm.json").is_file());
        let loaded = load(&root, Backend::Slurm).unwrap();
        assert_eq!(loaded, g);
        assert_eq!(wait_secs(loaded.next_allowed(T0 + 1.0)), 4.0);
        // Other backends are independent.
        assert_eq!(
            load(&root, Backend::Pbs).unwrap().next_allowed(T0),
            Gate::Open
        );
    }

    #[test]
    fn corrupt_or_misplaced_files_are_explained() {
        let tmp = TempDir::new("backoff-corrupt");
        let root = tmp.path();
        fs::write(path(root, Backend::Pbs), "{not json").unwrap();
        let msg = load(root, Backend::Pbs).unwrap_err().to_string();
        assert!(
            msg.contains("backoff-pbs.json") && msg.contains("delete it"),
            "{msg}"
        );
        Governor::new(Backend::Ssh).save(root).unwrap();
        fs::rename(path(root, Backend::Ssh), path(root, Backend::Local)).unwrap();
        let msg = load(root, Backend::Local).unwrap_err().to_string();
        assert!(msg.contains("for backend ssh, not local"), "{msg}");
    }
}
