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
use fitsio::hdu::{FitsHdu, HduInfo};
use fitsio::images::{ImageDescription, ImageType};
use fitsio::FitsFile;

use crate::fsutil::temp_sibling;
use crate::image::Image;
use crate::memory::{allocation_limit, AllocationLimit};

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

fn check_writable(path: &Path, image: &Image, header: &FitsHeader) -> Result<(), FitsError> {
    let invalid = |reason: String| FitsError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    if path.to_str().is_none() {
        return Err(FitsError::BadPath {
            path: path.to_path_buf(),
        });
    }
    if image.width() == 0 || image.height() == 0 {
        return Err(invalid(format!(
            "the image is {} x {} pixels; FITS images here must not be empty",
            image.width(),
            image.height()
        )));
    }
    for (key, value) in [
        ("GAIN", header.gain),
        ("RDNOISE", header.read_noise),
        ("SATURATE", header.saturate),
    ] {
        if let Err(reason) = check_number(key, value) {
            return Err(invalid(reason));
        }
    }
    check_epoch(&header.epoch).map_err(invalid)?;
    if !is_fits_text(&header.pair) {
        return Err(invalid(format!(
            "PAIR {:?} must be 1 to 68 printable ASCII characters",
            header.pair
        )));
    }
    Ok(())
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

fn write_new_file(tmp: &Path, image: &Image, header: &FitsHeader) -> Result<(), CfitsioError> {
    let dimensions = [image.height(), image.width()];
    let description = ImageDescription {
        data_type: ImageType::Float,
        dimensions: &dimensions,
    };
    let mut file = FitsFile::create(tmp)
        .with_custom_primary(&description)
        .overwrite()
        .open()?;
    let hdu = file.primary_hdu()?;
    // Keys before data: adding keys afterwards would make cfitsio shift the
    // whole data unit if the header grew past its first block.
    drop_extname(&mut file)?;
    hdu.write_key(&mut file, "GAIN", (header.gain, "[e-/ADU] detector gain"))?;
    hdu.write_key(&mut file, "RDNOISE", (header.read_noise, "[e-] read noise"))?;
    hdu.write_key(
        &mut file,
        "SATURATE",
        (header.saturate, "[ADU] saturation level"),
    )?;
    hdu.write_key(&mut file, "PAIR", (header.pair.as_str(), "image pair"))?;
    hdu.write_key(
        &mut file,
        "EPOCH",
        (header.epoch.as_str(), "A = reference, B = later"),
    )?;
    hdu.write_image(&mut file, image.pixels())?;
    flush(&mut file)
}

/// fitsio labels the primary HDU `EXTNAME = '_PRIMARY'`; a primary HDU
/// needs no name, and other tools would show the odd label.
fn drop_extname(file: &mut FitsFile) -> Result<(), CfitsioError> {
    let mut status = 0;
    // SAFETY: `file` owns a valid, open cfitsio handle positioned on the
    // primary HDU; the key name is a NUL-terminated literal.
    unsafe {
        fitsio::sys::ffdkey(file.as_raw(), c"EXTNAME".as_ptr(), &mut status);
    }
    fitsio::errors::check_status(status)
}

/// Flushes cfitsio's buffers and reports failure. Closing the file (on drop)
/// would flush too, but fitsio discards the status there, and a full disk
/// must not pass for success.
fn flush(file: &mut FitsFile) -> Result<(), CfitsioError> {
    let mut status = 0;
    // SAFETY: `file` owns a valid, open cfitsio handle for the whole call,
    // and `status` is a valid out-pointer.
    unsafe {
        fitsio::sys::ffflus(file.as_raw(), &mut status);
    }
    fitsio::errors::check_status(status)
}

fn write_error(path: &Path, e: CfitsioError) -> FitsError {
    FitsError::Write {
        path: path.to_path_buf(),
        reason: describe(&e),
    }
}

fn check_readable(path: &Path) -> Result<(), FitsError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FitsError::Missing {
            path: path.to_path_buf(),
        },
        _ => FitsError::NotFits {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
    })?;
    if !meta.is_file() {
        return Err(FitsError::NotFits {
            path: path.to_path_buf(),
            reason: "it is a directory or other non-regular file".into(),
        });
    }
    // fitsio panics on non-UTF-8 paths; catch them first.
    if path.to_str().is_none() {
        return Err(FitsError::BadPath {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// `(width, height)` of the primary HDU, if it is a non-empty 2-D image.
fn image_shape(path: &Path, hdu: &FitsHdu) -> Result<(usize, usize), FitsError> {
    let not_image = |reason: String| FitsError::NotImage {
        path: path.to_path_buf(),
        reason,
    };
    match &hdu.info {
        HduInfo::ImageInfo { shape, .. } => match shape.as_slice() {
            // fitsio lists axes slowest first: [NAXIS2, NAXIS1].
            [height, width] if *height > 0 && *width > 0 => Ok((*width, *height)),
            [] => Err(not_image(
                "the primary HDU has no data (NAXIS = 0); images in extensions are not supported"
                    .into(),
            )),
            dims => Err(not_image(format!(
                "the primary HDU has NAXIS = {} with axis lengths {:?}",
                dims.len(),
                dims.iter().rev().collect::<Vec<_>>()
            ))),
        },
        _ => Err(not_image("the primary HDU is a table".into())),
    }
}

/// Fails unless the file is long enough for the `width × height` pixels its
/// header claims. cfitsio and fitsio allocate the whole image before they
/// read a byte of it, and an allocation that fails aborts the process, so
/// the header's claim is checked against the file's size first.
fn check_size_against_file(
    path: &Path,
    file: &mut FitsFile,
    hdu: &FitsHdu,
    width: usize,
    height: usize,
) -> Result<(), FitsError> {
    let bitpix: i64 = hdu
        .read_key(file, "BITPIX")
        .map_err(|e| key_error(path, "BITPIX", e))?;
    let bytes_per_pixel = match bitpix {
        8 | 16 | 32 | 64 | -32 | -64 => bitpix.unsigned_abs() / 8,
        other => {
            return Err(FitsError::BadKey {
                path: path.to_path_buf(),
                key: "BITPIX",
                reason: format!("{other} is not one of 8, 16, 32, 64, -32, -64"),
            })
        }
    };
    let data_start = data_offset(file).map_err(|e| FitsError::NotFits {
        path: path.to_path_buf(),
        reason: describe(&e),
    })?;
    // Padding after the data is not required: some tools write files
    // without the last block's fill.
    let claimed_bytes = (width as u64)
        .checked_mul(height as u64)
        .and_then(|pixels| pixels.checked_mul(bytes_per_pixel))
        .and_then(|data| data.checked_add(data_start))
        .unwrap_or(u64::MAX);
    let file_bytes = std::fs::metadata(path)
        .map_err(|e| FitsError::NotFits {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?
        .len();
    if claimed_bytes > file_bytes {
        return Err(FitsError::SizeMismatch {
            path: path.to_path_buf(),
            width,
            height,
            bytes_per_pixel,
            claimed_bytes,
            file_bytes,
        });
    }
    Ok(())
}

/// Fails if the `width × height` pixels, as `f32`, would need more memory
/// than `limit`: the file's length does not bound them, since a sparse
/// file has the claimed length without the disk space.
fn check_size_against_memory(
    path: &Path,
    width: usize,
    height: usize,
    limit: AllocationLimit,
) -> Result<(), FitsError> {
    let needed_bytes = pixel_bytes(width, height);
    if needed_bytes > limit.bytes {
        return Err(FitsError::TooLarge {
            path: path.to_path_buf(),
            width,
            height,
            needed_bytes,
            limit,
        });
    }
    Ok(())
}

/// The memory `width × height` `f32` pixels take, saturating.
fn pixel_bytes(width: usize, height: usize) -> u64 {
    (width as u64)
        .saturating_mul(height as u64)
        .saturating_mul(std::mem::size_of::<f32>() as u64)
}

/// Reads the primary HDU's `width × height` pixels as `f32`. The buffer is
/// reserved fallibly, so an allocation the system refuses fails this file
/// instead of aborting the process (fitsio's own `read_image` allocates
/// infallibly).
fn read_pixels(
    path: &Path,
    file: &mut FitsFile,
    width: usize,
    height: usize,
) -> Result<Vec<f32>, FitsError> {
    let out_of_memory = |reason: String| FitsError::OutOfMemory {
        path: path.to_path_buf(),
        width,
        height,
        needed_bytes: pixel_bytes(width, height),
        reason,
    };
    let count = width
        .checked_mul(height)
        .ok_or_else(|| out_of_memory("the pixel count overflows".into()))?;
    let mut pixels: Vec<f32> = Vec::new();
    pixels
        .try_reserve_exact(count)
        .map_err(|e| out_of_memory(e.to_string()))?;
    pixels.resize(count, 0.0);
    let mut status = 0;
    // SAFETY: `file` owns a valid, open cfitsio handle positioned on the
    // primary HDU; `pixels` holds `count` initialized `f32`s, exactly what
    // cfitsio writes for TFLOAT and `count` elements from the first. A null
    // `nulval` and `anynul` mean no null checking, as fitsio reads images.
    unsafe {
        fitsio::sys::ffgpv(
            file.as_raw(),
            fitsio::sys::TFLOAT as i32,
            1,
            count as i64,
            std::ptr::null_mut(),
            pixels.as_mut_ptr().cast(),
            std::ptr::null_mut(),
            &mut status,
        );
    }
    fitsio::errors::check_status(status).map_err(|e| FitsError::ReadPixels {
        path: path.to_path_buf(),
        reason: describe(&e),
    })?;
    Ok(pixels)
}

/// The byte offset of the current HDU's data unit, which follows its header.
fn data_offset(file: &mut FitsFile) -> Result<u64, CfitsioError> {
    let (mut header_start, mut data_start, mut data_end) = (0, 0, 0);
    let mut status = 0;
    // SAFETY: `file` owns a valid, open cfitsio handle positioned on the
    // primary HDU, and the four out-pointers are valid for the call.
    unsafe {
        fitsio::sys::ffghadll(
            file.as_raw(),
            &mut header_start,
            &mut data_start,
            &mut data_end,
            &mut status,
        );
    }
    fitsio::errors::check_status(status)?;
    u64::try_from(data_start)
        .map_err(|_| CfitsioError::Message(format!("data offset {data_start}")))
}

fn read_header(path: &Path, file: &mut FitsFile, hdu: &FitsHdu) -> Result<FitsHeader, FitsError> {
    let gain = read_number(path, file, hdu, "GAIN")?;
    let read_noise = read_number(path, file, hdu, "RDNOISE")?;
    let saturate = read_number(path, file, hdu, "SATURATE")?;
    let pair = read_text(path, file, hdu, "PAIR")?;
    let epoch = read_text(path, file, hdu, "EPOCH")?;
    check_epoch(&epoch).map_err(|reason| FitsError::BadKey {
        path: path.to_path_buf(),
        key: "EPOCH",
        reason,
    })?;
    Ok(FitsHeader {
        gain,
        read_noise,
        saturate,
        pair,
        epoch,
    })
}

fn read_number(
    path: &Path,
    file: &mut FitsFile,
    hdu: &FitsHdu,
    key: &'static str,
) -> Result<f64, FitsError> {
    let value: f64 = hdu
        .read_key(file, key)
        .map_err(|e| key_error(path, key, e))?;
    check_number(key, value).map_err(|reason| FitsError::BadKey {
        path: path.to_path_buf(),
        key,
        reason,
    })?;
    Ok(value)
}

fn read_text(
    path: &Path,
    file: &mut FitsFile,
    hdu: &FitsHdu,
    key: &'static str,
) -> Result<String, FitsError> {
    hdu.read_key::<String>(file, key)
        .map(|s| s.trim_end().to_string())
        .map_err(|e| key_error(path, key, e))
}

fn key_error(path: &Path, key: &'static str, e: CfitsioError) -> FitsError {
    match e {
        CfitsioError::Fits(ref f) if f.status == KEY_NO_EXIST => FitsError::MissingKey {
            path: path.to_path_buf(),
            key,
        },
        other => FitsError::BadKey {
            path: path.to_path_buf(),
            key,
            reason: describe(&other),
        },
    }
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

// The integration tests damage headers with the same helper.
#[cfg(test)]
#[path = "../tests/common/fits_header.rs"]
mod fits_header;

#[cfg(test)]
mod tests {
    use super::fits_header::forge_card;
    use super::*;
    use crate::fsutil::test_dir;

    fn header() -> FitsHeader {
        FitsHeader {
            gain: 2.0,
            read_noise: 5.0,
            saturate: 60000.0,
            pair: "pair-0001".into(),
            epoch: "A".into(),
        }
    }

    fn odd_image() -> Image {
        let (w, h) = (37, 23);
        let pixels = (0..w * h)
            .map(|i| match i % 11 {
                0 => f32::NAN,
                1 => -0.0,
                2 => f32::MIN_POSITIVE / 3.0, // subnormal
                _ => (i as f32).sin() * 1e4 + 0.1,
            })
            .collect();
        Image::from_pixels(w, h, pixels).unwrap()
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let dir = test_dir("fits-rt");
        let path = dir.join("a.fits");
        let image = odd_image();
        write_image(&path, &image, &header()).unwrap();
        let (back, hdr) = read_image(&path).unwrap();
        assert_eq!(hdr, header());
        assert_eq!((back.width(), back.height()), (37, 23));
        let bits = |im: &Image| im.pixels().iter().map(|p| p.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&image));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), file_size(37, 23));
    }

    #[test]
    fn overwrites_and_leaves_no_temporary_files() {
        let dir = test_dir("fits-ow");
        let path = dir.join("b.fits");
        write_image(&path, &Image::filled(4, 3, 1.0), &header()).unwrap();
        let mut h = header();
        h.epoch = "B".into();
        write_image(&path, &Image::filled(5, 6, 2.0), &h).unwrap();
        let (back, hdr) = read_image(&path).unwrap();
        assert_eq!(back, Image::filled(5, 6, 2.0));
        assert_eq!(hdr.epoch, "B");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("b.fits")]);
    }

    #[test]
    fn missing_file_is_reported_as_missing() {
        let dir = test_dir("fits-missing");
        let path = dir.join("nope.fits");
        let err = read_image(&path).unwrap_err();
        assert!(matches!(err, FitsError::Missing { .. }), "{err}");
        assert!(err.to_string().contains("nope.fits: no such file"), "{err}");
    }

    #[test]
    fn text_file_is_not_fits() {
        let dir = test_dir("fits-text");
        let path = dir.join("notes.fits");
        std::fs::write(&path, "these are my observing notes\n".repeat(200)).unwrap();
        let err = read_image(&path).unwrap_err();
        assert!(matches!(err, FitsError::NotFits { .. }), "{err}");
        assert!(
            err.to_string().contains("notes.fits: not a FITS file"),
            "{err}"
        );
        let empty = path.with_file_name("empty.fits");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(read_image(&empty), Err(FitsError::NotFits { .. })));
        assert!(matches!(read_image(&dir), Err(FitsError::NotFits { .. })));
    }

    #[test]
    fn cube_and_empty_primary_are_not_images() {
        let dir = test_dir("fits-3d");
        let cube = dir.join("cube.fits");
        let desc = ImageDescription {
            data_type: ImageType::Float,
            dimensions: &[2, 3, 4],
        };
        drop(
            FitsFile::create(&cube)
                .with_custom_primary(&desc)
                .open()
                .unwrap(),
        );
        let err = read_image(&cube).unwrap_err();
        assert!(matches!(err, FitsError::NotImage { .. }), "{err}");
        assert!(err.to_string().contains("NAXIS = 3"), "{err}");

        let empty = dir.join("empty.fits");
        drop(FitsFile::create(&empty).open().unwrap());
        let err = read_image(&empty).unwrap_err();
        assert!(err.to_string().contains("no data (NAXIS = 0)"), "{err}");
    }

    #[test]
    fn missing_and_bad_keys_are_named() {
        let dir = test_dir("fits-keys");
        let with_keys = |name: &str, rdnoise_text: bool| {
            let path = dir.join(name);
            let desc = ImageDescription {
                data_type: ImageType::Float,
                dimensions: &[3, 3],
            };
            let mut f = FitsFile::create(&path)
                .with_custom_primary(&desc)
                .open()
                .unwrap();
            let hdu = f.primary_hdu().unwrap();
            hdu.write_key(&mut f, "GAIN", 2.0f64).unwrap();
            if rdnoise_text {
                hdu.write_key(&mut f, "RDNOISE", "five").unwrap();
            } else {
                hdu.write_key(&mut f, "RDNOISE", 5.0f64).unwrap();
            }
            path
        };
        let err = read_image(&with_keys("text.fits", true)).unwrap_err();
        assert!(
            matches!(err, FitsError::BadKey { key: "RDNOISE", .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("text.fits: header key RDNOISE is invalid"),
            "{err}"
        );
        let err = read_image(&with_keys("nokeys.fits", false)).unwrap_err();
        assert!(
            matches!(
                err,
                FitsError::MissingKey {
                    key: "SATURATE",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .ends_with("nokeys.fits: header key SATURATE is missing"),
            "{err}"
        );
    }

    #[test]
    fn truncated_file_fails_to_read_pixels() {
        let dir = test_dir("fits-trunc");
        let path = dir.join("cut.fits");
        write_image(&path, &Image::filled(100, 100, 3.0), &header()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..2880 * 3]).unwrap();
        let err = read_image(&path).unwrap_err();
        assert!(
            matches!(
                err,
                FitsError::SizeMismatch {
                    width: 100,
                    height: 100,
                    file_bytes: 8640,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn header_claiming_more_pixels_than_the_file_holds_fails_before_allocating() {
        let dir = test_dir("fits-forged");
        let path = dir.join("forged.fits");
        write_image(&path, &odd_image(), &header()).unwrap();
        let file_bytes = std::fs::metadata(&path).unwrap().len();
        // 100000 x 100000 f32 pixels: 40 GB, which used to be allocated
        // (and abort the process) before cfitsio found the file short.
        forge_card(&path, "NAXIS1", "100000");
        forge_card(&path, "NAXIS2", "100000");
        let err = read_image(&path).unwrap_err();
        assert!(
            matches!(
                err,
                FitsError::SizeMismatch {
                    width: 100_000,
                    height: 100_000,
                    bytes_per_pixel: 4,
                    claimed_bytes: 40_000_002_880,
                    file_bytes: actual,
                    ..
                } if actual == file_bytes
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("forged.fits")
                && message.contains("100000 x 100000")
                && message.contains("40000002880")
                && message.contains(&file_bytes.to_string()),
            "{message}"
        );

        // A few rows more than the data and its padding hold are caught as
        // well (37 x 40 f32 = 5920 bytes, two blocks hold 5760), and a
        // header that claims fewer pixels than the file holds still reads.
        forge_card(&path, "NAXIS1", "37");
        forge_card(&path, "NAXIS2", "40");
        let err = read_image(&path).unwrap_err();
        assert!(matches!(err, FitsError::SizeMismatch { .. }), "{err}");
        forge_card(&path, "NAXIS2", "22");
        let (image, _) = read_image(&path).unwrap();
        assert_eq!((image.width(), image.height()), (37, 22));
    }

    #[test]
    fn a_sparse_file_of_the_claimed_size_fails_on_memory_before_allocating() {
        use crate::memory::LimitSource;
        let dir = test_dir("fits-sparse");
        let path = dir.join("sparse.fits");
        write_image(&path, &odd_image(), &header()).unwrap();
        forge_card(&path, "NAXIS1", "30000");
        forge_card(&path, "NAXIS2", "30000");
        // The claimed length, as holes: the file-size check passes.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(file_size(30000, 30000)).unwrap();
        let limit = AllocationLimit {
            bytes: 1 << 30,
            source: LimitSource::AddressSpace,
        };
        let err = check_size_against_memory(&path, 30000, 30000, limit).unwrap_err();
        assert!(
            matches!(
                err,
                FitsError::TooLarge {
                    needed_bytes: 3_600_000_000,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        for expected in [
            "sparse.fits",
            "30000 x 30000",
            "3600000000 bytes",
            "1073741824 bytes",
            "ulimit -v",
        ] {
            assert!(message.contains(expected), "{expected:?} in {message}");
        }
        assert!(check_size_against_memory(
            &path,
            30000,
            30000,
            AllocationLimit {
                bytes: 3_600_000_000,
                ..limit
            }
        )
        .is_ok());
    }

    #[test]
    fn an_allocation_the_system_refuses_is_an_error_not_an_abort() {
        let dir = test_dir("fits-alloc");
        let path = dir.join("a.fits");
        write_image(&path, &odd_image(), &header()).unwrap();
        let mut file = FitsFile::open(&path).unwrap();
        // 2^60 pixels of 4 bytes: more than any address space holds.
        let err = read_pixels(&path, &mut file, 1 << 40, 1 << 20).unwrap_err();
        assert!(matches!(err, FitsError::OutOfMemory { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("a.fits: cannot allocate") && message.contains("--max-image-mib"),
            "{message}"
        );
        let pixels = read_pixels(&path, &mut file, 37, 23).unwrap();
        assert_eq!(pixels.len(), 37 * 23);
    }

    #[test]
    fn refuses_bad_headers_and_keeps_old_file() {
        let dir = test_dir("fits-inval");
        let path = dir.join("a.fits");
        write_image(&path, &Image::filled(2, 2, 1.0), &header()).unwrap();
        let mut h = header();
        h.epoch = "C".into();
        let err = write_image(&path, &Image::filled(2, 2, 5.0), &h).unwrap_err();
        assert!(err.to_string().contains("EPOCH \"C\""), "{err}");
        h = header();
        h.gain = f64::NAN;
        assert!(matches!(
            write_image(&path, &Image::filled(2, 2, 5.0), &h),
            Err(FitsError::Invalid { .. })
        ));
        assert!(matches!(
            write_image(&path, &Image::new(0, 2), &header()),
            Err(FitsError::Invalid { .. })
        ));
        assert_eq!(read_image(&path).unwrap().0, Image::filled(2, 2, 1.0));
    }

    #[test]
    fn write_into_missing_directory_fails_cleanly() {
        let dir = test_dir("fits-nodir");
        let path = dir.join("no/such/dir/a.fits");
        let err = write_image(&path, &Image::filled(2, 2, 1.0), &header()).unwrap_err();
        assert!(matches!(err, FitsError::Write { .. }), "{err}");
        assert!(err.to_string().contains("a.fits: cannot write"), "{err}");
    }
}
