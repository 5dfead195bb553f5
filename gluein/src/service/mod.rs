//! The pool's service side: what a pool node runs for its users beside
//! the node protocol. Today that is the job service; an allocator and a
//! dashboard server belong beside it.
//!
//! - [`requests`]: what clients, runners and agents ask the pool's
//!   processes, and the answers, as JSON (re-exported here: clients write
//!   `gluein::service::ServiceRequest`).
//! - [`jobs`]: the job service a pool node hosts: submitted graphs, run as
//!   jobs.

pub mod jobs;
pub mod requests;

pub use requests::{
    check_job_name, decode, encode, JobCounts, JobState, JobSubmission, JobSummary, ServiceRequest,
    ServiceResponse, SubmittedFiles, MAX_JOB_NAME_BYTES, SERVICE_STARTING,
};
