//! Deployment and the `constellation` command.
//!
//! - [`cli`]: logging, broken pipes and error messages of the command-line tools.
//! - [`report`]: what a journaled run did — tables and utilization plots.
//! - [`glidein`]: pilot jobs for Slurm, PBS, SSH and local agents.
//! - [`poolfile`]: how agents and runners find a pool.
//! - [`service`]: the pool's service side: the job service and its requests.
//! - [`run_dir`]: a directory of its own for each run, named by its start.
//! - [`signals`]: SIGINT and SIGTERM as a flag, to leave a pool cleanly.

pub mod cli;
pub mod glidein;
pub mod poolfile;
pub mod report;
pub mod run_dir;
pub mod service;
pub mod signals;
pub mod table;
