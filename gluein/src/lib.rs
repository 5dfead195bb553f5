//! Deployment and the `constellation` command.
//!
//! The report on a run and its run directories are the `report` crate's;
//! logging, error messages and tables the `clitools` crate's.
//!
//! - [`glidein`]: pilot jobs for Slurm, PBS, SSH and local agents.
//! - [`jobs`]: the job service a pool node hosts: submitted graphs, run as jobs.
//! - [`poolfile`]: how agents and runners find a pool.
//! - [`signals`]: SIGINT and SIGTERM as a flag, to leave a pool cleanly.

pub mod glidein;
pub mod jobs;
pub mod poolfile;
pub mod service;
pub mod signals;
