//! Point-spread functions and galaxy profiles, rendered into a canvas of
//! expected ADU per pixel.
//!
//! Every object is drawn only within a cutout around it, never over the
//! whole image. Point sources are integrated over each pixel: exactly (with
//! error functions) for a Gaussian PSF, by 5×5 sub-pixel sampling near the
//! core of a Moffat PSF. Galaxies are elliptical exponential discs written
//! as a sum of concentric Gaussians, so that convolving with a Gaussian PSF
//! only adds the PSF variance to each component; for a Moffat PSF its
//! Gaussian-equivalent sigma (FWHM / 2.3548) is used, which leaves out the
//! Moffat wings of galaxies (they are far below the galaxy's own extent).
//! Pixel integration of galaxies is approximated by adding a box's
//! variance, 1/12 px², to each component.

use std::f64::consts::PI;
use std::sync::OnceLock;

/// FWHM / sigma of a Gaussian, `2 sqrt(2 ln 2)`.
pub(crate) const FWHM_PER_SIGMA: f64 = 2.354_820_045_030_949;

/// Per-pixel contribution below which an object's wings are not drawn
/// (ADU): two orders of magnitude below any sky noise the generator makes.
pub(crate) const NEGLIGIBLE_ADU: f64 = 0.05;

/// No object's cutout is larger than this radius (pixels).
const MAX_CUTOUT_RADIUS: f64 = 250.0;

/// Within this many FWHM of a Moffat's centre pixels are sub-sampled.
const MOFFAT_SUBSAMPLE_FWHM: f64 = 1.5;

/// Sub-samples per axis near a Moffat core.
const MOFFAT_SUBSAMPLES: usize = 5;

/// The PSF family of a pair (both epochs share it; only the width differs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PsfShape {
    /// A circular Gaussian.
    Gaussian,
    /// A circular Moffat profile `(1 + r²/α²)^-β`, with broader wings.
    Moffat { beta: f64 },
}

/// A circular PSF of given shape and FWHM (pixels).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Psf {
    pub shape: PsfShape,
    pub fwhm: f64,
}

/// Expected ADU per pixel of one image, row-major, before noise.
#[derive(Debug, Clone)]
pub(crate) struct Canvas {
    pub width: usize,
    pub height: usize,
    pub data: Vec<f64>,
}

/// Pixel bounds `[x0, x1] × [y0, y1]` (inclusive) of a cutout within a canvas.
#[derive(Debug, Clone, Copy)]
struct Window {
    x0: usize,
    x1: usize,
    y0: usize,
    y1: usize,
}

impl Canvas {
    /// A canvas filled with a flat sky level.
    pub(crate) fn new(width: usize, height: usize, sky: f64) -> Canvas {
        Canvas {
            width,
            height,
            data: vec![sky; width * height],
        }
    }

    /// The pixels within `radius` of `(x, y)` (as a square), or `None` if
    /// the square misses the canvas.
    fn window(&self, x: f64, y: f64, radius: f64) -> Option<Window> {
        // A NaN would turn into a cutout spanning the whole image.
        if !(x.is_finite() && y.is_finite() && radius.is_finite()) {
            return None;
        }
        let (w, h) = (self.width as f64, self.height as f64);
        let (xl, xh, yl, yh) = (
            (x - radius).ceil(),
            (x + radius).floor(),
            (y - radius).ceil(),
            (y + radius).floor(),
        );
        if xh < 0.0 || yh < 0.0 || xl > w - 1.0 || yl > h - 1.0 || xl > xh || yl > yh {
            return None;
        }
        Some(Window {
            x0: xl.max(0.0) as usize,
            x1: xh.min(w - 1.0) as usize,
            y0: yl.max(0.0) as usize,
            y1: yh.min(h - 1.0) as usize,
        })
    }
}

impl Psf {
    /// Gaussian-equivalent sigma, FWHM / 2.3548.
    pub(crate) fn sigma(&self) -> f64 {
        self.fwhm / FWHM_PER_SIGMA
    }

