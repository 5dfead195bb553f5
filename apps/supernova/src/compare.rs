//! The matched-filter difference of one tile (step 7.2).
//!
//! Two parts. The numeric *kernel* ([`significance`], built from
//! [`noise_floor`], [`difference_and_variance`], [`filter_pass_horizontal`],
//! [`filter_pass_vertical`], [`raw_snr`], [`noise_scale`]) is also ported to
//! a GPU kernel, so it is deliberately simple and data-parallel and follows
//! this exact recipe:
//!
//! 1. `D = b − a`; `v0` = (robust σ of the finite `D`)²;
//!    `V = v0 + (max(a,0) + max(b,0)) / gain` (NaN where `a` or `b` is);
//! 2. `w[j] = exp(−j²/2σ²)`, `j = −r..=r`, `r = max(1, ceil(3σ))`, sum 1;
//! 3. `N = D ⊛ (w⊗w)`, `W = V ⊛ (w²⊗w²)`, each a horizontal then a
//!    vertical pass accumulating in `f32`, `j` from −r to r; an output is
//!    finite only if its whole window is inside the tile and finite;
//! 4. `S_raw = N / sqrt(W)`; `c` = robust σ of the finite `S_raw` (it
//!    absorbs the noise correlation left by resampling and convolution);
//!    `S = S_raw / c`.
//!
//! The CPU passes loop over taps outside and pixels inside, which keeps
//! each pixel's sum in the prescribed order while letting the compiler
//! vectorise; a GPU port that sums per pixel in the same order (with or
//! without fused multiply-add) agrees to rounding.
//!
//! The *post-processing* ([`find_residuals`]) turns `S` into
//! [`Residual`]s: 8-connected groups above the threshold, minus dipoles,
//! cosmic rays, edge artefacts and excluded (saturated) stars.

use crate::background::robust_sigma;
use crate::catalog::{Residual, Tile};
use crate::components;
use crate::detect::FWHM_PER_SIGMA;
use crate::image::Image;

/// What the kernel produces for one tile.
#[derive(Debug, Clone, PartialEq)]
pub struct Significance {
    /// `D = b − a`.
    pub difference: Image,
    /// `N`, the matched-filtered difference.
    pub filtered: Image,
    /// `S`, the normalised significance (NaN where not computable).
    pub snr: Image,
    /// Noise floor: robust variance of `D` (ADU²).
    pub v0: f32,
    /// `c`, the robust σ of `S_raw` that `S` was divided by.
    pub scale: f32,
    /// The PSF σ the filter was built for (px); post-processing needs it
    /// for fluxes and the shape tests.
    pub psf_sigma: f32,
}

/// Matched-filter weights: `exp(−j²/2σ²)` for `j = −r..=r`,
/// `r = max(1, ceil(3σ))`, normalised to sum 1. A σ that is not positive
/// and finite gives the identity filter `[0, 1, 0]`.
pub fn matched_filter_weights(psf_sigma: f32) -> Vec<f32> {
    if !(psf_sigma > 0.0 && psf_sigma.is_finite()) {
        return vec![0.0, 1.0, 0.0];
    }
    let r = ((3.0 * psf_sigma).ceil() as usize).max(1);
    let two_s2 = 2.0 * psf_sigma * psf_sigma;
    let mut w: Vec<f32> = (0..=2 * r)
        .map(|k| {
            let j = k as f32 - r as f32;
            (-(j * j) / two_s2).exp()
        })
        .collect();
    let sum: f32 = w.iter().sum();
    w.iter_mut().for_each(|v| *v /= sum);
    w
}

/// The weights squared, for filtering the variance.
pub fn squared_weights(w: &[f32]) -> Vec<f32> {
    w.iter().map(|v| v * v).collect()
}

/// `(Σ w²)²`: `N` at a point source's centre over its flux (for a PSF equal
/// to `w⊗w`), i.e. the divisor of the matched-filter flux estimate.
pub fn flux_normalisation(w: &[f32]) -> f32 {
    let s: f32 = w.iter().map(|v| v * v).sum();
    s * s
}

