//! PSF and flux equalisation of the two epochs (pipeline steps 5 and 6).
//!
//! The two steps run in parallel as separate activities, so
//! [`equalize_a`] and [`equalize_b`] each need only their own image and the
//! [`Alignment`]. Both subtract their image's sky map, replace cosmic-ray
//! pixels (see [`clean_cosmic_rays`]), and broaden the sharper image with a
//! Gaussian so that both end with the broader image's seeing (the target):
//! σ_kernel² = σ_target² − σ_own², σ = FWHM / 2.3548. [`equalize_b`]
//! also resamples B onto A's pixel grid and divides by the flux ratio, so
//! that `B' − A'` is zero for every unchanged object.
//!
//! Cosmic rays are removed *before* the broadening on purpose: once a
//! 1-pixel hit is convolved to nearly the target PSF it looks like a star
//! and no later test can tell it from a supernova.
//!
//! Resampling uses Lanczos-3 (6×6 taps, normalised to sum 1). Bicubic
//! (Keys a = −0.5) keeps flux and second moments exactly but damps the core
//! of a PSF with FWHM 2.2 px by ~3 % of its peak; Lanczos-3 errs by ≲ 1 %
//! (0.5 % at FWHM 3 px; most of it a phase-dependent shift of ≤ 0.02 px),
//! and with its negative lobes its kernel's second
//! moment is ≈ 0 at every sub-pixel phase (|Δσ²| < 0.001 px²), so the PSF
//! is not measurably broadened: the broadening is therefore ignored in
//! the matching kernel. Its ringing around sharp features (saturated stars,
//! leftover cosmic rays) is harmless: saturated stars are excluded later.

use crate::background::{Background, BackgroundParams};
use crate::catalog::{Affine, Alignment};
use crate::detect::FWHM_PER_SIGMA;
use crate::filter;
use crate::image::Image;

/// Tunables of the equalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct EqualizeParams {
    /// Sky mesh (the same defaults as detection).
    pub background: BackgroundParams,
    /// Replace cosmic-ray pixels before broadening (default true).
    pub clean_cosmic_rays: bool,
    /// Significance, in sky σ, a pixel must exceed both absolutely and
    /// above `sharpness × ratio_psf × mean of its 8 neighbours` to be a
    /// cosmic ray (default 5): hits faint enough to survive are too faint
    /// to reach the residual threshold after filtering.
    pub cosmic_sigma: f32,
    /// Safety factor on the largest centre-to-neighbours ratio a PSF of the
    /// image's seeing can produce (default 1.5): a star's peak pixel never
    /// exceeds that ratio, a 1–3 px hit exceeds it by far (ratio 4–8 for a
    /// line of 3 px; ≈ 2.3 is the PSF limit at FWHM 2.2 px).
    pub cosmic_sharpness: f32,
    /// Matching kernels narrower than this σ (px) are skipped (default
    /// 0.1): they change the PSF variance by < 0.01 px², far below the
    /// seeing measurement's own error.
    pub min_kernel_sigma: f64,
}

impl Default for EqualizeParams {
    fn default() -> Self {
        EqualizeParams {
            background: BackgroundParams::default(),
            clean_cosmic_rays: true,
            cosmic_sigma: 5.0,
            cosmic_sharpness: 1.5,
            min_kernel_sigma: 0.1,
        }
    }
}

/// Gaussian σ of the common PSF: the broader seeing / 2.3548 (0 if unknown).
pub fn target_sigma(al: &Alignment) -> f64 {
    let f = al.fwhm_a.max(al.fwhm_b);
    if f.is_finite() && f > 0.0 {
        f / FWHM_PER_SIGMA
    } else {
        0.0
    }
}

/// σ of the Gaussian that broadens an image of seeing `own` to the broader
/// of `own` and `other` (FWHM, px); 0 if `own` is already the broader or a
/// seeing is unknown (≤ 0).
pub fn matching_sigma(own: f64, other: f64) -> f64 {
    if !(own > 0.0 && other > own && other.is_finite()) {
        return 0.0;
    }
    let (so, st) = (own / FWHM_PER_SIGMA, other / FWHM_PER_SIGMA);
    (st * st - so * so).sqrt()
}