    /// The noise-equivalent area `1 / ∫ P²` (px²): optimal PSF-weighted
    /// photometry of a faint source on sky noise `n` per pixel has noise
    /// `n · sqrt(area)`. `4πσ²` for a Gaussian; for a Moffat profile
    /// `πα² (2β − 1) / (β − 1)²`, larger than a Gaussian's of the same
    /// FWHM because of its wings.
    pub(crate) fn noise_equivalent_area(&self) -> f64 {
        match self.shape {
            PsfShape::Gaussian => 4.0 * PI * self.sigma().powi(2),
            PsfShape::Moffat { beta } => {
                let a2 = self.moffat_alpha(beta).powi(2);
                PI * a2 * (2.0 * beta - 1.0) / (beta - 1.0).powi(2)
            }
        }
    }

    /// The Moffat scale α for which the FWHM comes out right.
    fn moffat_alpha(&self, beta: f64) -> f64 {
        self.fwhm / (2.0 * (2f64.powf(1.0 / beta) - 1.0).sqrt())
    }

    /// Fraction of the flux per px² at squared radius `r2` (unit integral).
    pub(crate) fn density(&self, r2: f64) -> f64 {
        match self.shape {
            PsfShape::Gaussian => {
                let s2 = self.sigma().powi(2);
                (-r2 / (2.0 * s2)).exp() / (2.0 * PI * s2)
            }
            PsfShape::Moffat { beta } => {
                let a2 = self.moffat_alpha(beta).powi(2);
                (beta - 1.0) / (PI * a2) * (1.0 + r2 / a2).powf(-beta)
            }
        }
    }

    /// The radius beyond which a source of `flux` adds less than `level`
    /// ADU per px² (0 if it never reaches `level`).
    pub(crate) fn radius_above(&self, flux: f64, level: f64) -> f64 {
        let ratio = flux * self.density(0.0) / level;
        if ratio <= 1.0 {
            return 0.0;
        }
        match self.shape {
            PsfShape::Gaussian => self.sigma() * (2.0 * ratio.ln()).sqrt(),
            PsfShape::Moffat { beta } => {
                self.moffat_alpha(beta) * (ratio.powf(1.0 / beta) - 1.0).sqrt()
            }
        }
    }

    /// Peak pixel value of a centred source of `flux` (ADU), ignoring
    /// pixelisation: what decides saturation.
    pub(crate) fn peak(&self, flux: f64) -> f64 {
        flux * self.density(0.0)
    }

    /// Cutout radius for a source of `flux`: at least 5 FWHM, more where
    /// bright wings are still above [`NEGLIGIBLE_ADU`].
    fn cutout_radius(&self, flux: f64) -> f64 {
        (5.0 * self.fwhm)
            .max(self.radius_above(flux, NEGLIGIBLE_ADU))
            .min(MAX_CUTOUT_RADIUS)
    }

    /// Adds a point source of total `flux` (ADU) centred at `(x, y)`.
    pub(crate) fn add_point(&self, canvas: &mut Canvas, x: f64, y: f64, flux: f64) {
        let Some(win) = canvas.window(x, y, self.cutout_radius(flux)) else {
            return;
        };
        match self.shape {
            PsfShape::Gaussian => self.add_gaussian_point(canvas, win, x, y, flux),
            PsfShape::Moffat { .. } => self.add_sampled_point(canvas, win, x, y, flux),
        }
    }

    /// A Gaussian is separable, so the exact pixel integral is a product of
    /// two 1-D integrals.
    fn add_gaussian_point(&self, canvas: &mut Canvas, win: Window, x: f64, y: f64, flux: f64) {
        let scale = 1.0 / (self.sigma() * std::f64::consts::SQRT_2);
        let along = |lo: usize, hi: usize, c: f64| -> Vec<f64> {
            (lo..=hi)
                .map(|p| normal_mass((p as f64 - 0.5 - c) * scale, (p as f64 + 0.5 - c) * scale))
                .collect()
        };
        let fx = along(win.x0, win.x1, x);
        let fy = along(win.y0, win.y1, y);
        for (row, wy) in (win.y0..=win.y1).zip(&fy) {
            let line = &mut canvas.data[row * canvas.width..][win.x0..=win.x1];
            for (px, wx) in line.iter_mut().zip(&fx) {
                *px += flux * wy * wx;
            }
        }
    }