/// `v0`: the robust variance of `b − a` over every pixel where both are
/// finite (NaN if there is none). Images of different sizes are compared
/// over `a`'s size, `b` missing beyond its edges.
pub fn noise_floor(a: &Image, b: &Image) -> f32 {
    let d: Vec<f32> = (0..a.height())
        .flat_map(|y| (0..a.width()).map(move |x| (x, y)))
        .map(|(x, y)| pixel_b(b, x, y) - a.get(x, y))
        .collect();
    let s = robust_sigma(&d);
    s * s
}

fn pixel_b(b: &Image, x: usize, y: usize) -> f32 {
    if x < b.width() && y < b.height() {
        b.get(x, y)
    } else {
        f32::NAN
    }
}

/// `D = b − a` and `V = v0 + (max(a,0) + max(b,0)) / gain`, NaN where `a`
/// or `b` is. A `gain` that is not positive and finite drops the source
/// term (`V = v0`).
pub fn difference_and_variance(a: &Image, b: &Image, v0: f32, gain: f32) -> (Image, Image) {
    let (w, h) = (a.width(), a.height());
    let inv_gain = if gain > 0.0 && gain.is_finite() {
        1.0 / gain
    } else {
        0.0
    };
    let mut d = Image::filled(w, h, f32::NAN);
    let mut v = Image::filled(w, h, f32::NAN);
    for y in 0..h {
        for x in 0..w {
            let (pa, pb) = (a.get(x, y), pixel_b(b, x, y));
            if pa.is_finite() && pb.is_finite() {
                d.set(x, y, pb - pa);
                v.set(x, y, v0 + (pa.max(0.0) + pb.max(0.0)) * inv_gain);
            }
        }
    }
    (d, v)
}

/// Horizontal pass: `out(x, y) = Σ_{j=−r..r} w[j+r] · src(x+j, y)`, summed
/// in that order in `f32`; NaN where the window leaves the row (and, by
/// propagation, where it holds a NaN).
pub fn filter_pass_horizontal(src: &Image, w: &[f32]) -> Image {
    let (width, height) = (src.width(), src.height());
    let r = w.len() / 2;
    let mut out = Image::filled(width, height, f32::NAN);
    if width < w.len() {
        return out;
    }
    let n = width - 2 * r;
    for y in 0..height {
        let row = src.row(y);
        let acc = &mut out.pixels_mut()[y * width + r..y * width + r + n];
        acc.iter_mut().for_each(|a| *a = 0.0);
        for (j, &wj) in w.iter().enumerate() {
            for (a, &s) in acc.iter_mut().zip(&row[j..j + n]) {
                *a += wj * s;
            }
        }
    }
    out
}

/// Vertical pass: `out(x, y) = Σ_{j=−r..r} w[j+r] · src(x, y+j)`, summed in
/// that order in `f32`; NaN where the window leaves the column.
pub fn filter_pass_vertical(src: &Image, w: &[f32]) -> Image {
    let (width, height) = (src.width(), src.height());
    let r = w.len() / 2;
    let mut out = Image::filled(width, height, f32::NAN);
    if height < w.len() {
        return out;
    }
    for y in r..height - r {
        let acc = &mut out.pixels_mut()[y * width..(y + 1) * width];
        acc.iter_mut().for_each(|a| *a = 0.0);
        for (j, &wj) in w.iter().enumerate() {
            let row = src.row(y + j - r);
            for (a, &s) in acc.iter_mut().zip(row) {
                *a += wj * s;
            }
        }
    }
    out
}

/// `S_raw = N / sqrt(W)`, NaN where either is NaN or `W ≤ 0`.
pub fn raw_snr(n: &Image, wv: &Image) -> Image {
    let px: Vec<f32> = n
        .pixels()
        .iter()
        .zip(wv.pixels())
        .map(|(&nv, &wvv)| if wvv > 0.0 { nv / wvv.sqrt() } else { f32::NAN })
        .collect();
    Image::from_pixels(n.width(), n.height(), px).expect("same size")
}

