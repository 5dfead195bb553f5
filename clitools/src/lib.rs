//! What the command-line tools (`constellation`, `supernova`) share: where
//! their log goes and how it looks ([`init_logging`]), how they end when the
//! reader of their output goes away ([`exit_quietly_on_broken_pipe`]), how
//! they print an error ([`error_message`]), and their plain-text tables
//! ([`columns`], with cells made [`printable`]).

#![warn(missing_docs, unreachable_pub)]

mod broken_pipe;
mod error_message;
mod logging;
mod table;

pub use broken_pipe::exit_quietly_on_broken_pipe;
pub use error_message::error_message;
pub use logging::init_logging;
pub use table::{columns, printable};
