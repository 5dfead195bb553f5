//! Deployment and the `constellation` command.
//!
//! - [`report`]: what a journaled run did — tables and utilization plots.

pub mod report;
