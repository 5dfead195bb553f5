//! One module per subcommand.

pub mod agent;
pub mod glidein;
pub mod pool;
pub mod probe;
pub mod report;
pub mod run;
