//! Source detection and measurement (pipeline steps 2 and 3).
//!
//! The sky map of [`crate::background`] is subtracted, the image is lightly
//! smoothed with a Gaussian (σ = 1 px) and thresholded at `threshold` times
//! the *smoothed* image's noise; 8-connected groups of at least
//! `min_pixels` pixels are objects. Smoothing before thresholding is a cheap
//! approximation of a matched filter: it keeps faint stars whose single
//! pixels are lost in the noise, and it turns lone noise pixels into blobs
//! too small or too faint to pass.
//!
//! Groups with several significant peaks are split between them (see
//! `deblend`). Each object is measured on the unsmoothed, sky-subtracted
//! image:
//! * position and width by adaptive (Gaussian-weighted) second moments,
//!   iterated until the weight matches the object; for a Gaussian star this
//!   gives its exact σ (FWHM = 2.3548 σ), for a Moffat star the σ of the
//!   best-fitting Gaussian (its FWHM then reads 1.1–1.2 × the true one for
//!   β 4–2.5, as the wings count a little), which is the width that
//!   Gaussian PSF matching needs. Isophotal flux-weighted moments are the
//!   fallback when the iteration does not converge;
//! * flux in a circular aperture of `aperture_fwhm` × the seeing, so that
//!   the same fraction of a star's light is counted in both epochs whatever
//!   their seeing (an isophotal flux loses more of a broad star); `snr` is
//!   that flux over the sky noise in the aperture.
//!
//! The seeing is the clipped median FWHM of the stellar locus: the densest
//! narrow window of widths among bright, unsaturated, round objects, where
//! every star lies, whereas galaxies (broader) spread out and cosmic rays
//! (sharper) fall below the width cut. A plain median of those objects is
//! a galaxy's width on a small image with few bright stars.

use crate::background::{clipped_median, Background, BackgroundError, BackgroundParams};
use crate::catalog::{Detection, Source};
use crate::components;
use crate::deblend;
use crate::filter;
use crate::image::Image;
use thiserror::Error;

/// FWHM over σ of a Gaussian.
pub const FWHM_PER_SIGMA: f64 = 2.354_820_045;

