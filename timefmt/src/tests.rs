use super::*;

fn parsed(text: &str) -> Duration {
    parse_duration(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn unit_forms() {
    assert_eq!(parsed("250ms"), Duration::from_millis(250));
    assert_eq!(parsed("90s"), Duration::from_secs(90));
    assert_eq!(parsed("15m"), Duration::from_secs(900));
    assert_eq!(parsed("2h"), Duration::from_secs(7_200));
    assert_eq!(parsed("1h30m"), Duration::from_secs(5_400));
    assert_eq!(parsed("1h 30m"), Duration::from_secs(5_400));
    assert_eq!(parsed("2d"), Duration::from_secs(172_800));
    assert_eq!(parsed("1d2h3m4s"), Duration::from_secs(93_784));
    assert_eq!(parsed("1w"), Duration::from_secs(7 * 86_400));
    assert_eq!(parsed("1.5h"), Duration::from_secs(5_400));
    assert_eq!(parsed("2 hours 30 minutes"), Duration::from_secs(9_000));
    assert_eq!(parsed(" 10s "), Duration::from_secs(10));
    assert_eq!(parsed("1s500ms"), Duration::from_millis(1_500));
}

#[test]
fn clock_forms() {
    assert_eq!(parsed("5:30"), Duration::from_secs(330));
    assert_eq!(parsed("0:45"), Duration::from_secs(45));
    assert_eq!(parsed("90:00"), Duration::from_secs(5_400));
    assert_eq!(parsed("1:00:00"), Duration::from_secs(3_600));
    assert_eq!(parsed("01:30:00"), Duration::from_secs(5_400));
    assert_eq!(parsed("36:00:00"), Duration::from_secs(129_600));
    assert_eq!(parsed("2-00"), Duration::from_secs(172_800));
    assert_eq!(parsed("1-02"), Duration::from_secs(93_600));
    assert_eq!(parsed("1-02:30"), Duration::from_secs(95_400));
    assert_eq!(parsed("1-02:30:15"), Duration::from_secs(95_415));
}

#[test]
fn a_bare_number_is_refused_with_both_readings() {
    for bare in ["30", "1.5", "0", "+7"] {
        let err = parse_duration(bare).expect_err(bare);
        assert_eq!(err, DurationError::BareNumber(bare.into()));
        let message = err.to_string();
        assert!(
            message.contains(&format!("`{bare}s`")) && message.contains(&format!("`{bare}m`")),
            "{message}"
        );
    }
}

#[test]
fn garbage_is_refused_quoting_the_input() {
    for bad in [
        "abc",
        "1x",
        "h",
        "1h1h",
        "30m1h",
        "1h30",
        "1:2:3:4",
        "1-2:3:4:5",
        "1-",
        ":30",
        "1-24",
        "1:75:00",
        "10:60",
        "UNLIMITED",
        "1y",
        "2 months",
        "1:",
        "1--2",
    ] {
        let err = parse_duration(bad).expect_err(bad);
        assert!(
            matches!(err, DurationError::Invalid { .. }),
            "{bad}: {err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(&format!("`{bad}`")), "{message}");
        assert!(message.contains("1h30m"), "{message}");
    }
}

#[test]
fn empty_zero_negative_and_huge_are_refused() {
    assert_eq!(parse_duration("  "), Err(DurationError::Empty));
    for zero in ["0s", "0h0m", "00:00:00", "0-00", "0ms"] {
        assert_eq!(parse_duration(zero), Err(DurationError::Zero(zero.into())));
    }
    for negative in ["-5s", "-1h", "5m ago", "-5", "-0.5"] {
        assert_eq!(
            parse_duration(negative),
            Err(DurationError::Negative(negative.into())),
        );
    }
    for huge in [
        "400d",
        "367-00:00:00",
        "99999999999999999999s",
        "9999999999999999d",
    ] {
        let err = parse_duration(huge).expect_err(huge);
        assert!(
            matches!(
                err,
                DurationError::TooLarge(_) | DurationError::Invalid { .. }
            ),
            "{huge}: {err:?}"
        );
    }
    assert_eq!(parsed("366d"), MAX_DURATION);
}

#[test]
fn clocks_for_batch_systems() {
    assert_eq!(format_clock(Duration::from_secs(5_400)), "01:30:00");
    assert_eq!(format_clock(Duration::from_secs(45)), "00:00:45");
    assert_eq!(format_clock(Duration::from_secs(95_415)), "1-02:30:15");
    assert_eq!(format_clock(Duration::from_secs(86_400)), "1-00:00:00");
    assert_eq!(format_clock(Duration::from_millis(250)), "00:00:01");
    assert_eq!(format_clock_hours(Duration::from_secs(5_400)), "01:30:00");
    assert_eq!(format_clock_hours(Duration::from_secs(95_415)), "26:30:15");
    assert_eq!(
        format_clock_hours(Duration::from_secs(720_000)),
        "200:00:00"
    );
    assert_eq!(format_clock_hours(Duration::from_millis(1_500)), "00:00:02");
}

#[test]
fn every_format_reads_back() {
    for secs in [1, 45, 3_599, 5_400, 86_399, 95_415, 30 * 86_400] {
        let d = Duration::from_secs(secs);
        for written in [format_clock(d), format_clock_hours(d), format_seconds(d)] {
            assert_eq!(parsed(&written), d, "{written}");
        }
    }
    assert_eq!(format_seconds(Duration::from_secs(6_840)), "6840s");
    assert_eq!(format_seconds(Duration::from_millis(250)), "1s");
}

#[test]
fn timestamps_are_iso_8601_utc() {
    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    assert_eq!(format_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    assert_eq!(format_timestamp(at(951_782_400)), "2000-02-29T00:00:00Z");
    assert_eq!(format_timestamp(at(1_700_000_000)), "2023-11-14T22:13:20Z");
    assert_eq!(format_timestamp(at(4_102_444_799)), "2099-12-31T23:59:59Z");
    assert_eq!(path_timestamp(at(1_686_561_241)), "20230612T091401Z");
    assert_eq!(path_timestamp(at(951_782_400)), "20000229T000000Z");
    // Fractions of a second are cut, never rounded up into the next second.
    assert_eq!(
        format_unix_timestamp(1_700_000_000.9),
        "2023-11-14T22:13:20Z"
    );
    assert_eq!(path_unix_timestamp(1_686_561_241.7), "20230612T091401Z");
}

#[test]
fn timestamps_out_of_range_still_show() {
    assert_eq!(format_unix_timestamp(-1.0), "-1 (Unix seconds)");
    assert_eq!(format_unix_timestamp(f64::NAN), "NaN (Unix seconds)");
    assert_eq!(
        format_unix_timestamp(1e15),
        "1000000000000000 (Unix seconds)"
    );
    assert_eq!(path_unix_timestamp(f64::NAN), "19700101T000000Z");
    let before = UNIX_EPOCH - Duration::from_secs(10);
    assert_eq!(format_timestamp(before), "-10 (Unix seconds)");
}
