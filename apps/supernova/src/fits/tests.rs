use super::fits_header::forge_card;
use super::*;
use crate::fsutil::test_dir;
use fitsio::images::{ImageDescription, ImageType};

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