/// Tunables of detection.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectParams {
    /// Sky and noise mesh.
    pub background: BackgroundParams,
    /// σ of the Gaussian smoothing before thresholding, px (default 1.0):
    /// a bit narrower than the sharpest expected PSF (FWHM 2.2 px, σ 0.93),
    /// so it raises faint stars' significance without merging neighbours.
    pub smoothing_sigma: f64,
    /// Detection threshold in σ of the smoothed image (default 3.0): with
    /// `min_pixels` it finds stars down to S/N ≈ 5 while pure noise gives
    /// only small, faint blobs that later steps ignore (they are neither
    /// bright nor point-like).
    pub threshold: f64,
    /// Fewest connected pixels above the threshold (default 5): a noise
    /// peak after 1 px smoothing covers ~1–4 pixels, a real star more.
    pub min_pixels: usize,
    /// Raw pixel value at which the detector saturates (default 60000 ADU,
    /// the level of the flat-topped stars in the survey images).
    pub saturation: f64,
    /// Least isophotal S/N of the objects that set the seeing (default 20):
    /// fainter objects' widths are too noisy.
    pub seeing_min_snr: f64,
    /// Largest ellipticity `(a²−b²)/(a²+b²)` of those objects (default
    /// 0.25): stars are round, blends and inclined galaxies are not.
    pub seeing_max_ellipticity: f64,
    /// Narrowest FWHM (px) an object may have to count for the seeing
    /// (default 1.5): cosmic rays measure ≲ 1 px, the sharpest PSF 2.2 px.
    pub seeing_min_fwhm: f64,
    /// Relative width of the window in which the stars' FWHMs are sought
    /// (default 0.1, i.e. widths from w to 1.1 w): stars of S/N ≥ 20 measure
    /// within a few per cent of the seeing, so the window holds nearly all
    /// of them, while it spans too little of the galaxies' 1.2–3 × spread
    /// to gather as many of them.
    pub seeing_locus_width: f64,
    /// Point-like objects have FWHM ≥ this × seeing (default 0.7): sharper
    /// ones are cosmic rays or hot pixels.
    pub point_like_min: f64,
    /// Point-like objects have FWHM ≤ this × seeing (default 1.2): on
    /// simulated fields 99 % of stars with S/N > 10 measure ≤ 1.08–1.19 ×
    /// the seeing, while galaxies of half-light radius ≥ 2 px measure
    /// ≥ 1.22 × even under a 4.4 px Moffat seeing (1.35 let such compact
    /// galaxies pass as stars, and supernovae beside them as variables).
    pub point_like_max: f64,
    /// Split blended objects at significant peaks (default true): in
    /// crowded fields and under bad seeing neighbouring stars merge above
    /// the threshold, and an unsplit blend has a wrong centroid and width,
    /// so a star in it would be neither matched nor recognised as a star.
    pub deblend: bool,
    /// Least dip between two peaks, in σ of the smoothed image, for them to
    /// be separate objects (default 5): noise bumps on a galaxy reach ~2–3.
    pub deblend_sigma: f64,
    /// … and as a fraction of the fainter peak's height (default 0.1): the
    /// flat top of a saturated star, or a galaxy's lumpy core, stays whole.
    pub deblend_contrast: f64,
    /// Aperture radius for fluxes, in units of the seeing FWHM (default 3):
    /// holds all of a Gaussian star and ≳ 96 % of a Moffat β ≥ 2.5 one, the
    /// same fraction in both epochs, while staying small enough in crowded
    /// fields that the flux ratio is not disturbed.
    pub aperture_fwhm: f64,
}

impl Default for DetectParams {
    fn default() -> Self {
        DetectParams {
            background: BackgroundParams::default(),
            smoothing_sigma: 1.0,
            threshold: 3.0,
            min_pixels: 5,
            saturation: 60000.0,
            seeing_min_snr: 20.0,
            seeing_max_ellipticity: 0.25,
            seeing_min_fwhm: 1.5,
            seeing_locus_width: 0.1,
            point_like_min: 0.7,
            point_like_max: 1.2,
            deblend: true,
            deblend_sigma: 5.0,
            deblend_contrast: 0.1,
            aperture_fwhm: 3.0,
        }
    }
}

/// Why detection failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DetectError {
    /// The sky could not be measured (the image has no finite pixel).
    #[error("detection failed: {0}")]
    Background(#[from] BackgroundError),
}

/// One object before the seeing (and so the aperture) is known.
#[derive(Debug, Clone)]
struct Measured {
    x: f64,
    y: f64,
    iso_flux: f64,
    iso_snr: f64,
    peak: f64,
    fwhm: f64,
    ellipticity: f64,
    converged: bool,
    pixels: u32,
    saturated: bool,
    noise: f64,
}

/// Finds and measures the objects of `img`; see the module docs. An image
/// without objects gives an empty list and a seeing of 0 (unknown).
pub fn detect(img: &Image, params: &DetectParams) -> Result<Detection, DetectError> {
    let bg = Background::estimate(img, &params.background)?;
    let mut sub = img.clone();
    bg.subtract_from(&mut sub);
    let noise = bg.noise_map();
    let (smooth, reduction) = smoothed(&sub, params);
    let mask = threshold_mask(&smooth, &noise, reduction, params);
    let comps = components::label(&mask, img.width(), img.height(), params.min_pixels);
    let min_dip = |p: usize| (params.deblend_sigma as f32) * reduction * noise.pixels()[p];
    let mut measured = Vec::new();
    for pix in comps.iter() {
        let parts = if params.deblend {
            deblend::split(
                pix,
                smooth.pixels(),
                img.width(),
                &min_dip,
                params.deblend_contrast as f32,
            )
        } else {
            vec![pix.to_vec()]
        };
        measured.extend(
            parts
                .iter()
                .map(|part| measure(img, &sub, &noise, part, params)),
        );
    }
    let seeing = estimate_seeing(&measured, params);
    let mut sources: Vec<Source> = measured
        .iter()
        .map(|m| finish(&sub, m, seeing, params))
        .collect();
    sort_brightest_first(&mut sources);
    Ok(Detection {
        width: img.width(),
        height: img.height(),
        background: bg.level() as f64,
        noise: bg.noise() as f64,
        seeing_fwhm: seeing,
        sources,
    })
}

