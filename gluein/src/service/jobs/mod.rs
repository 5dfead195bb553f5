//! The job service of `pool start`: graphs submitted to the pool run as
//! jobs, each in a runner process of its own on the pool node's machine,
//! so that the submitter may log out.
//!
//! - [`store`]: the job journal, `jobs.db` in the pool's state directory.
//! - [`supervisor`]: the job service itself ([`JobService`]): its state,
//!   its lock on the state directory and its supervisor thread.
//! - `decide`: its decisions apart from their effects: what becomes of a
//!   job whose runner ended, what a cancel does (unit-tested without
//!   processes).
//! - `handlers`: the answers to the pool's service requests
//!   ([`crate::service`]): submit, job, cancel.
//! - `supervise`: the tick: reaps runners, settles their jobs, starts
//!   queued ones. `recovery`: the jobs a previous pool node left running.
//! - `runner`: the effects on a job's runner process: starting and
//!   signalling it, `/proc`, its log.
//! - `intake`: a submission checked and its files kept.
//! - `counts`: what is read of a job's run journal and progress file.
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

mod counts;
mod decide;
mod handlers;
mod intake;
mod recovery;
mod runner;
pub mod store;
mod supervise;
pub mod supervisor;

pub use store::{JobRow, JobStore};
pub use supervisor::{JobService, ServiceConfig};

#[cfg(test)]
mod tests;
