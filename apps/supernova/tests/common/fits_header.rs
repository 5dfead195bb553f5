//! Damages FITS headers on purpose: shared by the integration tests and the
//! `fits` module's unit tests (which include this file by path), so that
//! both forge a header the same way.

use std::path::Path;

/// Overwrites the value of header card `key` (columns 11 to 30, right
/// justified, as FITS writes integers) in the FITS file at `path`.
pub fn forge_card(path: &Path, key: &str, value: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    let name = format!("{key:<8}=");
    let card = bytes[..2880]
        .chunks(80)
        .position(|card| card.starts_with(name.as_bytes()))
        .unwrap_or_else(|| panic!("{}: no {key} card", path.display()));
    let at = card * 80 + 10;
    bytes[at..at + 20].copy_from_slice(format!("{value:>20}").as_bytes());
    std::fs::write(path, bytes).unwrap();
}
