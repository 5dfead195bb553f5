//! Synthetic images for the tests: pixel-integrated Gaussian
//! stars, exponential galaxies, cosmic rays and seeded noise.

use crate::image::Image;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The tests' random number generator.
pub(crate) type TestRng = ChaCha8Rng;

/// A seeded generator.
pub(crate) fn rng(seed: u64) -> TestRng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// One standard normal deviate (Box–Muller).
pub(crate) fn normal(r: &mut TestRng) -> f64 {
    let u1: f64 = r.gen_range(f64::EPSILON..1.0);
    let u2: f64 = r.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Adds Gaussian noise of σ `sigma` to every finite pixel.
pub(crate) fn add_noise(img: &mut Image, sigma: f64, r: &mut TestRng) {
    for p in img.pixels_mut() {
        *p += (sigma * normal(r)) as f32;
    }
}

/// Adds Poisson (Gaussian approximation) plus read noise: variance
/// `value / gain + (read_noise_e / gain)²` in ADU².
pub(crate) fn add_ccd_noise(img: &mut Image, gain: f64, read_noise_e: f64, r: &mut TestRng) {
    for p in img.pixels_mut() {
        let v = (*p as f64).max(0.0);
        let var = v / gain + (read_noise_e / gain).powi(2);
        *p += (var.sqrt() * normal(r)) as f32;
    }
}

/// erf to 1.5e-7 (Abramowitz & Stegun 7.1.26).
pub(crate) fn erf(x: f64) -> f64 {
    let s = x.signum();
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    s * y
}

/// Fraction of a 1-D Gaussian (centre `c`, σ `s`) on pixel `i`.
fn pixel_fraction(i: i64, c: f64, s: f64) -> f64 {
    let k = 1.0 / (std::f64::consts::SQRT_2 * s);
    0.5 * (erf((i as f64 + 0.5 - c) * k) - erf((i as f64 - 0.5 - c) * k))
}

/// Adds a pixel-integrated circular Gaussian of total `flux`.
pub(crate) fn gaussian_star(img: &mut Image, x: f64, y: f64, flux: f64, sigma: f64) {
    let r = (6.0 * sigma).ceil() as i64 + 1;
    let (w, h) = (img.width() as i64, img.height() as i64);
    let (cx, cy) = (x.round() as i64, y.round() as i64);
    let fx: Vec<(i64, f64)> = (cx - r..=cx + r)
        .filter(|&i| i >= 0 && i < w)
        .map(|i| (i, pixel_fraction(i, x, sigma)))
        .collect();
    for j in (cy - r..=cy + r).filter(|&j| j >= 0 && j < h) {
        let fy = pixel_fraction(j, y, sigma);
        for &(i, f) in &fx {
            let v = img.get(i as usize, j as usize) + (flux * f * fy) as f32;
            img.set(i as usize, j as usize, v);
        }
    }
}

/// The PSF of one epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Psf {
    /// Gaussian of this FWHM (px).
    Gaussian(f64),
}

impl Psf {
    /// FWHM in px.
    pub(crate) fn fwhm(&self) -> f64 {
        match *self {
            Psf::Gaussian(f) => f,
        }
    }

    /// Adds a point source of `flux` at `(x, y)`.
    pub(crate) fn add_star(&self, img: &mut Image, x: f64, y: f64, flux: f64) {
        match *self {
            Psf::Gaussian(f) => gaussian_star(img, x, y, flux, f / 2.354_820_045),
        }
    }

    /// The PSF integrated over the pixels of a `(2r+1)²` stamp, sum 1.
    pub(crate) fn stamp(&self, r: usize) -> Vec<f64> {
        let n = 2 * r + 1;
        let mut img = Image::new(n, n);
        self.add_star(&mut img, r as f64, r as f64, 1.0);
        let total: f64 = img.pixels().iter().map(|&v| v as f64).sum();
        img.pixels().iter().map(|&v| v as f64 / total).collect()
    }
}

/// An object of a simulated field, in A's pixel frame.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Thing {
    /// A star; `flux_b` differs from `flux` for a variable.
    Star {
        x: f64,
        y: f64,
        flux: f64,
        flux_b: f64,
    },
    /// An exponential galaxy of half-light radius `re`, axis ratio `q`,
    /// position angle `pa` (rad).
    Galaxy {
        x: f64,
        y: f64,
        flux: f64,
        re: f64,
        q: f64,
        pa: f64,
    },
    /// A supernova: in B only.
    Supernova { x: f64, y: f64, flux: f64 },
}