/// The smoothed image and the factor by which smoothing reduced the noise.
fn smoothed(sub: &Image, params: &DetectParams) -> (Image, f32) {
    let kernel = filter::discrete_gaussian(params.smoothing_sigma);
    // White noise smoothed by k⊗k has σ reduced by sqrt(Σ (k_i k_j)²) = Σ k_i².
    let reduction: f32 = kernel.iter().map(|k| k * k).sum();
    (filter::convolve_nan_aware(sub, &kernel), reduction)
}

/// Pixels of the smoothed image above `threshold` × its local noise.
fn threshold_mask(
    smooth: &Image,
    noise: &Image,
    reduction: f32,
    params: &DetectParams,
) -> Vec<bool> {
    let t = params.threshold as f32 * reduction;
    smooth
        .pixels()
        .iter()
        .zip(noise.pixels())
        .map(|(&s, &n)| s.is_finite() && s > t * n)
        .collect()
}

/// Measures one component (`pix`: pixel indices).
fn measure(
    raw: &Image,
    sub: &Image,
    noise: &Image,
    pix: &[usize],
    params: &DetectParams,
) -> Measured {
    let w = sub.width();
    let (mut sum, mut sw, mut sx, mut sy) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut peak = f64::NEG_INFINITY;
    let mut saturated = false;
    for &p in pix {
        let v = sub.pixels()[p] as f64;
        if !v.is_finite() {
            continue;
        }
        let (x, y) = ((p % w) as f64, (p / w) as f64);
        sum += v;
        peak = peak.max(v);
        saturated |= raw.pixels()[p] as f64 >= params.saturation;
        let wt = v.max(0.0);
        sw += wt;
        sx += wt * x;
        sy += wt * y;
    }
    let first = pix[0];
    let (cx, cy) = if sw > 0.0 {
        (sx / sw, sy / sw)
    } else {
        ((first % w) as f64, (first / w) as f64)
    };
    let (mut sxx, mut syy) = (0.0f64, 0.0f64);
    for &p in pix {
        let v = sub.pixels()[p] as f64;
        if v.is_finite() && v > 0.0 {
            sxx += v * ((p % w) as f64 - cx).powi(2);
            syy += v * ((p / w) as f64 - cy).powi(2);
        }
    }
    let iso_s = if sw > 0.0 {
        ((sxx + syy) / (2.0 * sw)).sqrt()
    } else {
        0.0
    };
    let n_here = local(noise, cx, cy).max(f64::MIN_POSITIVE);
    let iso_snr = sum / (n_here * (pix.len() as f64).sqrt());
    let adaptive = adaptive_moments(sub, cx, cy, iso_s.clamp(0.5, 10.0));
    let (x, y, s, e, converged) = match adaptive {
        Some(a) => (a.x, a.y, a.sigma, a.ellipticity, true),
        None => (cx, cy, iso_s, 1.0, false),
    };
    Measured {
        x,
        y,
        iso_flux: sum,
        iso_snr,
        peak: if peak.is_finite() { peak } else { 0.0 },
        fwhm: FWHM_PER_SIGMA * s,
        ellipticity: e,
        converged,
        pixels: pix.len() as u32,
        saturated,
        noise: n_here,
    }
}

