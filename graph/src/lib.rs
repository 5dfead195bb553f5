//! Activity graph files: the pipeline a scientist already has, written as
//! TOML (or JSON) and checked before anything runs.
//!
//! ```toml
//! [[activity]]
//! id = "prepare"
//! script = "mkdir -p work && cp /data/pairs/*.fits work/"
//!
//! [[activity]]
//! id = "detect-{pair}"
//! for = { pair = "1..=1052" }        # or ["a", "b"], or { file = "pairs.txt" }
//! command = "scripts/supernova/detect.sh"
//! args = ["work/{pair}-a.fits", "work/{pair}-b.fits"]
//! context = "site:vu|anywhere"
//! after = ["prepare"]
//! retries = 2
//! timeout = "10m"
//!
//! [[activity]]
//! id = "report"
//! command = "scripts/supernova/report.sh"
//! after = ["detect-*"]                # a glob: every detect
//! ```
//!
//! [`Graph::load`] expands sweeps and checks the whole file at once:
//! unknown dependencies (with a suggestion), cycles (named), duplicate ids,
//! files written by two activities, bad templates, contexts and durations.
//! Each error says where it is: `pipeline.toml:12:9: …` for TOML, the entry
//! and its id for JSON; [`Graph::place`] says it for an activity afterwards.
//! An activity whose `inputs` name a file another's `outputs` name runs
//! after it, as if `after` said so.
//!
//! A `{name}` in `script` becomes the value as one shell word, quoted
//! where needed ([`shell_word`]), so a value is never read as code;
//! `{name:raw}` puts the text in as it is. Other fields are not quoted.

#![warn(unreachable_pub)]

mod coordinator;
mod file;
mod graph;
mod input;
mod retarget;
mod suggest;
mod template;

pub use coordinator::{Coordinator, NodeReport, ReleasedCounts, COORDINATOR_LABEL, WINDOW};
pub use input::{kept_sweep_name, read_bounded, LoadOptions, DEFAULT_MAX_INPUT_BYTES, RAISE_LIMIT};
pub use retarget::{parse_context_rules, read_context_file, ContextRule, Relabel, Retargeted};

pub use crate::graph::{
    check_printable, parse_context, parse_duration, Format, Graph, GraphError, GraphErrors,
    MAX_ID_BYTES, MAX_INSTANCES, TRAVEL_SLACK,
};
pub use template::{shell_word, Template, TemplateError};
