//! One pair with a damaged FITS header fails alone: `supernova run` used to
//! abort (SIGABRT on a 40 GB allocation) when a header claimed 100000 x
//! 100000 pixels, losing every other pair of the run; and, once the claim
//! was checked against the file's length, still aborted on a sparse file
//! of the claimed length, which step 1 also copied out to its full size.

mod common;
use common::fits_header::forge_card;
use common::{generate, scratch, supernova, text};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// Runs `supernova run` of `version` over `data` into `out` with two
/// executors and `extra` arguments, started by `launch`; checks that the
/// run finished with pair-0002 failed alone (the other pairs have their
/// candidate lists) and returns the reason the final summary gives for it.
fn run_with_pair_0002_failing(
    data: &Path,
    out: &Path,
    version: &str,
    extra: &[&str],
    launch: impl Fn(&[&str]) -> Output,
) -> String {
    let mut args = vec!["run", "--data", data.to_str().unwrap()];
    args.extend(["--out", out.to_str().unwrap(), "--version", version]);
    args.extend(["-n", "2"]);
    args.extend(extra);
    let ran = launch(&args);
    let shown = text(&ran);
    // Exit status 1: the run finished and reports a failed pair (a signal,
    // as an abort on a failed allocation, leaves no code; 2 is a run that
    // could not start).
    assert_eq!(ran.status.code(), Some(1), "{version}: {shown}");
    assert!(
        !shown.contains("memory allocation") && !shown.contains("panicked"),
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
    // The summary at the end names the failed pair and why it failed.
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let summary = (stderr.split("1 of 3 pairs failed (pair-0002):\n").nth(1))
        .unwrap_or_else(|| panic!("{version}: no failure summary\n{shown}"));
    let reason = summary.lines().next().unwrap_or_default();
    reason
        .strip_prefix("  pair-0002: ")
        .unwrap_or_else(|| panic!("{version}: no reason for pair-0002 in {summary:?}"))
        .to_string()
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
        let reason =
            run_with_pair_0002_failing(&data, &out, version, &[], |args| supernova(args, &dir));
        for expected in [
            "a.fits",
            "100000 x 100000",
            "40000002880 bytes",
            &format!("file has {actual_bytes} bytes"),
        ] {
            assert!(
                reason.contains(expected),
                "{version}: {expected:?} missing from {reason:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `supernova` with `args` in `cwd` under an address-space limit of
/// `limit_kib` (`ulimit -v`), as a shared login node may set one, with an
/// image limit (8 GiB) above it, so the address space is the bound.
fn supernova_with_address_space_limit(args: &[&str], cwd: &Path, limit_kib: u64) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(limit_kib.to_string())
        .arg(env!("CARGO_BIN_EXE_supernova"))
        .args(args)
        .current_dir(cwd)
        .env("SUPERNOVA_MAX_IMAGE_MIB", "8192")
        .output()
        .expect("start supernova under sh")
}

/// Makes every copy of pair-0002's epoch-A image in `data` claim 30000 x
/// 30000 pixels (3.6 GB as f32) and have that length as a hole, so the
/// check against the file's length passes; returns the files' length.
fn make_pair_0002_sparse(data: &Path) -> u64 {
    let copies = epoch_a_copies(data, "pair-0002");
    assert!(!copies.is_empty(), "the dataset holds no pair-0002");
    let claimed = supernova::fits::file_size(30_000, 30_000);
    for copy in &copies {
        forge_card(copy, "NAXIS1", "30000");
        forge_card(copy, "NAXIS2", "30000");
        let file = std::fs::OpenOptions::new().write(true).open(copy).unwrap();
        file.set_len(claimed).unwrap();
    }
    claimed
}

#[test]
fn a_sparse_pair_of_the_claimed_size_fails_alone_and_is_copied_sparse() {
    let dir = scratch("sparse-pair");
    let data = dir.join("data");
    generate(
        &dir,
        &data,
        "--pairs 3 --seed 7 --min-size 256 --max-size 320",
    );
    let claimed = make_pair_0002_sparse(&data);
    // 3 GiB of address space: the run itself needs far less, the image's
    // 3.6 GB of pixels cannot fit, and the machine's memory is no bound.
    const LIMIT_KIB: u64 = 3 << 20;
    for version in ["many-task", "sequential"] {
        let out = dir.join(version);
        let reason = run_with_pair_0002_failing(&data, &out, version, &["--keep-work"], |args| {
            supernova_with_address_space_limit(args, &dir, LIMIT_KIB)
        });
        for expected in [
            "a.fits",
            "30000 x 30000 pixels",
            "3600000000 bytes",
            "ulimit -v",
        ] {
            assert!(
                reason.contains(expected),
                "{version}: {expected:?} missing from {reason:?}"
            );
        }
        // Step 1's copy kept the holes: a few blocks of disk, not 3.6 GB.
        let copy = std::fs::metadata(out.join("work/pair-0002/a.fits")).unwrap();
        assert_eq!(copy.len(), claimed, "{version}");
        assert!(
            copy.blocks() * 512 < 1 << 20,
            "{version}: the work copy takes {} bytes of disk",
            copy.blocks() * 512
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_image_memory_limit_is_settable_and_named() {
    let dir = scratch("image-limit");
    let data = dir.join("data");
    generate(
        &dir,
        &data,
        "--pairs 1 --seed 7 --min-size 600 --max-size 600",
    );
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let image = epoch_a_copies(&data, "pair-0001").remove(0);
    std::fs::copy(&image, work.join("a.fits")).unwrap();
    let (pixels, _) = supernova::fits::read_image(&image).unwrap();
    let (width, height) = (pixels.width(), pixels.height());
    let needed = width * height * 4;
    assert!((1 << 20..2 << 20).contains(&needed), "{width} x {height}");
    let detect = |limit_mib: &str| {
        Command::new(env!("CARGO_BIN_EXE_supernova"))
            .args(["step", "detect", "--work", work.to_str().unwrap()])
            .args(["--epoch", "a"])
            .env("SUPERNOVA_MAX_IMAGE_MIB", limit_mib)
            .output()
            .expect("start supernova")
    };
    // The image's pixels take over 1 MiB and under 2.
    let refused = detect("1");
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for expected in [
        "a.fits",
        &format!("{width} x {height} pixels"),
        &format!("{needed} bytes"),
        "1048576 bytes per image",
        "--max-image-mib",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing: {stderr}");
    }
    let accepted = detect("2");
    assert!(accepted.status.success(), "{}", text(&accepted));
    let _ = std::fs::remove_dir_all(&dir);
}
