//! Reading and writing the dataset's images as FITS files.
//!
//! Each image is the primary HDU of its own file: a 2-D array with
//! `BITPIX = -32` (IEEE `f32`, so `NaN` marks pixels without data) and the
//! detector keys the pipeline needs: `GAIN` (e-/ADU), `RDNOISE` (e-),
//! `SATURATE` (ADU), `PAIR` and `EPOCH`. FITS pixel `(1, 1)` is
//! [`Image`] pixel `(0, 0)`; `NAXIS1` is the width.
//!
//! Pixels go through cfitsio without conversion or null substitution, so a
//! round trip is bit-exact, `NaN`s included.
//!
//! cfitsio reads "extended file name" syntax (`file.fits[1]`, a leading `!`,
//! `-` for standard input); paths containing such characters may be
//! misread by it and are best avoided.

use std::path::{Path, PathBuf};

use fitsio::errors::Error as CfitsioError;
use fitsio::FitsFile;

use crate::fsutil::temp_sibling;
use crate::image::Image;
use crate::memory::{allocation_limit, AllocationLimit};

mod read;
mod write;

// The integration tests damage headers with the same helper.
#[cfg(test)]
#[path = "../../tests/common/fits_header.rs"]
#[allow(unreachable_pub)] // public for the integration tests that share the file
mod fits_header;
#[cfg(test)]
mod tests;

use read::{
    check_readable, check_size_against_file, check_size_against_memory, image_shape, read_header,
    read_pixels,
};
use write::{check_writable, write_error, write_new_file};

/// cfitsio's status code for "keyword not found in header".
const KEY_NO_EXIST: i32 = 202;

/// What a pipeline needs to know about the detector and the image's place in
/// the dataset, stored as header keys.
#[derive(Debug, Clone, PartialEq)]
pub struct FitsHeader {
    /// Detector gain in electrons per ADU (`GAIN`).
    pub gain: f64,
    /// Read noise in electrons (`RDNOISE`).
    pub read_noise: f64,
    /// Level in ADU at and above which pixels are saturated (`SATURATE`).
    pub saturate: f64,
    /// The pair the image belongs to, e.g. `pair-0001` (`PAIR`).
    pub pair: String,
    /// `"A"` for the reference epoch, `"B"` for the later one (`EPOCH`).
    pub epoch: String,
}

/// Why an image could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum FitsError {
    /// Nothing exists at the path.
    #[error("{path}: no such file")]
    Missing {
        /// The file asked for.
        path: PathBuf,
    },
    /// The file exists but cfitsio cannot open it as FITS.
    #[error("{path}: not a FITS file ({reason})")]
    NotFits {
        /// The file.
        path: PathBuf,
        /// What cfitsio or the file system said.
        reason: String,
    },
    /// The primary HDU holds no 2-D image.
    #[error("{path}: not a 2-D image: {reason}")]
    NotImage {
        /// The file.
        path: PathBuf,
        /// What the primary HDU holds instead.
        reason: String,
    },
    /// A header key the pipeline needs is absent.
    #[error("{path}: header key {key} is missing")]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The absent key.
        key: &'static str,
    },
    /// A header key is present but its value is unusable.
    #[error("{path}: header key {key} is invalid: {reason}")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// The offending key.
        key: &'static str,
        /// What is wrong with the value.
        reason: String,
    },
    /// The header claims more pixels than the file holds: a truncated file,
    /// or a damaged or forged `NAXISn`. Caught before any pixel memory is
    /// allocated, so a header claiming 100000 x 100000 pixels fails this
    /// one file instead of aborting the process on a 40 GB allocation.
    #[error(
        "{path}: the header claims {width} x {height} pixels of {bytes_per_pixel} bytes, \
         which needs a file of at least {claimed_bytes} bytes, but the file has {file_bytes} bytes"
    )]
    SizeMismatch {
        /// The file.
        path: PathBuf,
        /// `NAXIS1` as the header gives it.
        width: usize,
        /// `NAXIS2` as the header gives it.
        height: usize,
        /// `|BITPIX| / 8`.
        bytes_per_pixel: u64,
        /// Header plus data as the header describes them (saturating at
        /// `u64::MAX` for sizes no file can have).
        claimed_bytes: u64,
        /// The file's actual size.
        file_bytes: u64,
    },
    /// The header's pixels would need more memory than this process may
    /// allocate. A file of the claimed length passes the size check even
    /// when it is sparse (a few kilobytes on disk), so the claim is also
    /// checked against memory before anything is allocated.
    #[error(
        "{path}: the header claims {width} x {height} pixels, which need {needed_bytes} bytes \
         of memory, more than {limit}"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// `NAXIS1` as the header gives it.
        width: usize,
        /// `NAXIS2` as the header gives it.
        height: usize,
        /// The pixels as `f32` (saturating at `u64::MAX`).
        needed_bytes: u64,
        /// The bound they exceed, with its fix.
        limit: AllocationLimit,
    },
    /// The pixels passed the check against the limits, but the allocator
    /// still refused them (memory taken meanwhile by other work).
    #[error(
        "{path}: cannot allocate {needed_bytes} bytes for {width} x {height} pixels ({reason}); \
         free memory or lower --max-image-mib so other work is not starved"
    )]
    OutOfMemory {
        /// The file.
        path: PathBuf,
        /// `NAXIS1`.
        width: usize,
        /// `NAXIS2`.
        height: usize,
        /// The pixels as `f32`.
        needed_bytes: u64,
        /// What the allocator said.
        reason: String,
    },
    /// The pixels could not be read (a truncated file, say).
    #[error("{path}: cannot read the pixels: {reason}")]
    ReadPixels {
        /// The file.
        path: PathBuf,
        /// What cfitsio said.
        reason: String,
    },
    /// The image or header cannot be written as given.
    #[error("{path}: refusing to write: {reason}")]
    Invalid {
        /// The file that was to be written.
        path: PathBuf,
        /// What is wrong with the image or header.
        reason: String,
    },
    /// Writing failed part-way; the target file was left untouched.
    #[error("{path}: cannot write: {reason}")]
    Write {
        /// The file that was to be written.
        path: PathBuf,
        /// What cfitsio or the file system said.
        reason: String,
    },
    /// cfitsio needs paths it can pass on as UTF-8 text.
    #[error("{path}: path is not valid UTF-8, which cfitsio cannot open")]
    BadPath {
        /// The path, lossily displayed.
        path: PathBuf,
    },
}