/// A′: `a` minus its sky, cosmic rays removed, broadened to the common
/// PSF if A is the sharper epoch. An image with no finite pixel comes back
/// all NaN.
pub fn equalize_a(a: &Image, al: &Alignment, params: &EqualizeParams) -> Image {
    let Some(img) = sky_subtracted(a, al.fwhm_a, params) else {
        return Image::filled(a.width(), a.height(), f32::NAN);
    };
    broaden(img, matching_sigma(al.fwhm_a, al.fwhm_b), params)
}

/// B′ on A's grid (`width × height`): `b` minus its sky, cosmic rays
/// removed, resampled with Lanczos-3 at `al.a_to_b(x, y)` for every A pixel
/// `(x, y)` (NaN where any of the 6×6 taps is off B or NaN), broadened to
/// the common PSF if B is the sharper epoch, and divided by the flux ratio
/// (and multiplied by the map's area factor |det|, ≈ 1) so that it is in
/// A's flux scale.
pub fn equalize_b(
    b: &Image,
    al: &Alignment,
    width: usize,
    height: usize,
    params: &EqualizeParams,
) -> Image {
    let Some(img) = sky_subtracted(b, al.fwhm_b, params) else {
        return Image::filled(width, height, f32::NAN);
    };
    let mut img = resample_lanczos3(&img, &al.a_to_b, width, height);
    let [ca, cb, _, cd, ce, _] = al.a_to_b.coefficients;
    let area = (ca * ce - cb * cd).abs();
    let ratio = if al.flux_ratio.is_finite() && al.flux_ratio > 0.0 {
        al.flux_ratio
    } else {
        1.0
    };
    let scale = (if area.is_finite() && area > 0.0 {
        area
    } else {
        1.0
    } / ratio) as f32;
    for p in img.pixels_mut() {
        *p *= scale;
    }
    broaden(img, matching_sigma(al.fwhm_b, al.fwhm_a), params)
}

/// Sky-subtracted copy with cosmic rays replaced; `None` if no pixel is finite.
fn sky_subtracted(img: &Image, fwhm: f64, params: &EqualizeParams) -> Option<Image> {
    let bg = Background::estimate(img, &params.background).ok()?;
    let mut out = img.clone();
    bg.subtract_from(&mut out);
    if params.clean_cosmic_rays {
        clean_cosmic_rays(
            &mut out,
            &bg.noise_map(),
            fwhm,
            params.cosmic_sigma,
            params.cosmic_sharpness,
        );
    }
    Some(out)
}

fn broaden(img: Image, sigma: f64, params: &EqualizeParams) -> Image {
    if sigma < params.min_kernel_sigma {
        return img;
    }
    filter::convolve_nan_aware(&img, &filter::discrete_gaussian(sigma))
}

/// Largest ratio of a star's peak pixel to the mean of its 8 neighbours
/// for seeing `fwhm` (px): a Gaussian centred on the pixel. An unknown
/// seeing is taken as 2.2 px, the sharpest expected, which flags least.
pub fn psf_peak_ratio(fwhm: f64) -> f32 {
    let f = if fwhm > 0.0 && fwhm.is_finite() {
        fwhm
    } else {
        2.2
    };
    let s2 = (f / FWHM_PER_SIGMA).powi(2);
    let mean8 = 0.5 * ((-0.5 / s2).exp() + (-1.0 / s2).exp());
    (1.0 / mean8) as f32
}

