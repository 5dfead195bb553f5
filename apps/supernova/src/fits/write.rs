//! Writing one image: the header checked against what FITS can hold, then
//! the file written through cfitsio and flushed before it is renamed.

use std::path::Path;

use fitsio::errors::Error as CfitsioError;
use fitsio::images::{ImageDescription, ImageType};
use fitsio::FitsFile;

use super::{check_epoch, check_number, describe, is_fits_text, FitsError, FitsHeader};
use crate::image::Image;

pub(super) fn check_writable(
    path: &Path,
    image: &Image,
    header: &FitsHeader,
) -> Result<(), FitsError> {
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

pub(super) fn write_new_file(
    tmp: &Path,
    image: &Image,
    header: &FitsHeader,
) -> Result<(), CfitsioError> {
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
pub(super) fn drop_extname(file: &mut FitsFile) -> Result<(), CfitsioError> {
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
pub(super) fn flush(file: &mut FitsFile) -> Result<(), CfitsioError> {
    let mut status = 0;
    // SAFETY: `file` owns a valid, open cfitsio handle for the whole call,
    // and `status` is a valid out-pointer.
    unsafe {
        fitsio::sys::ffflus(file.as_raw(), &mut status);
    }
    fitsio::errors::check_status(status)
}

pub(super) fn write_error(path: &Path, e: CfitsioError) -> FitsError {
    FitsError::Write {
        path: path.to_path_buf(),
        reason: describe(&e),
    }
}
