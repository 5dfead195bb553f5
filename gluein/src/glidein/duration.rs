//! Walltime parsing and formatting.
//!
//! Users type walltimes in two styles and we accept both so that the value
//! they already use with `sbatch --time` also works with `glidein --walltime`:
//!
//! * unit style: `90s`, `30m`, `2h`, `1h30m`, `1d2h`, `1d2h3m4s` (units in
//!   descending order, each at most once);
//! * Slurm style: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
//!   As in Slurm, a bare number means **minutes**.
//!
//! Formatting produces what the batch systems expect: Slurm `D-HH:MM:SS`
//! (or `HH:MM:SS` under a day) and PBS `HH:MM:SS` (hours may exceed 24).

use std::time::Duration;

use thiserror::Error;

/// Example forms quoted in every error, so the user sees what would work.
const EXAMPLES: &str =
    "use e.g. `90s`, `30m`, `1h30m`, `1d2h`, `MM:SS`, `HH:MM:SS` or `D-HH:MM:SS`";

/// Largest walltime we accept (one year); anything beyond is a typo and
/// would overflow some batch systems' limits anyway.
pub const MAX_WALLTIME: Duration = Duration::from_secs(366 * 24 * 3600);

/// Why a walltime string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Nothing (or only whitespace) was given.
    #[error("empty walltime: {EXAMPLES}")]
    Empty,
    /// The text is not in any accepted form.
    #[error("invalid walltime `{input}`: {reason}; {EXAMPLES}")]
    Invalid {
        /// The text as given.
        input: String,
        /// What exactly is wrong with it.
        reason: String,
    },
    /// The walltime parses but is zero, which no batch system accepts.
    #[error("walltime `{0}` is zero: a pilot needs a positive walltime; {EXAMPLES}")]
    Zero(String),
    /// The walltime is absurdly large (over [`MAX_WALLTIME`]).
    #[error("walltime `{0}` is longer than a year: check for a typo")]
    TooLarge(String),
}

/// Parses a walltime in unit style (`1h30m`) or Slurm style (`1-02:00:00`).
///
/// Sub-second precision is not supported: batch systems count whole seconds.
pub fn parse_walltime(text: &str) -> Result<Duration, DurationError> {
    let input = text.trim();
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let secs = if input.ends_with(|c: char| c.is_ascii_alphabetic()) {
        parse_units(input)?
    } else {
        parse_slurm(input)?
    };
    if secs == 0 {
        return Err(DurationError::Zero(input.to_string()));
    }
    if secs > MAX_WALLTIME.as_secs() {
        return Err(DurationError::TooLarge(input.to_string()));
    }
    Ok(Duration::from_secs(secs))
}

/// Builds an [`DurationError::Invalid`] for `input`.
fn invalid(input: &str, reason: impl Into<String>) -> DurationError {
    DurationError::Invalid {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// Parses `1d2h3m4s`-style text into seconds.
fn parse_units(input: &str) -> Result<u64, DurationError> {
    // Units must appear in this order so `30m1h` (likely a typo) is rejected.
    const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];
    let mut total: u64 = 0;
    let mut next_unit = 0; // index into UNITS of the smallest unit still allowed
    let mut digits = String::new();
    for c in input.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = c.to_ascii_lowercase();
        let Some(pos) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(invalid(
                input,
                format!("unknown unit `{c}` (units are d, h, m, s)"),
            ));
        };
        if digits.is_empty() {
            return Err(invalid(
                input,
                format!("unit `{c}` has no number before it"),
            ));
        }
        if pos < next_unit {
            return Err(invalid(
                input,
                "units must go from largest to smallest, each once",
            ));
        }
        let value = parse_number(input, &digits)?;
        total = value
            .checked_mul(UNITS[pos].1)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::TooLarge(input.to_string()))?;
        next_unit = pos + 1;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(invalid(input, "trailing number has no unit"));
    }
    Ok(total)
}

/// Parses a decimal field, reporting overflow as "too large".
fn parse_number(input: &str, digits: &str) -> Result<u64, DurationError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(input, format!("`{digits}` is not a whole number")));
    }
    digits
        .parse::<u64>()
        .map_err(|_| DurationError::TooLarge(input.to_string()))
}