/// Replaces cosmic-ray pixels of the sky-subtracted `img` and returns how
/// many were replaced. A pixel `v` is a hit when, with `σ` the local sky
/// noise from `noise` and `m` the mean of its finite 8 neighbours,
/// `v > k·σ` and `v − f·m > k·σ·sqrt(1 + f²/8)` where
/// `f = sharpness × psf_peak_ratio(fwhm)` and `k = sigma`: sharper than any
/// star by the safety factor, and significantly so given the noise of `m`.
/// Hits are replaced by the median of the unflagged finite pixels in their
/// 5×5 neighbourhood; up to three passes catch hits that shielded each other.
pub fn clean_cosmic_rays(
    img: &mut Image,
    noise: &Image,
    fwhm: f64,
    sigma: f32,
    sharpness: f32,
) -> usize {
    let (w, h) = (img.width(), img.height());
    if w < 3 || h < 3 || noise.width() != w || noise.height() != h {
        return 0;
    }
    let f = sharpness * psf_peak_ratio(fwhm);
    let excess_scale = sigma * (1.0 + f * f / 8.0).sqrt();
    let mut total = 0;
    let mut flagged = vec![false; w * h];
    let mut hits = Vec::new();
    for _ in 0..3 {
        hits.clear();
        for y in 1..h - 1 {
            for x in 1..w - 1 {
                let v = img.get(x, y);
                let s = noise.get(x, y);
                // NaN fails `v > σs` as well as faint pixels do.
                let bright = v > sigma * s;
                if !bright || flagged[y * w + x] {
                    continue;
                }
                let (sum, n) = neighbours(img, x, y);
                if n >= 5 && v - f * sum / n as f32 > excess_scale * s {
                    hits.push(y * w + x);
                }
            }
        }
        if hits.is_empty() {
            break;
        }
        for &p in &hits {
            flagged[p] = true;
        }
        let replacements: Vec<f32> = hits
            .iter()
            .map(|&p| local_median(img, &flagged, p % w, p / w))
            .collect();
        for (&p, &v) in hits.iter().zip(&replacements) {
            img.pixels_mut()[p] = v;
        }
        total += hits.len();
    }
    total
}

/// Sum and count of the finite 8-neighbours of an interior pixel.
fn neighbours(img: &Image, x: usize, y: usize) -> (f32, usize) {
    let (mut sum, mut n) = (0.0f32, 0);
    for yy in y - 1..=y + 1 {
        for xx in x - 1..=x + 1 {
            let v = img.get(xx, yy);
            if (xx, yy) != (x, y) && v.is_finite() {
                sum += v;
                n += 1;
            }
        }
    }
    (sum, n)
}

/// Median of the unflagged finite pixels within 2 px; NaN if none.
fn local_median(img: &Image, flagged: &[bool], x: usize, y: usize) -> f32 {
    let w = img.width();
    let mut buf = Vec::with_capacity(25);
    for yy in y.saturating_sub(2)..(y + 3).min(img.height()) {
        for xx in x.saturating_sub(2)..(x + 3).min(w) {
            let v = img.get(xx, yy);
            if !flagged[yy * w + xx] && v.is_finite() {
                buf.push(v);
            }
        }
    }
    crate::background::median_in_place(&mut buf)
}

