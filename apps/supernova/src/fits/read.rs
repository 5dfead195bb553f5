//! Reading one image: the file's shape and size checked against the disk
//! and memory before its pixels are read, then the header keys.

use std::path::Path;

use fitsio::errors::Error as CfitsioError;
use fitsio::hdu::{FitsHdu, HduInfo};
use fitsio::FitsFile;

use super::{check_epoch, check_number, describe, FitsError, FitsHeader, KEY_NO_EXIST};
use crate::memory::AllocationLimit;

pub(super) fn check_readable(path: &Path) -> Result<(), FitsError> {
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
pub(super) fn image_shape(path: &Path, hdu: &FitsHdu) -> Result<(usize, usize), FitsError> {
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
pub(super) fn check_size_against_file(
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
pub(super) fn check_size_against_memory(
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
pub(super) fn pixel_bytes(width: usize, height: usize) -> u64 {
    (width as u64)
        .saturating_mul(height as u64)
        .saturating_mul(std::mem::size_of::<f32>() as u64)
}

/// Reads the primary HDU's `width × height` pixels as `f32`. The buffer is
/// reserved fallibly, so an allocation the system refuses fails this file
/// instead of aborting the process (fitsio's own `read_image` allocates
/// infallibly).
pub(super) fn read_pixels(
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
pub(super) fn data_offset(file: &mut FitsFile) -> Result<u64, CfitsioError> {
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

pub(super) fn read_header(
    path: &Path,
    file: &mut FitsFile,
    hdu: &FitsHdu,
) -> Result<FitsHeader, FitsError> {
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

pub(super) fn read_number(
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

pub(super) fn read_text(
    path: &Path,
    file: &mut FitsFile,
    hdu: &FitsHdu,
    key: &'static str,
) -> Result<String, FitsError> {
    hdu.read_key::<String>(file, key)
        .map(|s| s.trim_end().to_string())
        .map_err(|e| key_error(path, key, e))
}

pub(super) fn key_error(path: &Path, key: &'static str, e: CfitsioError) -> FitsError {
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