/// Parses the Slurm forms `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
/// `D-HH:MM:SS` into seconds.
fn parse_slurm(input: &str) -> Result<u64, DurationError> {
    let (days, clock) = match input.split_once('-') {
        Some((d, rest)) => (Some(parse_number(input, d)?), rest),
        None => (None, input),
    };
    let fields = clock
        .split(':')
        .map(|f| parse_number(input, f))
        .collect::<Result<Vec<u64>, _>>()?;
    // Slurm reads the fields differently with and without a day part:
    // `5:30` is minutes:seconds, but `1-5:30` is days-hours:minutes.
    let (h, m, s) = match (days.is_some(), fields.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        (false, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (true, [h, m, s]) => (*h, *m, *s),
        _ => return Err(invalid(input, "too many `:`-separated fields")),
    };
    check_clock_fields(input, days.is_some(), fields.len(), h, m, s)?;
    let parts = [(days.unwrap_or(0), 86_400), (h, 3_600), (m, 60), (s, 1)];
    let total = parts.iter().try_fold(0u64, |acc, (value, unit)| {
        value.checked_mul(*unit).and_then(|v| acc.checked_add(v))
    });
    total.ok_or_else(|| DurationError::TooLarge(input.to_string()))
}

/// Rejects out-of-range clock fields (`1:75:00`), except the leading field,
/// which Slurm lets overflow (`90:00` is 90 minutes).
fn check_clock_fields(
    input: &str,
    has_days: bool,
    field_count: usize,
    h: u64,
    m: u64,
    s: u64,
) -> Result<(), DurationError> {
    let minutes_lead = !has_days && field_count <= 2;
    if has_days && h >= 24 {
        return Err(invalid(input, "hours must be below 24 after a day count"));
    }
    if !minutes_lead && m >= 60 {
        return Err(invalid(input, "minutes must be below 60"));
    }
    if field_count >= 2 && s >= 60 && !(has_days && field_count == 2) {
        return Err(invalid(input, "seconds must be below 60"));
    }
    Ok(())
}

/// Splits whole seconds into (days, hours, minutes, seconds).
fn split(d: Duration) -> (u64, u64, u64, u64) {
    let secs = d.as_secs();
    (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60)
}

/// Formats for `sbatch --time`: `D-HH:MM:SS` from one day up, else `HH:MM:SS`.
pub fn format_slurm(d: Duration) -> String {
    let (days, h, m, s) = split(d);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// Formats for PBS `-l walltime=`: `HH:MM:SS`, hours not wrapped at 24.
pub fn format_pbs(d: Duration) -> String {
    let (days, h, m, s) = split(d);
    format!("{:02}:{m:02}:{s:02}", days * 24 + h)
}

/// Formats as whole seconds with an `s` suffix (`5400s`), the form passed to
/// `constellation agent --walltime` because it cannot be misread.
pub fn format_secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> u64 {
        parse_walltime(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .as_secs()
    }

    #[test]
    fn unit_forms() {
        assert_eq!(secs("90s"), 90);
        assert_eq!(secs("30m"), 1_800);
        assert_eq!(secs("2h"), 7_200);
        assert_eq!(secs("1h30m"), 5_400);
        assert_eq!(secs("1d2h"), 93_600);
        assert_eq!(secs("1d2h3m4s"), 93_784);
        assert_eq!(secs(" 2H "), 7_200);
    }

    #[test]
    fn slurm_forms() {
        assert_eq!(secs("30"), 1_800); // bare number = minutes, as in Slurm
        assert_eq!(secs("90"), 5_400);
        assert_eq!(secs("5:30"), 330);
        assert_eq!(secs("01:30:00"), 5_400);
        assert_eq!(secs("2-00"), 172_800);
        assert_eq!(secs("1-02"), 93_600);
        assert_eq!(secs("1-02:30"), 95_400);
        assert_eq!(secs("1-02:30:15"), 95_415);
        assert_eq!(secs("0:45"), 45);
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in [
            "abc",
            "1x",
            "h",
            "1h1h",
            "30m1h",
            "1h30",
            "1:2:3:4",
            "1-2:3:4:5",
            "-5",
            "1-",
            ":30",
            "1.5h",
            "1-24",
            "1:75:00",
            "10:60",
            "UNLIMITED",
            "1 h",
        ] {
            let err = parse_walltime(bad).expect_err(bad);
            assert!(
                matches!(err, DurationError::Invalid { .. }),
                "{bad}: {err:?}"
            );
            assert!(err.to_string().contains(bad.trim()), "{err}");
        }
    }

    #[test]
    fn empty_zero_and_huge_are_rejected() {
        assert_eq!(parse_walltime("  "), Err(DurationError::Empty));
        assert!(matches!(parse_walltime("0"), Err(DurationError::Zero(_))));
        assert!(matches!(
            parse_walltime("0h0m"),
            Err(DurationError::Zero(_))
        ));
        assert!(matches!(
            parse_walltime("00:00:00"),
            Err(DurationError::Zero(_))
        ));
        assert!(matches!(
            parse_walltime("400d"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_walltime("99999999999999999999s"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_walltime("9999999999999999d"),
            Err(DurationError::TooLarge(_))
        ));
    }

    #[test]
    fn error_messages_show_examples() {
        let msg = parse_walltime("soon").unwrap_err().to_string();
        assert!(msg.contains("`soon`") && msg.contains("1h30m"), "{msg}");
    }

    #[test]
    fn slurm_format() {
        assert_eq!(format_slurm(Duration::from_secs(5_400)), "01:30:00");
        assert_eq!(format_slurm(Duration::from_secs(45)), "00:00:45");
        assert_eq!(format_slurm(Duration::from_secs(95_415)), "1-02:30:15");
        assert_eq!(format_slurm(Duration::from_secs(86_400)), "1-00:00:00");
    }

    #[test]
    fn pbs_format() {
        assert_eq!(format_pbs(Duration::from_secs(5_400)), "01:30:00");
        assert_eq!(format_pbs(Duration::from_secs(95_415)), "26:30:15");
        assert_eq!(format_pbs(Duration::from_secs(200 * 3_600)), "200:00:00");
    }

    #[test]
    fn format_round_trips_through_parse() {
        for s in [45, 60, 3_599, 5_400, 86_399, 86_400, 95_415, 30 * 86_400] {
            let d = Duration::from_secs(s);
            assert_eq!(parse_walltime(&format_slurm(d)).unwrap(), d, "slurm {s}");
            assert_eq!(parse_walltime(&format_secs(d)).unwrap(), d, "secs {s}");
        }
    }
}