/// `c`: the robust σ of the finite values of `S_raw`, or 1 when that is
/// not a positive number (no finite values, constant data).
pub fn noise_scale(s_raw: &Image) -> f32 {
    let c = robust_sigma(s_raw.pixels());
    if c > 0.0 && c.is_finite() {
        c
    } else {
        1.0
    }
}

/// The whole kernel for one pair of tiles `a` (A′) and `b` (B′).
pub fn significance(a: &Image, b: &Image, psf_sigma: f32, gain: f32) -> Significance {
    let w = matched_filter_weights(psf_sigma);
    let w2 = squared_weights(&w);
    let v0 = noise_floor(a, b);
    let (d, v) = difference_and_variance(a, b, v0, gain);
    let n = filter_pass_vertical(&filter_pass_horizontal(&d, &w), &w);
    let wv = filter_pass_vertical(&filter_pass_horizontal(&v, &w2), &w2);
    significance_from_filtered(d, n, &wv, v0, psf_sigma)
}

/// The kernel's last stage, for a caller that computed `D`, `N` and `W`
/// itself (e.g. on a GPU): `S = (N / sqrt(W)) / c`.
pub fn significance_from_filtered(
    d: Image,
    n: Image,
    wv: &Image,
    v0: f32,
    psf_sigma: f32,
) -> Significance {
    let mut s = raw_snr(&n, wv);
    let scale = noise_scale(&s);
    s.pixels_mut().iter_mut().for_each(|v| *v /= scale);
    Significance {
        difference: d,
        filtered: n,
        snr: s,
        v0,
        scale,
        psf_sigma,
    }
}

/// Tunables of the residual search.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareParams {
    /// Least peak `S` of a residual (default 5.0). Pure noise filtered to a
    /// PSF σ of 1–2 px gives ≈ 1 peak above 5 per 4 Mpx image but ≈ 70
    /// above 4, so 5 keeps precision; a source of true S/N 5 is still found
    /// about half the time and one of S/N 6 nine times in ten.
    pub threshold: f32,
    /// Fewest connected pixels above the threshold (default 1): a faint
    /// real source barely exceeds it in one or two pixels.
    pub min_pixels: usize,
    /// Residuals whose peak is within (filter radius + this) px of a NaN
    /// `D` or the tile border are edge artefacts (default 2).
    pub edge_margin: usize,
    /// Radius, in FWHM of the PSF, searched for a dipole's negative lobe
    /// (default 2: the lobe of a misaligned star is ≈ 1 FWHM away).
    pub dipole_radius_fwhm: f64,
    /// A residual is a dipole if `S` falls below −this × its peak nearby
    /// (default 0.5; a misalignment lobe is as deep as the peak is high) …
    pub dipole_fraction: f32,
    /// … and below −this (default 3.5): noise alone reaches −3.5 within 2
    /// FWHM only ≈ 0.5 % of the time, so faint real sources are not
    /// thrown away for an ordinary noise dip.
    pub dipole_floor: f32,
    /// A residual is a cosmic ray if `D` at its peak exceeds this × the
    /// peak a PSF of its flux would have (default 2.0): a point source
    /// reaches ≤ 1 (less when off-centre), a 1-pixel hit π·σ² (≥ 2.7 for
    /// σ ≥ 0.93 px) …
    pub cosmic_ratio: f32,
    /// … and the excess over that PSF peak is above this many σ of the
    /// local pixel noise (default 3), so noise cannot make a faint source
    /// look sharp.
    pub cosmic_sigma: f32,
}

impl Default for CompareParams {
    fn default() -> Self {
        CompareParams {
            threshold: 5.0,
            min_pixels: 1,
            edge_margin: 2,
            dipole_radius_fwhm: 2.0,
            dipole_fraction: 0.5,
            dipole_floor: 3.5,
            cosmic_ratio: 2.0,
            cosmic_sigma: 3.0,
        }
    }
}