/// How one epoch is observed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch {
    /// The PSF.
    pub psf: Psf,
    /// Sky level, ADU.
    pub sky: f64,
    /// Flux scale relative to A.
    pub scale: f64,
    /// Map from A's frame to this epoch's frame.
    pub map: crate::catalog::Affine,
    /// Include supernovae (epoch B).
    pub is_b: bool,
    /// Cosmic rays to add.
    pub cosmics: usize,
}

/// Renders one epoch of `things` with CCD noise (gain 2, read noise 5 e-)
/// and saturation at 60000 ADU.
pub(crate) fn render(w: usize, h: usize, things: &[Thing], ep: &Epoch, seed: u64) -> Image {
    let mut img = Image::new(w, h);
    let psf_stamp_r = (4.0 * ep.psf.fwhm()).ceil() as usize;
    let kernel = ep.psf.stamp(psf_stamp_r);
    for t in things {
        match *t {
            Thing::Star { x, y, flux, flux_b } => {
                let (u, v) = ep.map.apply(x, y);
                let f = if ep.is_b { flux_b } else { flux };
                ep.psf.add_star(&mut img, u, v, f * ep.scale);
            }
            Thing::Supernova { x, y, flux } if ep.is_b => {
                let (u, v) = ep.map.apply(x, y);
                ep.psf.add_star(&mut img, u, v, flux * ep.scale);
            }
            Thing::Galaxy {
                x,
                y,
                flux,
                re,
                q,
                pa,
            } => {
                let (u, v) = ep.map.apply(x, y);
                add_galaxy(
                    &mut img,
                    u,
                    v,
                    flux * ep.scale,
                    re,
                    q,
                    pa,
                    &kernel,
                    psf_stamp_r,
                );
            }
            _ => {}
        }
    }
    for p in img.pixels_mut() {
        *p += ep.sky as f32;
    }
    let mut r = rng(seed);
    add_ccd_noise(&mut img, 2.0, 5.0, &mut r);
    for _ in 0..ep.cosmics {
        let (x, y) = (r.gen_range(5..w - 5), r.gen_range(5..h - 5));
        let len = r.gen_range(1..=3);
        let (dx, dy) = [(1, 0), (0, 1), (1, 1)][r.gen_range(0..3)];
        for k in 0..len {
            let amp = r.gen_range(500.0..5000.0f32);
            let (px, py) = (x + k * dx, y + k * dy);
            img.set(px, py, img.get(px, py) + amp);
        }
    }
    for p in img.pixels_mut() {
        *p = p.min(60000.0);
    }
    img
}

/// Adds an exponential galaxy convolved with the PSF `kernel` (a
/// `(2kr+1)²` stamp) by direct convolution of a stamp.
#[allow(clippy::too_many_arguments)]
fn add_galaxy(
    img: &mut Image,
    x: f64,
    y: f64,
    flux: f64,
    re: f64,
    q: f64,
    pa: f64,
    kernel: &[f64],
    kr: usize,
) {
    let h_scale = re / 1.678;
    let gr = (6.0 * re).ceil() as i64;
    let n = (2 * gr + 1) as usize;
    let (cx, cy) = (x.round() as i64, y.round() as i64);
    let (sp, cp) = pa.sin_cos();
    let mut intr = vec![0f64; n * n];
    for j in 0..n {
        for i in 0..n {
            let mut s = 0.0;
            for sj in 0..2 {
                for si in 0..2 {
                    let dx = (cx - gr + i as i64) as f64 - 0.25 + 0.5 * si as f64 - x;
                    let dy = (cy - gr + j as i64) as f64 - 0.25 + 0.5 * sj as f64 - y;
                    let (u, v) = (cp * dx + sp * dy, -sp * dx + cp * dy);
                    s += (-(u * u + v * v / (q * q)).sqrt() / h_scale).exp();
                }
            }
            intr[j * n + i] = s;
        }
    }
    let total: f64 = intr.iter().sum();
    let kn = 2 * kr + 1;
    let (w, h) = (img.width() as i64, img.height() as i64);
    for j in 0..n + kn - 1 {
        for i in 0..n + kn - 1 {
            let (px, py) = (
                cx - gr - kr as i64 + i as i64,
                cy - gr - kr as i64 + j as i64,
            );
            if px < 0 || py < 0 || px >= w || py >= h {
                continue;
            }
            let mut s = 0.0;
            for kj in 0..kn {
                let sj = j as i64 - kj as i64;
                if sj < 0 || sj >= n as i64 {
                    continue;
                }
                for ki in 0..kn {
                    let si = i as i64 - ki as i64;
                    if si >= 0 && si < n as i64 {
                        s += intr[sj as usize * n + si as usize] * kernel[kj * kn + ki];
                    }
                }
            }
            let v = img.get(px as usize, py as usize) + (flux * s / total) as f32;
            img.set(px as usize, py as usize, v);
        }
    }
}

