//! One module per subcommand.

pub mod agent;
pub mod glidein;
pub mod pool;
pub mod probe;
pub mod report;
pub mod run;

use anyhow::Context as _;
use constellation::Context;

/// The labels of a `--context` option (comma separated, e.g.
/// `site:vu,big`), or none.
fn user_labels(option: Option<&str>) -> anyhow::Result<Vec<Context>> {
    let Some(text) = option else {
        return Ok(Vec::new());
    };
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse::<Context>)
        .collect::<Result<_, _>>()
        .with_context(|| format!("--context {text:?}"))
}
