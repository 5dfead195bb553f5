//! Deployment and the `constellation` command.
//!
//! - [`clock`]: Unix seconds as UTC dates.
//! - [`report`]: what a journaled run did — tables and utilization plots.

pub mod clock;
pub mod report;