/// Significant positive residuals of one tile, in whole-image A
/// coordinates, sorted by (y, x); empty if the three images of `sig` differ
/// in size. A residual's position is the S-weighted
/// centroid of its component's pixels within one PSF FWHM of its peak. `exclusions` are circles `(x, y, radius)`
/// in A's frame (saturated stars) inside which nothing is reported.
pub fn find_residuals(
    sig: &Significance,
    tile: &Tile,
    exclusions: &[(f64, f64, f64)],
    params: &CompareParams,
) -> Vec<Residual> {
    let s = &sig.snr;
    let (w, h) = (s.width(), s.height());
    let same = |i: &Image| i.width() == w && i.height() == h;
    if !same(&sig.difference) || !same(&sig.filtered) {
        // A malformed Significance (e.g. from a foreign kernel) has no answer.
        return Vec::new();
    }
    let mask: Vec<bool> = s.pixels().iter().map(|&v| v > params.threshold).collect();
    let comps = components::label(&mask, w, h, params.min_pixels);
    let shape = Shape::new(sig);
    let mut out: Vec<Residual> = comps
        .iter()
        .filter_map(|pix| residual(sig, &shape, pix, tile, exclusions, params))
        .collect();
    out.sort_by(|a, b| a.y.total_cmp(&b.y).then(a.x.total_cmp(&b.x)));
    out
}

/// Filter geometry needed by the residual tests.
struct Shape {
    /// Filter radius r.
    radius: usize,
    /// Σ w² (1-D).
    sum_w2: f32,
    /// PSF σ, px.
    sigma: f32,
}

impl Shape {
    fn new(sig: &Significance) -> Shape {
        let w = matched_filter_weights(sig.psf_sigma);
        let sigma = if sig.psf_sigma > 0.0 && sig.psf_sigma.is_finite() {
            sig.psf_sigma
        } else {
            0.5
        };
        Shape {
            radius: w.len() / 2,
            sum_w2: flux_normalisation(&w).sqrt(),
            sigma,
        }
    }
}

/// Measures one component and applies the rejection tests.
fn residual(
    sig: &Significance,
    shape: &Shape,
    pix: &[usize],
    tile: &Tile,
    exclusions: &[(f64, f64, f64)],
    p: &CompareParams,
) -> Option<Residual> {
    let s = &sig.snr;
    let w = s.width();
    let mut peak_at = pix[0];
    for &q in pix {
        let v = s.pixels()[q];
        if v > s.pixels()[peak_at] || (v == s.pixels()[peak_at] && q < peak_at) {
            peak_at = q;
        }
    }
    let (px, py) = (peak_at % w, peak_at / w);
    let peak = s.pixels()[peak_at];
    let (cx, cy) = centroid(s, pix, px, py, FWHM_PER_SIGMA as f32 * shape.sigma);
    let (x, y) = (tile.x0 as f64 + cx, tile.y0 as f64 + cy);
    if near_edge(&sig.difference, px, py, shape.radius + p.edge_margin)
        || exclusions
            .iter()
            .any(|&(ex, ey, r)| (x - ex).hypot(y - ey) <= r)
        || is_dipole(s, px, py, peak, shape, p)
    {
        return None;
    }
    let n_peak = sig.filtered.get(px, py);
    let flux = n_peak / (shape.sum_w2 * shape.sum_w2);
    if is_cosmic_ray(sig, shape, px, py, peak, flux, p) {
        return None;
    }
    Some(Residual {
        x,
        y,
        flux: flux as f64,
        snr: peak as f64,
        pixels: pix.len() as u32,
    })
}

