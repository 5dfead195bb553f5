//! One module per subcommand.

pub mod probe;
pub mod report;
pub mod run;