    /// Pixel integral by sub-sampling where the profile curves strongly,
    /// and the centre value elsewhere.
    fn add_sampled_point(&self, canvas: &mut Canvas, win: Window, x: f64, y: f64, flux: f64) {
        let core2 = (MOFFAT_SUBSAMPLE_FWHM * self.fwhm).powi(2);
        let n = MOFFAT_SUBSAMPLES;
        let step = 1.0 / n as f64;
        for row in win.y0..=win.y1 {
            let dy = row as f64 - y;
            for col in win.x0..=win.x1 {
                let dx = col as f64 - x;
                let value = if dx * dx + dy * dy > core2 {
                    self.density(dx * dx + dy * dy)
                } else {
                    let mut sum = 0.0;
                    for i in 0..n {
                        let sy = dy - 0.5 + (i as f64 + 0.5) * step;
                        for j in 0..n {
                            let sx = dx - 0.5 + (j as f64 + 0.5) * step;
                            sum += self.density(sx * sx + sy * sy);
                        }
                    }
                    sum / (n * n) as f64
                };
                canvas.data[row * canvas.width + col] += flux * value;
            }
        }
    }
}

/// `∫ N(0, 1/2) between a and b` in units where the integrand is
/// `exp(-t²)/√π`, i.e. `(erf(b) - erf(a)) / 2`, computed with erfc on the
/// tail side to avoid cancellation far from the centre.
fn normal_mass(a: f64, b: f64) -> f64 {
    if a >= 0.0 {
        0.5 * (erfc(a) - erfc(b))
    } else if b <= 0.0 {
        0.5 * (erfc(-b) - erfc(-a))
    } else {
        1.0 - 0.5 * (erfc(-a) + erfc(b))
    }
}

/// Complementary error function with relative error below 1.2e-7
/// (Chebyshev fit from Numerical Recipes, `erfcc`).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Shape of an elliptical exponential galaxy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GalaxyShape {
    /// Half-light radius along the major axis (pixels).
    pub half_light: f64,
    /// Minor over major axis, in (0, 1].
    pub axis_ratio: f64,
    /// Position angle of the major axis, radians from +x towards +y.
    pub angle: f64,
}

/// Half-light radius of an exponential disc in units of its scale length.
const EXP_HALF_LIGHT_PER_SCALE: f64 = 1.678_346_990_016_661;

/// `(flux fraction, variance in scale lengths²)` of the Gaussians whose sum
/// approximates a unit-flux exponential disc.
///
/// Derived, not fitted: `e^{-r} = ∫₀^∞ e^{-r²/2v} (2πv)^{-1/2} e^{-v/2} dv`
/// (the Laplace distribution as a normal variance mixture), discretised by
/// the trapezoid rule in `ln v`. Each node `v_k` carries flux
/// `∝ v_k^{3/2} e^{-v_k/2}`; the grid spans the flux-carrying range and the
/// result is renormalised to unit flux.
fn exponential_mixture() -> &'static [(f64, f64)] {
    static MIXTURE: OnceLock<Vec<(f64, f64)>> = OnceLock::new();
    MIXTURE.get_or_init(|| {
        const LN_V_MIN: f64 = -4.0;
        const LN_V_MAX: f64 = 3.8;
        const NODES: usize = 14;
        let step = (LN_V_MAX - LN_V_MIN) / (NODES - 1) as f64;
        let mut parts: Vec<(f64, f64)> = (0..NODES)
            .map(|k| {
                let v = (LN_V_MIN + k as f64 * step).exp();
                (v.powf(1.5) * (-v / 2.0).exp(), v)
            })
            .collect();
        let total: f64 = parts.iter().map(|p| p.0).sum();
        for p in &mut parts {
            p.0 /= total;
        }
        parts
    })
}