/// Value of `img` at the pixel nearest `(x, y)`, clamped into the image.
fn local(img: &Image, x: f64, y: f64) -> f64 {
    let xi = (x.round().max(0.0) as usize).min(img.width() - 1);
    let yi = (y.round().max(0.0) as usize).min(img.height() - 1);
    img.get(xi, yi) as f64
}

/// Result of [`adaptive_moments`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveMoments {
    /// Weighted centroid x.
    pub x: f64,
    /// Weighted centroid y.
    pub y: f64,
    /// σ of the matched Gaussian weight (= the object's σ for a Gaussian).
    pub sigma: f64,
    /// `sqrt((Mxx−Myy)² + 4Mxy²) / (Mxx+Myy)`, 0 for a round object.
    pub ellipticity: f64,
}

/// Adaptive second moments of the sky-subtracted `img` around `(x0, y0)`,
/// starting from weight σ `s0`: the Gaussian weight's σ² is set to twice the
/// weighted second moment until it stops changing, which for a Gaussian
/// object is its own σ. `None` if the iteration leaves sane bounds (no flux,
/// σ outside 0.3–20 px, centroid moving more than 3 px).
pub fn adaptive_moments(img: &Image, x0: f64, y0: f64, s0: f64) -> Option<AdaptiveMoments> {
    const MAX_RADIUS: f64 = 40.0;
    let (mut x, mut y, mut s) = (x0, y0, s0);
    let (w, h) = (img.width() as i64, img.height() as i64);
    let mut gx = Vec::new();
    let mut gy = Vec::new();
    for _ in 0..40 {
        let r = (4.0 * s).ceil().min(MAX_RADIUS) as i64;
        let (ix, iy) = (x.round() as i64, y.round() as i64);
        let (xa, xb) = ((ix - r).max(0), (ix + r).min(w - 1));
        let (ya, yb) = ((iy - r).max(0), (iy + r).min(h - 1));
        if xa > xb || ya > yb {
            return None;
        }
        // The weight is separable, so two short tables replace a 2-D exp.
        let k = -0.5 / (s * s);
        gx.clear();
        gx.extend((xa..=xb).map(|i| (k * (i as f64 - x).powi(2)).exp()));
        gy.clear();
        gy.extend((ya..=yb).map(|j| (k * (j as f64 - y).powi(2)).exp()));
        let m = weighted_sums(img, x, y, (xa, xb), (ya, yb), &gx, &gy);
        if m[0] <= 0.0 {
            return None;
        }
        let (mx, my) = (m[1] / m[0], m[2] / m[0]);
        let mxx = m[3] / m[0] - mx * mx;
        let myy = m[4] / m[0] - my * my;
        let mxy = m[5] / m[0] - mx * my;
        let mean = 0.5 * (mxx + myy);
        if mean <= 0.0 {
            return None;
        }
        // The weighted centroid moves only half way to the object's centre
        // when the weight matches it, so step twice the measured offset.
        x += 2.0 * mx;
        y += 2.0 * my;
        let s_new = (2.0 * mean).sqrt();
        let done = (s_new - s).abs() < 1e-4 * s && mx.abs() < 1e-4 && my.abs() < 1e-4;
        s = s_new;
        if !(0.3..=20.0).contains(&s) || (x - x0).hypot(y - y0) > 3.0 {
            return None;
        }
        if done {
            let e = ((mxx - myy).powi(2) + 4.0 * mxy * mxy).sqrt() / (mxx + myy);
            return Some(AdaptiveMoments {
                x,
                y,
                sigma: s,
                ellipticity: e,
            });
        }
    }
    None
}