/// Lanczos-3 weights for taps at offsets −2..=3 from `floor(u)`, where
/// `frac = u − floor(u)`, normalised to sum 1.
fn lanczos3_weights(frac: f64) -> [f32; 6] {
    use std::f64::consts::PI;
    if frac.abs() < 1e-9 {
        // sin(πk) is not exactly 0 in floating point; a sample is itself.
        return [0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
    }
    let mut w = [0f64; 6];
    for (i, wi) in w.iter_mut().enumerate() {
        let d = frac - (i as f64 - 2.0);
        *wi = if d.abs() < 1e-6 {
            1.0
        } else {
            3.0 * (PI * d).sin() * (PI * d / 3.0).sin() / (PI * PI * d * d)
        };
    }
    let total: f64 = w.iter().sum();
    w.map(|v| (v / total) as f32)
}

/// Sub-pixel phases tabulated for resampling. The nearest entry is used, so
/// the phase is rounded by at most 1/8192 px, a shift far below the
/// alignment's own error, while each pixel then costs no trigonometry.
const LANCZOS_STEPS: usize = 4096;

/// `lanczos3_weights` at phases `k / LANCZOS_STEPS`, `k = 0..=LANCZOS_STEPS`.
fn lanczos3_table() -> Vec<[f32; 6]> {
    (0..=LANCZOS_STEPS)
        .map(|k| lanczos3_weights(k as f64 / LANCZOS_STEPS as f64))
        .collect()
}

/// Resamples `src` onto a `width × height` grid: output pixel `(x, y)` is
/// `src` interpolated (Lanczos-3) at `map(x, y)`; NaN where any tap is
/// outside `src` or NaN.
pub fn resample_lanczos3(src: &Image, map: &Affine, width: usize, height: usize) -> Image {
    let table = lanczos3_table();
    let phase = |f: f64| &table[((f * LANCZOS_STEPS as f64).round() as usize).min(LANCZOS_STEPS)];
    let mut out = Image::filled(width, height, f32::NAN);
    let (sw, sh) = (src.width() as f64, src.height() as f64);
    for y in 0..height {
        let row_out = &mut out.pixels_mut()[y * width..(y + 1) * width];
        for (x, o) in row_out.iter_mut().enumerate() {
            let (u, v) = map.apply(x as f64, y as f64);
            // Taps floor(u)−2 ..= floor(u)+3 must all lie inside the source.
            if !(u >= 2.0 && u < sw - 3.0 && v >= 2.0 && v < sh - 3.0) {
                continue;
            }
            let (fu, fv) = (u.floor(), v.floor());
            let (wx, wy) = (phase(u - fu), phase(v - fv));
            let (ix, iy) = (fu as usize - 2, fv as usize - 2);
            let mut acc = 0.0f32;
            for (j, &wyj) in wy.iter().enumerate() {
                let taps = &src.row(iy + j)[ix..ix + 6];
                let racc: f32 = taps.iter().zip(wx).map(|(p, w)| p * w).sum();
                acc += racc * wyj;
            }
            *o = acc;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::background::robust_sigma;
    use crate::detect::adaptive_moments;
    use crate::testutil::{add_noise, gaussian_star, rng};

    fn alignment(t: Affine, fa: f64, fb: f64, ratio: f64) -> Alignment {
        Alignment {
            a_to_b: t,
            matched: 50,
            rejected: 0,
            rms: 0.05,
            fwhm_a: fa,
            fwhm_b: fb,
            flux_ratio: ratio,
        }
    }

    fn measured_fwhm(img: &Image, x: f64, y: f64) -> f64 {
        FWHM_PER_SIGMA * adaptive_moments(img, x, y, 1.5).unwrap().sigma
    }

    #[test]
    fn lanczos_weights_sum_to_one_and_interpolate_samples() {
        for &f in &[0.0, 0.25, 0.5, 0.999_999_9] {
            let w = lanczos3_weights(f);
            assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
        assert_eq!(lanczos3_weights(0.0), [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn resampled_shifted_image_matches_the_unshifted_one() {
        let (w, h) = (160, 120);
        let shift = (3.37, -2.71);
        let stars = [
            (40.0, 40.0, 60_000.0),
            (100.3, 70.6, 30_000.0),
            (75.5, 95.2, 90_000.0),
        ];
        let mut a = Image::filled(w, h, 500.0);
        let mut b = Image::filled(w, h, 800.0);
        for &(x, y, f) in &stars {
            gaussian_star(&mut a, x, y, f, 1.5);
            gaussian_star(&mut b, x + shift.0, y + shift.1, f * 1.1, 1.5);
        }
        add_noise(&mut a, 5.0, &mut rng(5));
        add_noise(&mut b, 5.0, &mut rng(6));
        let t = Affine {
            coefficients: [1.0, 0.0, shift.0, 0.0, 1.0, shift.1],
        };
        let al = alignment(t, 3.6, 3.6, 1.1);
        let pa = equalize_a(&a, &al, &EqualizeParams::default());
        let pb = equalize_b(&b, &al, w, h, &EqualizeParams::default());
        assert!(pb.get(w - 1, 10).is_nan() && pb.get(10, 10).is_finite());
        let diff: Vec<f32> = pa
            .pixels()
            .iter()
            .zip(pb.pixels())
            .map(|(x, y)| y - x)
            .collect();
        let noise = robust_sigma(&diff);
        // Two independent noise fields of σ 5, B's slightly smoothed by interpolation.
        assert!(noise < 5.0 * 2f32.sqrt() * 1.05, "noise {noise}");
        for &(x, y, f) in &stars {
            let peak = f as f32 / (2.0 * std::f32::consts::PI * 1.5 * 1.5);
            let (xi, yi) = (x.round() as usize, y.round() as usize);
            let mut worst = 0f32;
            for yy in yi - 5..=yi + 5 {
                for xx in xi - 5..=xi + 5 {
                    worst = worst.max((pb.get(xx, yy) - pa.get(xx, yy)).abs());
                }
            }
            // Within noise (5σ of the difference) plus 1 % of the peak.
            assert!(
                worst < 5.0 * noise + 0.01 * peak,
                "star {x},{y}: {worst} vs peak {peak}"
            );
        }
    }

    #[test]
    fn equalised_psf_widths_agree() {
        let (w, h) = (120, 120);
        let (sa, sb) = (1.0, 1.9);
        let t = Affine {
            coefficients: [1.0, 0.004, 1.3, -0.004, 1.0, 0.6],
        };
        let mut a = Image::filled(w, h, 100.0);
        let mut b = Image::filled(w, h, 100.0);
        gaussian_star(&mut a, 60.0, 60.0, 1e6, sa);
        let (u, v) = t.apply(60.0, 60.0);
        gaussian_star(&mut b, u, v, 1e6, sb);
        let fa = FWHM_PER_SIGMA * (sa * sa + 1.0 / 12.0f64).sqrt();
        let fb = FWHM_PER_SIGMA * (sb * sb + 1.0 / 12.0f64).sqrt();
        let pa = equalize_a(&a, &alignment(t, fa, fb, 1.0), &EqualizeParams::default());
        let pb = equalize_b(
            &b,
            &alignment(t, fa, fb, 1.0),
            w,
            h,
            &EqualizeParams::default(),
        );
        let (wa, wb) = (
            measured_fwhm(&pa, 60.0, 60.0),
            measured_fwhm(&pb, 60.0, 60.0),
        );
        assert!(
            (wa / wb - 1.0).abs() < 0.05 && (wb / fb - 1.0).abs() < 0.03,
            "{wa} {wb} {fb}"
        );
        // And the other way round: B sharper.
        let pb2 = equalize_b(
            &a,
            &alignment(Affine::IDENTITY, fb, fa, 1.0),
            w,
            h,
            &EqualizeParams::default(),
        );
        let wb2 = measured_fwhm(&pb2, 60.0, 60.0);
        assert!((wb2 / fb - 1.0).abs() < 0.05, "{wb2} vs {fb}");
    }

    #[test]
    fn cosmic_rays_are_replaced_but_stars_kept() {
        let mut img = Image::filled(80, 60, 0.0);
        add_noise(&mut img, 10.0, &mut rng(9));
        gaussian_star(&mut img, 20.0, 20.0, 50_000.0, 0.95);
        gaussian_star(&mut img, 50.3, 30.6, 3_000.0, 0.95);
        img.set(60, 40, 500.0);
        img.set(30, 45, 400.0);
        img.set(31, 45, 350.0);
        img.set(32, 46, 300.0);
        let before = img.clone();
        let noise = Image::filled(80, 60, 10.0);
        let n = clean_cosmic_rays(&mut img, &noise, 2.3, 5.0, 1.5);
        assert_eq!(n, 4);
        assert!(img.get(60, 40).abs() < 40.0 && img.get(31, 45).abs() < 40.0);
        assert_eq!(img.get(20, 20), before.get(20, 20));
        assert_eq!(img.get(50, 31), before.get(50, 31));
    }

    #[test]
    fn degenerate_inputs_give_nan_images() {
        let al = alignment(Affine::IDENTITY, 0.0, 0.0, f64::NAN);
        let nan = Image::filled(10, 10, f32::NAN);
        assert!(equalize_a(&nan, &al, &EqualizeParams::default())
            .pixels()
            .iter()
            .all(|v| v.is_nan()));
        let out = equalize_b(&nan, &al, 7, 5, &EqualizeParams::default());
        assert_eq!((out.width(), out.height()), (7, 5));
        let tiny = equalize_b(
            &Image::filled(3, 3, 1.0),
            &al,
            4,
            4,
            &EqualizeParams::default(),
        );
        assert!(tiny.pixels().iter().all(|v| v.is_nan()));
    }
}
