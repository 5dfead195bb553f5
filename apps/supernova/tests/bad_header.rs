//! One pair with a damaged FITS header fails alone: `supernova run` used to
//! abort (SIGABRT on a 40 GB allocation) when a header claimed 100000 x
//! 100000 pixels, losing every other pair of the run.

mod common;
use common::fits_header::forge_card;
use common::{generate, scratch, supernova, text};

use std::path::{Path, PathBuf};

/// Every copy of `pair`'s epoch-A image in the dataset at `data`, at
/// whichever sites hold one.
fn epoch_a_copies(data: &Path, pair: &str) -> Vec<PathBuf> {
    let mut copies: Vec<PathBuf> = std::fs::read_dir(data.join("sites"))
        .unwrap()
        .map(|site| site.unwrap().path().join(pair).join("a.fits"))
        .filter(|path| path.exists())
        .collect();
    copies.sort();
    copies
}

#[test]
fn a_pair_whose_header_claims_too_many_pixels_fails_alone() {
    let dir = scratch("bad-header");
    let data = dir.join("data");
    generate(
        &dir,
        &data,
        "--pairs 3 --seed 7 --min-size 256 --max-size 320",
    );
    let copies = epoch_a_copies(&data, "pair-0002");
    assert!(!copies.is_empty(), "the dataset holds no pair-0002");
    let actual_bytes = std::fs::metadata(&copies[0]).unwrap().len();
    for copy in &copies {
        forge_card(copy, "NAXIS1", "100000");
        forge_card(copy, "NAXIS2", "100000");
    }

    for version in ["many-task", "sequential"] {
        let out = dir.join(version);
        let ran = supernova(
            &[
                "run",
                "--data",
                data.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--version",
                version,
                "-n",
                "2",
            ],
            &dir,
        );
        let shown = text(&ran);
        // Exit status 1: the run finished and reports a failed pair (a
        // signal leaves no code; 2 is a run that could not start).
        assert_eq!(ran.status.code(), Some(1), "{version}: {shown}");
        assert!(
            !shown.contains("memory allocation") && !shown.contains("panicked"),
            "{version}: {shown}"
        );
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let failure = (stderr.lines())
            .find(|line| line.contains("pair-0002: FAILED"))
            .unwrap_or_else(|| panic!("{version}: pair-0002 is not reported failed:\n{shown}"));
        for expected in [
            "a.fits",
            "100000 x 100000",
            "40000002880 bytes",
            &format!("file has {actual_bytes} bytes"),
        ] {
            assert!(
                failure.contains(expected),
                "{version}: {expected:?} missing from {failure:?}"
            );
        }
        assert!(
            stderr.contains("1 of 3 pairs failed (pair-0002)"),
            "{version}: {shown}"
        );
        // The other pairs went all the way to their candidate lists.
        let results = out.join("results");
        for pair in ["pair-0001", "pair-0003"] {
            assert!(
                results.join(format!("{pair}.json")).exists(),
                "{version}: {pair} has no results\n{shown}"
            );
        }
        assert!(!results.join("pair-0002.json").exists(), "{version}");
        assert!(
            String::from_utf8_lossy(&ran.stdout).contains("7.2-compare"),
            "{version}: no step table\n{shown}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