/// S-weighted centroid of the component's pixels within `radius` of its
/// peak `(px, py)`. Limiting it to the core keeps a supernova's position
/// when its component has merged with a neighbouring residual.
fn centroid(s: &Image, pix: &[usize], px: usize, py: usize, radius: f32) -> (f64, f64) {
    let w = s.width();
    let r2 = (radius * radius).max(2.0) as f64;
    let (mut sw, mut sx, mut sy) = (0.0f64, 0.0f64, 0.0f64);
    for &q in pix {
        let (dx, dy) = ((q % w) as f64 - px as f64, (q / w) as f64 - py as f64);
        if dx * dx + dy * dy <= r2 {
            let v = s.pixels()[q] as f64;
            sw += v;
            sx += v * dx;
            sy += v * dy;
        }
    }
    if sw > 0.0 {
        (px as f64 + sx / sw, py as f64 + sy / sw)
    } else {
        // Only with a non-positive threshold; the peak is then the best guess.
        (px as f64, py as f64)
    }
}

/// Some pixel within `margin` of `(x, y)` is off the tile or has no data.
fn near_edge(d: &Image, x: usize, y: usize, margin: usize) -> bool {
    if x < margin || y < margin || x + margin >= d.width() || y + margin >= d.height() {
        return true;
    }
    (y - margin..=y + margin).any(|yy| {
        d.row(yy)[x - margin..=x + margin]
            .iter()
            .any(|v| !v.is_finite())
    })
}

/// A deep negative lobe near the peak: a misaligned or mis-subtracted star.
fn is_dipole(s: &Image, x: usize, y: usize, peak: f32, shape: &Shape, p: &CompareParams) -> bool {
    let r = (p.dipole_radius_fwhm * FWHM_PER_SIGMA * shape.sigma as f64).ceil() as usize;
    let limit = -(p.dipole_fraction * peak).max(p.dipole_floor);
    let (x0, x1) = (x.saturating_sub(r), (x + r).min(s.width() - 1));
    let (y0, y1) = (y.saturating_sub(r), (y + r).min(s.height() - 1));
    let r2 = (r * r) as isize;
    (y0..=y1).any(|yy| {
        (x0..=x1).any(|xx| {
            let (dx, dy) = (xx as isize - x as isize, yy as isize - y as isize);
            dx * dx + dy * dy <= r2 && s.get(xx, yy) < limit
        })
    })
}

