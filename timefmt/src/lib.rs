//! Durations and timestamps as users write and read them, in one format for
//! the whole workspace: the command line, graph files, reports and the names
//! of run directories all go through this crate, so a value that works in
//! one place works in every other.
//!
//! # Durations
//!
//! [`parse_duration`] reads two families of forms:
//!
//! * **unit forms**, read by [jiff]'s "friendly" parser: `250ms`, `90s`,
//!   `15m`, `1h30m`, `2d`, `1d 2h`, `1.5h`, `2 hours 30 minutes`; units go
//!   from weeks down to nanoseconds (a day is 24 hours);
//! * **clock forms**, as Slurm and PBS users type walltimes: `MM:SS`,
//!   `HH:MM:SS`, `D-HH`, `D-HH:MM` and `D-HH:MM:SS` (the leading field may
//!   overflow: `90:00` is 90 minutes).
//!
//! A bare number such as `30` is refused: it used to mean minutes on the
//! command line and seconds in graph files, so it could not be read safely.
//! Zero, negative and absurdly long (over [`MAX_DURATION`]) durations are
//! refused too: every caller needs a positive span of time.
//!
//! [`format_clock`] and [`format_clock_hours`] write durations back for
//! `sbatch --time` and PBS `walltime=`, [`format_seconds`] for another
//! program's command line; [`parse_duration`] reads all three back.
//!
//! # Timestamps
//!
//! One format, ISO 8601 in UTC: [`format_timestamp`] gives the RFC 3339 text
//! `2026-11-25T14:12:11Z` for people, and [`path_timestamp`] the basic form
//! of the same format, `20261125T141211Z`, for file and directory names
//! (no colons, which some file systems and tools refuse).

#![warn(unreachable_pub)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::fmt::friendly::SpanParser;
use jiff::{SpanRelativeTo, Timestamp};
use thiserror::Error;

/// Forms quoted in every duration error, so the user sees what would work.
pub const DURATION_EXAMPLES: &str =
    "write it with a unit, e.g. `250ms`, `90s`, `15m`, `1h30m`, `2d`, or as a clock, `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`";

/// The longest duration accepted (366 days): anything beyond is a typo, and
/// would overflow some batch systems' limits anyway.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Why a duration was refused. Every message quotes the input and says what
/// to write instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Nothing (or only whitespace) was given.
    #[error("empty duration: {DURATION_EXAMPLES}")]
    Empty,
    /// A number without a unit, which could mean seconds or minutes.
    #[error("`{0}` has no unit: write `{0}s` for seconds or `{0}m` for minutes")]
    BareNumber(String),
    /// The text is in none of the accepted forms.
    #[error("bad duration `{input}`: {reason}; {DURATION_EXAMPLES}")]
    Invalid {
        /// The text as given.
        input: String,
        /// What exactly is wrong with it.
        reason: String,
    },
    /// The duration is zero.
    #[error("duration `{0}` is zero: it must be positive")]
    Zero(String),
    /// The duration is negative.
    #[error("duration `{0}` is negative: it must be positive")]
    Negative(String),
    /// The duration is longer than [`MAX_DURATION`].
    #[error("duration `{0}` is longer than 366 days: check for a typo")]
    TooLarge(String),
}

/// Parses a positive duration in a unit form (`250ms`, `1h30m`, `2d`) or a
/// clock form (`MM:SS`, `[D-]HH:MM:SS`); see the [crate] documentation.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let input = text.trim();
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    if is_bare_number(input) {
        return Err(if input.starts_with('-') {
            DurationError::Negative(input.to_string())
        } else {
            DurationError::BareNumber(input.to_string())
        });
    }
    let duration = if is_clock(input) {
        parse_clock(input)?
    } else {
        parse_units(input)?
    };
    if duration.is_zero() {
        return Err(DurationError::Zero(input.to_string()));
    }
    if duration > MAX_DURATION {
        return Err(DurationError::TooLarge(input.to_string()));
    }
    Ok(duration)
}

/// `30`, `1.5`, `-2`: a number and nothing else.
fn is_bare_number(input: &str) -> bool {
    let digits = input.strip_prefix(['-', '+']).unwrap_or(input);
    digits.bytes().any(|b| b.is_ascii_digit())
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Only digits, `:` and `-`, with a separator after a digit: the clock
/// forms. (`-5` is a negative number, left to the unit parser to refuse.)
fn is_clock(input: &str) -> bool {
    input.starts_with(|c: char| c.is_ascii_digit())
        && input.contains([':', '-'])
        && input
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'-')
}

/// Builds a [`DurationError::Invalid`] for `input`.
fn invalid(input: &str, reason: impl Into<String>) -> DurationError {
    DurationError::Invalid {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// jiff's explanation without its preamble, which names jiff's internal
/// format ("friendly") that users of this tool never see.
fn jiff_reason(error: &jiff::Error) -> String {
    let text = error.to_string();
    match text.split_once("duration format: ") {
        Some((_, reason)) => reason.to_string(),
        None => text,
    }
}

/// Reads the unit forms with jiff; days are 24 hours, and units without a
/// fixed length (months, years) are refused.
fn parse_units(input: &str) -> Result<Duration, DurationError> {
    static PARSER: SpanParser = SpanParser::new();
    let span = PARSER
        .parse_span(input)
        .map_err(|e| invalid(input, jiff_reason(&e)))?;
    if span.get_years() != 0 || span.get_months() != 0 {
        return Err(invalid(
            input,
            "months and years have no fixed length; use days",
        ));
    }
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| DurationError::TooLarge(input.to_string()))?;
    if signed.is_negative() {
        return Err(DurationError::Negative(input.to_string()));
    }
    Duration::try_from(signed).map_err(|_| DurationError::TooLarge(input.to_string()))
}

/// Parses a decimal clock field, reporting overflow as "too large".
fn clock_field(input: &str, digits: &str) -> Result<u64, DurationError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(input, format!("`{digits}` is not a whole number")));
    }
    digits
        .parse::<u64>()
        .map_err(|_| DurationError::TooLarge(input.to_string()))
}

