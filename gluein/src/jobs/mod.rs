//! The job service of `pool start`: graphs submitted to the pool run as
//! jobs, each in a runner process of its own on the pool node's machine,
//! so that the submitter may log out.
//!
//! - [`store`]: the job journal, `jobs.db` in the pool's state directory.
//! - [`supervisor`]: answers the pool's service requests ([`crate::service`])
//!   and starts, watches, cancels and restarts the runners.
//!
//! A job's runner is `constellation run --pool` itself, started with the
//! job's own run journal (`STATE/jobs/ID/journal.db`): everything a run
//! does (journal, resume, signals, reconnecting to the pool node) is the
//! run's, not copied here. The runner is in a process group of its own,
//! so Ctrl-C in the pool's terminal does not reach it, and it waits for a
//! pool node that died (`--reconnect`): a pool node killed and started
//! again on the same state directory finds its jobs' runners still
//! running, and waits for them, or resumes the jobs whose runner is gone.
//!
//! Each job has a directory, `STATE/jobs/ID/` (mode 0700), with:
//! - `graph.toml` (or `graph.json`), `sweeps/` and `contexts.toml`: the
//!   graph, its sweep files (named by [`graph::kept_sweep_name`]) and the
//!   context file as submitted, mode 0600: what the runner runs, so that
//!   a file edited after `submit` does not change the job;
//! - `journal.db`: the run journal (`constellation report` reads it),
//!   whose sources are the kept files' digests, not their text again;
//! - `runner.log`: what its runners printed, each start headed by a line;
//! - `progress.json`: the runner's counts while it runs.

pub mod store;
pub mod supervisor;

pub use store::{JobRow, JobStore};
pub use supervisor::{JobService, ServiceConfig};
