//! Timeouts in graph files are read by the one duration parser of the
//! workspace (`timefmt`): the unit and clock forms work, and a bare number,
//! which used to mean seconds here but minutes on the command line, is
//! refused where it is written.

use std::path::Path;
use std::time::Duration;

use graph::{Format, Graph};

fn timeout_of(value: &str) -> Result<Option<Duration>, String> {
    let text = format!("[[activity]]\nid = \"a\"\ncommand = \"x\"\ntimeout = {value}\n");
    Graph::parse(&text, Format::Toml, "pipeline.toml", Path::new("."))
        .map(|graph| graph.spec(0).timeout)
        .map_err(|e| e.to_string())
}

#[test]
fn unit_and_clock_forms_are_read() {
    for (written, expected) in [
        ("\"250ms\"", Duration::from_millis(250)),
        ("\"90s\"", Duration::from_secs(90)),
        ("\"1h30m\"", Duration::from_secs(5_400)),
        ("\"2d\"", Duration::from_secs(172_800)),
        ("\"1:00:00\"", Duration::from_secs(3_600)),
        ("\"05:30\"", Duration::from_secs(330)),
        ("\"1-02:00:00\"", Duration::from_secs(93_600)),
    ] {
        assert_eq!(timeout_of(written), Ok(Some(expected)), "{written}");
    }
}

#[test]
fn a_bare_number_is_refused_at_its_place_with_the_units_to_add() {
    for written in ["30", "\"30\""] {
        let message = timeout_of(written).expect_err(written);
        assert!(
            message.starts_with("pipeline.toml:4:11: ")
                && message
                    .contains("`30` has no unit: write `30s` for seconds or `30m` for minutes"),
            "{written}: {message}"
        );
    }
}

#[test]
fn zero_negative_and_broken_timeouts_are_refused_at_their_place() {
    for (written, says) in [
        ("\"0s\"", "is zero"),
        ("-1", "is negative"),
        ("\"-5m\"", "is negative"),
        ("\"ten minutes\"", "bad duration `ten minutes`"),
        ("\"1:75:00\"", "minutes must be below 60"),
    ] {
        let message = timeout_of(written).expect_err(written);
        assert!(
            message.starts_with("pipeline.toml:4:11: ") && message.contains(says),
            "{written}: {message}"
        );
    }
}