/// Reads `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` and `D-HH:MM:SS`, as Slurm
/// does: `5:30` is minutes and seconds, but `1-5:30` is days, hours and
/// minutes.
fn parse_clock(input: &str) -> Result<Duration, DurationError> {
    let (days, clock) = match input.split_once('-') {
        Some((d, rest)) => (Some(clock_field(input, d)?), rest),
        None => (None, input),
    };
    let fields = clock
        .split(':')
        .map(|f| clock_field(input, f))
        .collect::<Result<Vec<u64>, _>>()?;
    let (h, m, s) = match (days.is_some(), fields.as_slice()) {
        (false, [m, s]) => (0, *m, *s),
        (false, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (true, [h, m, s]) => (*h, *m, *s),
        _ => {
            return Err(invalid(
                input,
                "a clock has two or three `:`-separated fields",
            ))
        }
    };
    // The leading field may overflow (`90:00` is 90 minutes), the others not.
    if days.is_some() && h >= 24 {
        return Err(invalid(input, "hours must be below 24 after a day count"));
    }
    let minutes_lead = days.is_none() && fields.len() == 2;
    if !minutes_lead && m >= 60 {
        return Err(invalid(input, "minutes must be below 60"));
    }
    if s >= 60 {
        return Err(invalid(input, "seconds must be below 60"));
    }
    let parts = [(days.unwrap_or(0), 86_400), (h, 3_600), (m, 60), (s, 1)];
    parts
        .iter()
        .try_fold(0u64, |acc, (value, unit)| {
            value.checked_mul(*unit).and_then(|v| acc.checked_add(v))
        })
        .map(Duration::from_secs)
        .ok_or_else(|| DurationError::TooLarge(input.to_string()))
}

/// Whole seconds, a started second counted in full: a walltime of `250ms`
/// asks the batch system for one second, never for none.
fn whole_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Formats for `sbatch --time`: `D-HH:MM:SS` from one day up, else
/// `HH:MM:SS`; a part of a second counts as a second.
pub fn format_clock(d: Duration) -> String {
    let secs = whole_secs(d);
    let (days, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// Formats for PBS `-l walltime=`: `HH:MM:SS`, hours not wrapped at 24;
/// a part of a second counts as a second.
pub fn format_clock_hours(d: Duration) -> String {
    let secs = whole_secs(d);
    format!("{:02}:{:02}:{:02}", secs / 3_600, secs / 60 % 60, secs % 60)
}

/// Whole seconds with their unit, e.g. `6840s`: the unit form least likely
/// to be misread where one program passes a duration to another; a part of
/// a second counts as a second.
pub fn format_seconds(d: Duration) -> String {
    format!("{}s", whole_secs(d))
}

/// The whole second `time` falls in, or `None` before 1970 or past the
/// year 9999, which jiff does not represent.
fn timestamp(time: SystemTime) -> Option<Timestamp> {
    let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Timestamp::from_second(i64::try_from(secs).ok()?).ok()
}

/// A Unix time in (possibly fractional) seconds as a [`SystemTime`], or
/// `None` when it is not a finite time at or after 1970.
fn from_unix(secs: f64) -> Option<SystemTime> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(secs)
        .ok()
        .and_then(|d| UNIX_EPOCH.checked_add(d))
}

/// `time` for people: RFC 3339 in UTC to the second,
/// `2026-11-25T14:12:11Z`. Times jiff cannot represent (before 1970 or past
/// the year 9999) fall back to Unix seconds, so a broken clock still shows.
pub fn format_timestamp(time: SystemTime) -> String {
    match timestamp(time) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => unix_fallback(time),
    }
}

/// [`format_timestamp`] of a Unix time in seconds, as journals store it;
/// a time that is not finite or before 1970 is shown as the number.
pub fn format_unix_timestamp(unix_secs: f64) -> String {
    match from_unix(unix_secs) {
        Some(time) => format_timestamp(time),
        None => format!("{unix_secs} (Unix seconds)"),
    }
}

/// `time` for file and directory names: the ISO 8601 basic form of
/// [`format_timestamp`], `20261125T141211Z`, without colons. Times jiff
/// cannot represent give the stamp of 1970-01-01, so a name is always made.
pub fn path_timestamp(time: SystemTime) -> String {
    timestamp(time)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// [`path_timestamp`] of a Unix time in seconds.
pub fn path_unix_timestamp(unix_secs: f64) -> String {
    path_timestamp(from_unix(unix_secs).unwrap_or(UNIX_EPOCH))
}

/// Seconds since 1970 (negative before), for times [`format_timestamp`]
/// cannot show as a date.
fn unix_fallback(time: SystemTime) -> String {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => format!("{} (Unix seconds)", d.as_secs()),
        Err(e) => format!("-{} (Unix seconds)", e.duration().as_secs()),
    }
}

#[cfg(test)]
mod tests;