/// Adds a galaxy of total `flux` (ADU) centred at `(x, y)`, seen through a
/// PSF of Gaussian sigma `psf_sigma`.
pub(crate) fn add_galaxy(
    canvas: &mut Canvas,
    x: f64,
    y: f64,
    flux: f64,
    shape: GalaxyShape,
    psf_sigma: f64,
) {
    let scale = shape.half_light / EXP_HALF_LIGHT_PER_SCALE;
    let (sin, cos) = shape.angle.sin_cos();
    // The PSF and the pixel box blur every component alike.
    let blur = psf_sigma * psf_sigma + 1.0 / 12.0;
    for &(fraction, v) in exponential_mixture() {
        let major = v * scale * scale;
        let minor = major * shape.axis_ratio * shape.axis_ratio;
        // Covariance R diag(major, minor) Rᵀ plus the isotropic blur.
        let sxx = major * cos * cos + minor * sin * sin + blur;
        let syy = major * sin * sin + minor * cos * cos + blur;
        let sxy = (major - minor) * sin * cos;
        add_gaussian_blob(canvas, x, y, flux * fraction, [sxx, sxy, syy]);
    }
}

/// Adds an elliptical Gaussian of total `flux` with covariance
/// `[sxx, sxy, syy]`, evaluated at pixel centres.
fn add_gaussian_blob(canvas: &mut Canvas, x: f64, y: f64, flux: f64, [sxx, sxy, syy]: [f64; 3]) {
    let det = sxx * syy - sxy * sxy;
    let norm = flux / (2.0 * PI * det.sqrt());
    if norm <= NEGLIGIBLE_ADU {
        return;
    }
    // Beyond this Mahalanobis radius the blob is below NEGLIGIBLE_ADU.
    let reach2 = 2.0 * (norm / NEGLIGIBLE_ADU).ln();
    let radius = (reach2 * sxx.max(syy)).sqrt().min(MAX_CUTOUT_RADIUS);
    let Some(win) = canvas.window(x, y, radius) else {
        return;
    };
    let (ixx, ixy, iyy) = (syy / det, -sxy / det, sxx / det);
    for row in win.y0..=win.y1 {
        let dy = row as f64 - y;
        let line = &mut canvas.data[row * canvas.width..];
        for (col, px) in line.iter_mut().enumerate().take(win.x1 + 1).skip(win.x0) {
            let dx = col as f64 - x;
            let m2 = ixx * dx * dx + 2.0 * ixy * dx * dy + iyy * dy * dy;
            if m2 < reach2 {
                *px += norm * (-0.5 * m2).exp();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(c: &Canvas) -> f64 {
        c.data.iter().sum()
    }

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122),
            (1.0, 0.157_299_207),
            (2.0, 0.004_677_735),
            (-1.0, 1.842_700_793),
        ] {
            assert!(
                (erfc(x) - want).abs() < 2e-7 * want.max(1e-3),
                "erfc({x}) = {}",
                erfc(x)
            );
        }
    }

    #[test]
    fn point_sources_conserve_flux_and_centre() {
        for shape in [PsfShape::Gaussian, PsfShape::Moffat { beta: 3.0 }] {
            let psf = Psf { shape, fwhm: 2.5 };
            let mut c = Canvas::new(101, 101, 0.0);
            psf.add_point(&mut c, 50.3, 49.8, 1.0e5);
            let sum = total(&c);
            // A Moffat loses (1 + R²/α²)^(1-β) beyond the cutout radius R.
            assert!((sum / 1.0e5 - 1.0).abs() < 0.01, "{shape:?}: {sum}");
            let cx: f64 = c
                .data
                .iter()
                .enumerate()
                .map(|(i, v)| (i % 101) as f64 * v)
                .sum::<f64>()
                / sum;
            let cy: f64 = c
                .data
                .iter()
                .enumerate()
                .map(|(i, v)| (i / 101) as f64 * v)
                .sum::<f64>()
                / sum;
            assert!(
                (cx - 50.3).abs() < 0.01 && (cy - 49.8).abs() < 0.01,
                "{cx} {cy}"
            );
        }
    }

    #[test]
    fn fwhm_is_as_asked() {
        for shape in [PsfShape::Gaussian, PsfShape::Moffat { beta: 2.5 }] {
            let psf = Psf { shape, fwhm: 3.0 };
            let half = psf.density(0.0) / 2.0;
            assert!(
                (psf.density(1.5 * 1.5) / half - 1.0).abs() < 1e-9,
                "{shape:?}"
            );
            let r = psf.radius_above(1.0, half);
            assert!((r - 1.5).abs() < 1e-9, "{shape:?} {r}");
        }
    }

    #[test]
    fn noise_equivalent_area_is_one_over_the_integral_of_the_squared_psf() {
        for shape in [
            PsfShape::Gaussian,
            PsfShape::Moffat { beta: 2.5 },
            PsfShape::Moffat { beta: 4.0 },
        ] {
            let psf = Psf { shape, fwhm: 3.0 };
            // Midpoint rule on a fine grid out to where the wings vanish.
            let (step, reach) = (0.05, 200.0);
            let n = (2.0 * reach / step) as i64;
            let mut sum = 0.0;
            for i in 0..n {
                let x = -reach + (i as f64 + 0.5) * step;
                for j in 0..n / 40 {
                    let y = (j as f64 + 0.5) * step * 20.0;
                    sum += psf.density(x * x + y * y).powi(2) * step * step * 20.0 * 2.0;
                }
            }
            let area = psf.noise_equivalent_area();
            assert!(
                (1.0 / sum / area - 1.0).abs() < 0.02,
                "{shape:?}: {} vs {area}",
                1.0 / sum
            );
        }
        let gaussian = Psf {
            shape: PsfShape::Gaussian,
            fwhm: 3.0,
        }
        .noise_equivalent_area();
        let moffat = Psf {
            shape: PsfShape::Moffat { beta: 2.5 },
            fwhm: 3.0,
        }
        .noise_equivalent_area();
        assert!(
            moffat > 1.8 * gaussian,
            "Moffat wings widen the area: {moffat} vs {gaussian}"
        );
    }

    #[test]
    fn point_source_off_the_edge_is_clipped_not_panicking() {
        let psf = Psf {
            shape: PsfShape::Gaussian,
            fwhm: 3.0,
        };
        let mut c = Canvas::new(20, 10, 0.0);
        psf.add_point(&mut c, -1.0, 5.0, 1000.0);
        psf.add_point(&mut c, 500.0, 5.0, 1000.0);
        psf.add_point(&mut c, 10.0, -500.0, 1000.0);
        let s = total(&c);
        assert!(s > 100.0 && s < 500.0, "{s}");
    }

    #[test]
    fn mixture_approximates_an_exponential() {
        let mix = exponential_mixture();
        assert!((mix.iter().map(|m| m.0).sum::<f64>() - 1.0).abs() < 1e-12);
        // Surface brightness of the unit-flux disc e^{-r}/(2π) at r.
        for r in [0.5f64, 1.0, 2.0, 4.0, 6.0] {
            let model: f64 = mix
                .iter()
                .map(|&(f, v)| f / (2.0 * PI * v) * (-r * r / (2.0 * v)).exp())
                .sum();
            let want = (-r).exp() / (2.0 * PI);
            assert!(
                (model / want - 1.0).abs() < 0.02,
                "r = {r}: {model} vs {want}"
            );
        }
    }

    #[test]
    fn galaxy_flux_and_half_light_radius() {
        let mut c = Canvas::new(201, 201, 0.0);
        let shape = GalaxyShape {
            half_light: 5.0,
            axis_ratio: 1.0,
            angle: 0.3,
        };
        add_galaxy(&mut c, 100.0, 100.0, 1.0e6, shape, 0.0);
        let sum = total(&c);
        assert!((sum / 1.0e6 - 1.0).abs() < 0.01, "{sum}");
        let inside: f64 = c
            .data
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                (((i % 201) as f64 - 100.0).powi(2) + ((i / 201) as f64 - 100.0).powi(2)) <= 25.0
            })
            .map(|(_, v)| v)
            .sum();
        assert!((inside / sum - 0.5).abs() < 0.05, "{}", inside / sum);
    }
}