/// GAIN and SATURATE must be positive; read noise may be zero (a noiseless
/// simulation) but not negative.
fn check_number(key: &str, value: f64) -> Result<(), String> {
    let ok = value.is_finite() && (value > 0.0 || (key == "RDNOISE" && value == 0.0));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{key} = {value} is not a valid value (must be finite and positive)"
        ))
    }
}

fn check_epoch(epoch: &str) -> Result<(), String> {
    match epoch {
        "A" | "B" => Ok(()),
        other => Err(format!("EPOCH {other:?} must be \"A\" or \"B\"")),
    }
}

/// FITS string values are printable ASCII and at most 68 characters long.
fn is_fits_text(s: &str) -> bool {
    !s.is_empty() && s.len() <= 68 && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Writes `image` with `header` to `path`, replacing any existing file.
///
/// The file is written under a temporary name in the same directory and
/// renamed into place, so readers never see a half-written file.
pub fn write_image(path: &Path, image: &Image, header: &FitsHeader) -> Result<(), FitsError> {
    check_writable(path, image, header)?;
    let tmp = temp_sibling(path);
    let result = write_new_file(&tmp, image, header)
        .map_err(|e| write_error(path, e))
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| FitsError::Write {
                path: path.to_path_buf(),
                reason: format!("renaming the finished temporary file: {e}"),
            })
        });
    if result.is_err() {
        // Best effort: the first failure is the one to report.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reads the primary image of `path` and its [`FitsHeader`] keys.
///
/// Any 2-D image type is accepted and converted to `f32`; files written by
/// [`write_image`] come back bit for bit.
pub fn read_image(path: &Path) -> Result<(Image, FitsHeader), FitsError> {
    check_readable(path)?;
    let mut file = FitsFile::open(path).map_err(|e| FitsError::NotFits {
        path: path.to_path_buf(),
        reason: describe(&e),
    })?;
    let hdu = file.primary_hdu().map_err(|e| FitsError::NotFits {
        path: path.to_path_buf(),
        reason: describe(&e),
    })?;
    let (width, height) = image_shape(path, &hdu)?;
    check_size_against_file(path, &mut file, &hdu, width, height)?;
    check_size_against_memory(path, width, height, allocation_limit())?;
    let header = read_header(path, &mut file, &hdu)?;
    let pixels = read_pixels(path, &mut file, width, height)?;
    let image = Image::from_pixels(width, height, pixels).ok_or_else(|| FitsError::ReadPixels {
        path: path.to_path_buf(),
        reason: format!("expected {width} x {height} pixels, cfitsio returned a different number"),
    })?;
    Ok((image, header))
}

/// The size in bytes of a file [`write_image`] writes for a `width × height`
/// image: one 2880-byte header block plus the data padded to whole blocks.
pub fn file_size(width: usize, height: usize) -> u64 {
    const BLOCK: u64 = 2880;
    let data = (width as u64) * (height as u64) * 4;
    BLOCK + data.div_ceil(BLOCK) * BLOCK
}

/// A one-line description of a fitsio error, with cfitsio's status code
/// where there is one (scientists look those up in the cfitsio manual).
fn describe(e: &CfitsioError) -> String {
    match e {
        CfitsioError::Fits(f) => format!("cfitsio status {}: {}", f.status, f.message),
        CfitsioError::Io(io) => io.to_string(),
        CfitsioError::Message(m) => m.clone(),
        other => format!("{other:?}"),
    }
}