/// `[Σw·I, Σw·I·dx, Σw·I·dy, Σw·I·dx², Σw·I·dy², Σw·I·dx·dy]` over the box,
/// NaN pixels skipped.
fn weighted_sums(
    img: &Image,
    x: f64,
    y: f64,
    xr: (i64, i64),
    yr: (i64, i64),
    gx: &[f64],
    gy: &[f64],
) -> [f64; 6] {
    let mut m = [0.0f64; 6];
    for (jj, j) in (yr.0..=yr.1).enumerate() {
        let row = &img.row(j as usize)[xr.0 as usize..=xr.1 as usize];
        let dy = j as f64 - y;
        let (mut a0, mut a1, mut a3) = (0.0, 0.0, 0.0);
        for (ii, &v) in row.iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let dx = (xr.0 + ii as i64) as f64 - x;
            let wv = gx[ii] * v as f64;
            a0 += wv;
            a1 += wv * dx;
            a3 += wv * dx * dx;
        }
        let g = gy[jj];
        m[0] += g * a0;
        m[1] += g * a1;
        m[2] += g * a0 * dy;
        m[3] += g * a3;
        m[4] += g * a0 * dy * dy;
        m[5] += g * a1 * dy;
    }
    m
}

/// The seeing: the clipped median FWHM of the stellar locus among bright,
/// round, unsaturated objects (see [`stellar_locus`]), relaxing the
/// brightness cut if too few qualify; 0 if none do.
fn estimate_seeing(measured: &[Measured], params: &DetectParams) -> f64 {
    for factor in [1.0, 0.5, 0.25] {
        let widths: Vec<f32> = measured
            .iter()
            .filter(|m| {
                m.converged
                    && !m.saturated
                    && m.iso_snr > params.seeing_min_snr * factor
                    && m.ellipticity < params.seeing_max_ellipticity
                    && m.fwhm >= params.seeing_min_fwhm
            })
            .map(|m| m.fwhm as f32)
            .collect();
        if widths.len() >= 3 || (factor < 0.5 && !widths.is_empty()) {
            let locus = stellar_locus(&widths, params.seeing_locus_width);
            if let Some(s) = clipped_median(&locus, 3.0, 10) {
                return s.median as f64;
            }
        }
    }
    0.0
}

/// The widths in the densest window `[w, w·(1 + width)]` over the sorted
/// widths (the narrowest such window on ties).
///
/// Every star has the seeing's width, so stars pile up in one narrow
/// window, while round galaxies spread over 1.2–3 times it. A plain median
/// of all bright round objects assumes stars are the majority, which fails
/// on a small image: seed 78's 352×768 pair 4 held 14 bright stars among 44
/// bright round objects, and its median (5.3 px instead of 4.2) made compact
/// galaxies "point-like", misaligned the images and mismatched their PSFs.
fn stellar_locus(widths: &[f32], width: f64) -> Vec<f32> {
    let mut sorted: Vec<f32> = widths.iter().copied().filter(|w| w.is_finite()).collect();
    sorted.sort_by(f32::total_cmp);
    let mut best = (0usize, 0usize);
    let mut end = 0;
    for start in 0..sorted.len() {
        let limit = sorted[start] as f64 * (1.0 + width);
        end = end.max(start);
        while end < sorted.len() && sorted[end] as f64 <= limit {
            end += 1;
        }
        if end - start > best.1 - best.0 {
            best = (start, end);
        }
    }
    sorted[best.0..best.1].to_vec()
}

/// Aperture flux, S/N and the point-like flag, once the seeing is known.
fn finish(sub: &Image, m: &Measured, seeing: f64, params: &DetectParams) -> Source {
    let (flux, n) = if seeing > 0.0 {
        aperture_flux(sub, m.x, m.y, params.aperture_fwhm * seeing)
    } else {
        (m.iso_flux, m.pixels as usize)
    };
    let snr = flux / (m.noise * (n.max(1) as f64).sqrt());
    let point_like = seeing > 0.0
        && m.fwhm >= params.point_like_min * seeing
        && m.fwhm <= params.point_like_max * seeing;
    Source {
        x: m.x,
        y: m.y,
        flux,
        peak: m.peak,
        fwhm: m.fwhm,
        pixels: m.pixels,
        snr,
        saturated: m.saturated,
        point_like,
    }
}

