//! Deployment and the `constellation` command.
//!
//! The report on a run and its run directories are the `report` crate's;
//! logging, error messages and tables the `clitools` crate's.
//!
//! - [`glidein`]: pilot jobs for Slurm, PBS, SSH and local agents.
//! - [`poolfile`]: how agents and runners find a pool.
//! - [`service`]: the pool's service side: the job service and its requests.
//! - [`signals`]: SIGINT and SIGTERM as a flag, to leave a pool cleanly.

#![warn(unreachable_pub)]

pub mod glidein;
pub mod poolfile;
pub mod service;
pub mod signals;