/// Much sharper than the PSF: `D` at the peak well above the peak of a
/// PSF-shaped source of the measured flux. The local pixel noise of `D` is
/// recovered from the kernel's outputs: `sqrt(W) = N / S_raw`, and
/// `W ≈ V · (Σw²)²`.
fn is_cosmic_ray(
    sig: &Significance,
    shape: &Shape,
    x: usize,
    y: usize,
    peak: f32,
    flux: f32,
    p: &CompareParams,
) -> bool {
    let d_peak = sig.difference.get(x, y);
    let model_peak = flux / (2.0 * std::f32::consts::PI * shape.sigma * shape.sigma);
    let s_raw = peak * sig.scale;
    let sigma_d = (sig.filtered.get(x, y) / s_raw).abs() / shape.sum_w2;
    d_peak > p.cosmic_ratio * model_peak && d_peak - model_peak > p.cosmic_sigma * sigma_d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{add_noise, gaussian_star, rng};

    fn tile_for(img: &Image) -> Tile {
        Tile {
            index: 0,
            x0: 1000,
            y0: 2000,
            width: img.width(),
            height: img.height(),
            own_x: (1000, 1000 + img.width()),
            own_y: (2000, 2000 + img.height()),
            candidates: 1,
        }
    }

    fn noise_pair(seed: u64, w: usize, h: usize) -> (Image, Image) {
        let mut a = Image::new(w, h);
        let mut b = Image::new(w, h);
        add_noise(&mut a, 10.0, &mut rng(seed));
        add_noise(&mut b, 10.0, &mut rng(seed + 1000));
        (a, b)
    }

    #[test]
    fn weights_follow_the_recipe() {
        let w = matched_filter_weights(1.5);
        assert_eq!(w.len(), 2 * 5 + 1);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((w[4] / w[5] - (-1.0f32 / 4.5).exp()).abs() < 1e-6);
        assert_eq!(matched_filter_weights(0.1).len(), 3);
        assert_eq!(matched_filter_weights(f32::NAN), vec![0.0, 1.0, 0.0]);
    }

    #[test]
    fn pure_noise_has_unit_significance_and_no_detections() {
        let (a, b) = noise_pair(21, 400, 400);
        let sig = significance(&a, &b, 1.5, 1e6);
        assert!((sig.v0 - 200.0).abs() < 8.0, "v0 {}", sig.v0);
        // White noise: S_raw is already unit-variance, so c ≈ 1.
        assert!((sig.scale - 1.0).abs() < 0.04, "scale {}", sig.scale);
        let finite: Vec<f32> = sig
            .snr
            .pixels()
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .collect();
        assert_eq!(finite.len(), 390 * 390);
        assert!((robust_sigma(&finite) - 1.0).abs() < 0.01);
        let rms = (finite.iter().map(|v| v * v).sum::<f32>() / finite.len() as f32).sqrt();
        assert!((rms - 1.0).abs() < 0.05, "rms {rms}");
        assert!(finite.iter().filter(|&&v| v > 5.0).count() <= 2);
        let found = find_residuals(&sig, &tile_for(&a), &[], &CompareParams::default());
        assert!(found.len() <= 1, "{found:?}");
    }

    #[test]
    fn finds_an_snr8_point_source() {
        let (a, mut b) = noise_pair(31, 200, 160);
        let sigma = 1.5;
        // Matched-filter S/N = F / (σ_D · sqrt(4π) · σ) for a Gaussian PSF.
        let flux = 8.0 * 200f64.sqrt() * (4.0 * std::f64::consts::PI).sqrt() * sigma;
        let (x, y) = (83.3, 71.7);
        gaussian_star(&mut b, x, y, flux, sigma);
        let sig = significance(&a, &b, sigma as f32, 1e6);
        let found = find_residuals(&sig, &tile_for(&a), &[], &CompareParams::default());
        assert_eq!(found.len(), 1, "{found:?}");
        let r = &found[0];
        assert!((r.x - 1000.0 - x).hypot(r.y - 2000.0 - y) < 0.5, "{r:?}");
        assert!((r.snr - 8.0).abs() < 2.5, "{r:?}");
        assert!((r.flux / flux - 1.0).abs() < 0.35, "{r:?} vs {flux}");
        // Inside an exclusion circle it disappears.
        let ex = [(1000.0 + x, 2000.0 + y, 5.0)];
        assert!(find_residuals(&sig, &tile_for(&a), &ex, &CompareParams::default()).is_empty());
    }

    #[test]
    fn rejects_cosmic_rays_dipoles_and_edges() {
        let (mut a, mut b) = noise_pair(41, 200, 160);
        let sigma = 1.5;
        // Single- and two-pixel cosmic rays.
        b.set(40, 40, b.get(40, 40) + 400.0);
        b.set(120, 50, b.get(120, 50) + 300.0);
        b.set(121, 50, b.get(121, 50) + 250.0);
        // A bright star shifted by 0.4 px between the epochs.
        gaussian_star(&mut a, 60.0, 110.0, 40_000.0, sigma);
        gaussian_star(&mut b, 60.4, 110.0, 40_000.0, sigma);
        // A real source next to a hole in the data.
        let flux = 20.0 * 200f64.sqrt() * (4.0 * std::f64::consts::PI).sqrt() * sigma;
        gaussian_star(&mut b, 150.0, 120.0, flux, sigma);
        for y in 100..140 {
            for x in 155..165 {
                a.set(x, y, f32::NAN);
            }
        }
        let sig = significance(&a, &b, sigma as f32, 2.0);
        let raw = CompareParams {
            cosmic_ratio: f32::INFINITY,
            dipole_fraction: f32::INFINITY,
            edge_margin: 0,
            ..CompareParams::default()
        };
        let tile = tile_for(&a);
        let all = find_residuals(&sig, &tile, &[], &raw);
        assert!(
            all.len() >= 3,
            "test objects must pass the threshold: {all:?}"
        );
        let kept = find_residuals(&sig, &tile, &[], &CompareParams::default());
        assert!(kept.is_empty(), "{kept:?}");
    }
}