/// Sum of finite pixels within `radius` of `(x, y)`, and their number.
fn aperture_flux(img: &Image, x: f64, y: f64, radius: f64) -> (f64, usize) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    let r = radius.ceil() as i64;
    let (ix, iy) = (x.round() as i64, y.round() as i64);
    let (mut sum, mut n) = (0.0f64, 0usize);
    for j in (iy - r).max(0)..=(iy + r).min(h - 1) {
        let dy2 = (j as f64 - y).powi(2);
        for i in (ix - r).max(0)..=(ix + r).min(w - 1) {
            let v = img.get(i as usize, j as usize);
            if v.is_finite() && (i as f64 - x).powi(2) + dy2 <= radius * radius {
                sum += v as f64;
                n += 1;
            }
        }
    }
    (sum, n)
}

/// Brightest first; equal fluxes by position so the order is reproducible.
fn sort_brightest_first(sources: &mut [Source]) {
    sources.sort_by(|a, b| {
        b.flux
            .total_cmp(&a.flux)
            .then(a.y.total_cmp(&b.y))
            .then(a.x.total_cmp(&b.x))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{add_noise, gaussian_star, rng};

    /// A grid of stars of known flux on a flat sky.
    fn star_field(seed: u64, sigma: f64) -> (Image, Vec<(f64, f64, f64)>) {
        let mut img = Image::filled(400, 300, 1000.0);
        let mut r = rng(seed);
        let mut truth = Vec::new();
        for j in 0..6 {
            for i in 0..8 {
                let x = 25.0 + 48.0 * i as f64 + 0.37 * j as f64;
                let y = 25.0 + 48.0 * j as f64 + 0.21 * i as f64;
                let flux = 5000.0 * (1.0 + (i + 8 * j) as f64 * 0.5);
                gaussian_star(&mut img, x, y, flux, sigma);
                truth.push((x, y, flux));
            }
        }
        add_noise(&mut img, 25.0, &mut r);
        (img, truth)
    }

    #[test]
    fn finds_bright_stars_with_accurate_centroids_and_widths() {
        let sigma = 1.4;
        let (img, truth) = star_field(2, sigma);
        let det = detect(&img, &DetectParams::default()).unwrap();
        assert!((det.background - 1000.0).abs() < 5.0);
        assert!((det.noise - 25.0).abs() < 1.5);
        let true_fwhm = FWHM_PER_SIGMA * (sigma * sigma + 1.0 / 12.0).sqrt();
        assert!(
            (det.seeing_fwhm / true_fwhm - 1.0).abs() < 0.03,
            "seeing {}",
            det.seeing_fwhm
        );
        for &(x, y, flux) in truth.iter().filter(|t| t.2 > 40_000.0) {
            let s = det
                .sources
                .iter()
                .find(|s| (s.x - x).hypot(s.y - y) < 1.0)
                .unwrap_or_else(|| panic!("star at {x},{y} missed"));
            assert!(
                (s.x - x).abs() < 0.1 && (s.y - y).abs() < 0.1,
                "{s:?} vs {x},{y}"
            );
            assert!((s.fwhm / true_fwhm - 1.0).abs() < 0.1, "fwhm {}", s.fwhm);
            assert!(
                (s.flux / flux - 1.0).abs() < 0.04,
                "flux {} vs {flux}",
                s.flux
            );
            assert!(s.point_like && !s.saturated);
        }
        for w in det.sources.windows(2) {
            assert!(w[0].flux >= w[1].flux);
        }
    }

    /// The generator's seed-78 pair 4 at 300–900 px (352×768): 14 bright
    /// stars among 44 bright round objects, so the median width (5.3 px) was
    /// a galaxy's; the stars measure 4.2 px (a Moffat PSF of FWHM 3.68 px
    /// reads 1.1–1.2 times that).
    #[test]
    fn seeing_of_a_small_galaxy_rich_image_is_the_stars_width() {
        let (scene, a, b) = crate::testutil::generated_pair(78, 300, 900, 3);
        assert_eq!((a.width(), a.height()), (352, 768));
        for (image, fwhm) in [(&a, scene.a.psf.fwhm), (&b, scene.b.psf.fwhm)] {
            let det = detect(image, &DetectParams::default()).unwrap();
            let ratio = det.seeing_fwhm / fwhm;
            assert!(
                (1.0..1.22).contains(&ratio),
                "seeing {} for a PSF of FWHM {fwhm}",
                det.seeing_fwhm
            );
        }
    }

    #[test]
    fn stellar_locus_is_the_densest_narrow_window() {
        // Four stars near 4.2 px among six spread-out galaxies, which hold
        // the median.
        let widths = [4.16, 4.2, 4.22, 4.26, 5.4, 6.0, 6.6, 7.4, 8.1, 9.3];
        let locus = stellar_locus(&widths, 0.1);
        assert_eq!(locus, vec![4.16, 4.2, 4.22, 4.26]);
        assert!(stellar_locus(&[], 0.1).is_empty());
        assert_eq!(stellar_locus(&[3.0, f32::NAN], 0.1), vec![3.0]);
    }

    #[test]
    fn seeing_ignores_cosmic_rays_and_galaxies_and_flags_saturation() {
        let (mut img, _) = star_field(3, 1.7);
        for k in 0..15 {
            let (x, y) = (10 + 27 * k, 150 + (k % 3) * 40);
            img.set(x, y, img.get(x, y) + 3000.0);
            img.set(x + 1, y, img.get(x + 1, y) + 2000.0);
        }
        // Galaxies midway between the grid's stars, so they do not blend.
        for k in 0..3 {
            gaussian_star(&mut img, 97.0 + 96.0 * k as f64, 241.0, 80_000.0, 4.0);
        }
        gaussian_star(&mut img, 200.0, 140.0, 2.0e6, 1.7);
        for p in img.pixels_mut() {
            *p = p.min(60000.0);
        }
        let det = detect(&img, &DetectParams::default()).unwrap();
        let true_fwhm = FWHM_PER_SIGMA * (1.7f64 * 1.7 + 1.0 / 12.0).sqrt();
        assert!(
            (det.seeing_fwhm / true_fwhm - 1.0).abs() < 0.05,
            "seeing {}",
            det.seeing_fwhm
        );
        let sat = det
            .sources
            .iter()
            .find(|s| (s.x - 200.0).hypot(s.y - 140.0) < 2.0)
            .unwrap();
        assert!(sat.saturated);
        let cr = det
            .sources
            .iter()
            .find(|s| (s.x - 10.5).hypot(s.y - 150.0) < 1.5)
            .unwrap();
        assert!(!cr.point_like && cr.fwhm < 2.0, "{cr:?}");
        let gal = det
            .sources
            .iter()
            .find(|s| (s.x - 193.0).hypot(s.y - 241.0) < 1.5)
            .unwrap();
        assert!(!gal.point_like, "{gal:?}");
    }

    #[test]
    fn odd_images_do_not_panic() {
        let flat = Image::filled(50, 40, 100.0);
        let det = detect(&flat, &DetectParams::default()).unwrap();
        assert!(det.sources.is_empty() && det.seeing_fwhm == 0.0);
        let mut tiny = Image::filled(3, 2, 10.0);
        tiny.set(1, 1, 1e5);
        assert!(detect(&tiny, &DetectParams::default()).is_ok());
        assert!(detect(&Image::filled(8, 8, f32::NAN), &DetectParams::default()).is_err());
        let json = serde_json::to_string(&det).unwrap();
        assert!(json.contains("\"seeing_fwhm\":0.0"));
    }
}