/// A random field of `w × h` px in A's frame: stars (power-law fluxes,
/// density per Mpx), galaxies, some variables, and supernovae near
/// galaxies with flux set by `sn_flux(i)`.
pub(crate) fn random_field(
    w: usize,
    h: usize,
    stars_per_mpx: f64,
    galaxies: usize,
    sns: usize,
    seed: u64,
    sn_flux: impl Fn(usize) -> f64,
) -> Vec<Thing> {
    let mut r = rng(seed);
    let mut out = Vec::new();
    let area = (w * h) as f64 / 1e6;
    let nstars = (stars_per_mpx * area) as usize;
    for _ in 0..nstars {
        // N(>F) ∝ F^-0.8 above 500 ADU, capped at 3e6 (a few saturate).
        let u: f64 = r.gen_range(1e-4..1.0);
        let flux = (500.0 * u.powf(-1.0 / 0.8)).min(3.0e6);
        let variable = r.gen::<f64>() < 0.03 && flux > 3000.0;
        let flux_b = if variable {
            flux * r.gen_range(0.5..2.0)
        } else {
            flux
        };
        out.push(Thing::Star {
            x: r.gen_range(-20.0..w as f64 + 20.0),
            y: r.gen_range(-20.0..h as f64 + 20.0),
            flux,
            flux_b,
        });
    }
    let mut gal = Vec::new();
    for _ in 0..galaxies {
        let (x, y) = (
            r.gen_range(40.0..w as f64 - 40.0),
            r.gen_range(40.0..h as f64 - 40.0),
        );
        let re = r.gen_range(2.0..6.0);
        let g = Thing::Galaxy {
            x,
            y,
            flux: 2000.0 * 30f64.powf(r.gen()),
            re,
            q: r.gen_range(0.4..1.0),
            pa: r.gen_range(0.0..std::f64::consts::PI),
        };
        gal.push((x, y, re));
        out.push(g);
    }
    for (i, &(gx, gy, re)) in gal.iter().enumerate().take(sns) {
        let (d, ang) = (
            re * r.gen_range(0.3..1.5),
            r.gen_range(0.0..std::f64::consts::TAU),
        );
        out.push(Thing::Supernova {
            x: gx + d * ang.cos(),
            y: gy + d * ang.sin(),
            flux: sn_flux(i),
        });
    }
    out
}

/// One pair exactly as `supernova generate --seed SEED --min-size MIN
/// --max-size MAX` writes its pair `index + 1` (the scene does not depend
/// on how many pairs are generated): the drawn scene with its truth, and
/// the rendered images A and B.
pub(crate) fn generated_pair(
    seed: u64,
    min_size: usize,
    max_size: usize,
    index: usize,
) -> (crate::generate::Scene, Image, Image) {
    use crate::generate::{draw_scene, render, GenerateConfig};
    use crate::layout::Epoch;
    let config = GenerateConfig {
        seed,
        pairs: index + 1,
        min_size,
        max_size,
        ..GenerateConfig::default()
    };
    let entry = &crate::manifest::Manifest::plan(&config).pairs[index];
    let scene = draw_scene(&config, index, entry.width, entry.height);
    let a = render(&scene, Epoch::A, &config, index);
    let b = render(&scene, Epoch::B, &config, index);
    (scene, a, b)
}
