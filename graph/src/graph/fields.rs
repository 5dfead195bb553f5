//! Checks and parsers for single fields: ids, contexts and durations, and
//! the glob match `after` items and context rules use on ids.

use std::time::Duration;

use constellation::{Context, ContextList};

use crate::file::{RawContext, RawDuration};

/// The longest id, in bytes: its output folder name must stay within the
/// file name limit of 255 bytes, and longer ids are typos or data in the
/// wrong field.
pub const MAX_ID_BYTES: usize = 200;

/// Why an id cannot name an activity, its journal rows and its output folder.
pub(super) fn check_id(id: &str) -> Result<(), String> {
    check_printable(id, "id", MAX_ID_BYTES)
}

/// Why `text`, a name of the kind `what` (an activity's `id`, a job's
/// name), cannot be one: empty, longer than `max_bytes`, or holding a
/// control character (a newline or an escape sequence would forge lines
/// in tables and logs, or drive the terminal that shows them).
pub fn check_printable(text: &str, what: &str, max_bytes: usize) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(format!("the {what} is empty"));
    }
    if text.len() > max_bytes {
        let start: String = text.chars().take(40).collect();
        return Err(format!(
            "the {what} `{start}…` has {} bytes; at most {max_bytes} are allowed",
            text.len()
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        let start: String = text.chars().take(80).collect();
        return Err(format!(
            "the {what} {start:?} contains the control character {c:?}; {what}s are printable text",
        ));
    }
    Ok(())
}

/// `"a|b"`, `"a>b"`, `"a,b"`, or a list meaning any of them.
pub fn parse_context(context: &RawContext) -> Result<ContextList, String> {
    match context {
        RawContext::Text(text) => text
            .parse::<ContextList>()
            .map_err(|e| format!("bad context `{text}`: {e}")),
        RawContext::List(items) => {
            let contexts = items
                .iter()
                .map(|t| {
                    t.parse::<Context>()
                        .map_err(|e| format!("bad context `{t}`: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if contexts.is_empty() {
                return Err("an empty context list matches no executor".into());
            }
            Ok(ContextList::any_of(contexts))
        }
    }
}

/// A duration as [`timefmt::parse_duration`] reads it everywhere: `"250ms"`,
/// `"90s"`, `"10m"`, `"1h30m"`, `"2d"`, `"1:00:00"`. A bare number is
/// refused (it used to mean seconds here and minutes on the command line).
pub fn parse_duration(duration: &RawDuration) -> Result<Duration, String> {
    let text = match duration {
        RawDuration::Number(number) => &number.to_string(),
        RawDuration::Text(text) => text,
    };
    timefmt::parse_duration(text).map_err(|e| e.to_string())
}

/// `*` matches any run of characters; everything else matches itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}
