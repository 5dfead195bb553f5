//! The scene of one pair: its observing conditions, the A → B frame, and
//! the stars and galaxies drawn over the field.

use std::f64::consts::PI;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};

use super::*;
use crate::layout::Epoch;
use crate::psf::{GalaxyShape, Psf, PsfShape};

/// Observing conditions of one epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conditions {
    /// Sky level (ADU).
    pub sky: f64,
    pub psf: Psf,
    /// Object fluxes relative to A (1 for A).
    pub transparency: f64,
}

/// The A → B map: rotation about the centre, then a shift.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub shift: (f64, f64),
    /// Radians, counter-clockwise in pixel coordinates.
    pub angle: f64,
    pub centre: (f64, f64),
}

impl Frame {
    pub(crate) fn apply(&self, x: f64, y: f64) -> (f64, f64) {
        let (s, c) = self.angle.sin_cos();
        let (dx, dy) = (x - self.centre.0, y - self.centre.1);
        (
            self.centre.0 + c * dx - s * dy + self.shift.0,
            self.centre.1 + s * dx + c * dy + self.shift.1,
        )
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Star {
    pub x: f64,
    pub y: f64,
    pub flux_a: f64,
    /// On A's flux scale; differs from `flux_a` only for variables.
    pub flux_b: f64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Galaxy {
    pub x: f64,
    pub y: f64,
    pub flux: f64,
    pub shape: GalaxyShape,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Supernova {
    pub x: f64,
    pub y: f64,
    /// On A's flux scale.
    pub flux: f64,
}

/// Up to three touching pixels `(x, y, ADU)`.
pub(crate) type CosmicRay = Vec<(usize, usize, f64)>;

/// Everything drawn for one pair, in A's frame and flux scale.
#[derive(Debug, Clone)]
pub(crate) struct Scene {
    pub width: usize,
    pub height: usize,
    pub a: Conditions,
    pub b: Conditions,
    pub a_to_b: Frame,
    pub stars: Vec<Star>,
    /// Indices into `stars`.
    pub variables: Vec<usize>,
    pub galaxies: Vec<Galaxy>,
    pub supernovae: Vec<Supernova>,
    pub cosmic_a: Vec<CosmicRay>,
    pub cosmic_b: Vec<CosmicRay>,
}

impl Scene {
    pub(crate) fn conditions(&self, epoch: Epoch) -> &Conditions {
        match epoch {
            Epoch::A => &self.a,
            Epoch::B => &self.b,
        }
    }

    /// Where an A-frame position lands in `epoch`'s image.
    pub(crate) fn to_epoch(&self, epoch: Epoch, x: f64, y: f64) -> (f64, f64) {
        match epoch {
            Epoch::A => (x, y),
            Epoch::B => self.a_to_b.apply(x, y),
        }
    }

    /// The noise-equivalent area of the broader PSF: the difference image
    /// has (about) that PSF once the sharper image is matched to it.
    pub(super) fn noise_area(&self) -> f64 {
        self.a
            .psf
            .noise_equivalent_area()
            .max(self.b.psf.noise_equivalent_area())
    }

    pub(super) fn inside_margin(&self, x: f64, y: f64) -> bool {
        let (w, h) = (self.width as f64 - 1.0, self.height as f64 - 1.0);
        (EDGE_MARGIN..=w - EDGE_MARGIN).contains(&x) && (EDGE_MARGIN..=h - EDGE_MARGIN).contains(&y)
    }

    /// Positions (A frame) of all transients so far.
    pub(super) fn transient_positions(&self) -> Vec<(f64, f64)> {
        let sn = self.supernovae.iter().map(|s| (s.x, s.y));
        sn.chain(
            self.variables
                .iter()
                .map(|&i| (self.stars[i].x, self.stars[i].y)),
        )
        .collect()
    }
}

/// Per-pixel sky noise of an epoch on A's flux scale (ADU).
pub(super) fn sky_noise(c: &Conditions, config: &GenerateConfig) -> f64 {
    let g = config.gain;
    (c.sky / g + (config.read_noise / g).powi(2)).sqrt() / c.transparency
}

pub(super) fn uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    rng.gen_range(lo..hi)
}

pub(super) fn log_uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    (lo.ln() + rng.gen::<f64>() * (hi / lo).ln()).exp()
}

pub(super) fn draw_conditions(
    rng: &mut ChaCha8Rng,
    width: usize,
    height: usize,
) -> (Conditions, Conditions, Frame) {
    let shape = if rng.gen_bool(0.5) {
        PsfShape::Gaussian
    } else {
        PsfShape::Moffat {
            beta: uniform(rng, MOFFAT_BETA_RANGE),
        }
    };
    let fwhm_a = uniform(rng, FWHM_RANGE);
    let fwhm_b = loop {
        let f = uniform(rng, FWHM_RANGE);
        if (f - fwhm_a).abs() >= MIN_FWHM_DIFFERENCE {
            break f;
        }
    };
    let a = Conditions {
        sky: uniform(rng, SKY_RANGE),
        psf: Psf {
            shape,
            fwhm: fwhm_a,
        },
        transparency: 1.0,
    };
    let b = Conditions {
        sky: uniform(rng, SKY_RANGE),
        psf: Psf {
            shape,
            fwhm: fwhm_b,
        },
        transparency: uniform(rng, TRANSPARENCY_RANGE),
    };
    let frame = Frame {
        shift: (
            uniform(rng, (-MAX_SHIFT, MAX_SHIFT)),
            uniform(rng, (-MAX_SHIFT, MAX_SHIFT)),
        ),
        angle: uniform(rng, (-MAX_ROTATION_DEG, MAX_ROTATION_DEG)).to_radians(),
        centre: ((width as f64 - 1.0) / 2.0, (height as f64 - 1.0) / 2.0),
    };
    (a, b, frame)
}

/// A Poisson count with mean `density` per megapixel of the field (image
/// plus border).
pub(super) fn field_count(rng: &mut ChaCha8Rng, scene: &Scene, density: f64) -> usize {
    let area =
        (scene.width as f64 + 2.0 * FIELD_BORDER) * (scene.height as f64 + 2.0 * FIELD_BORDER);
    let mean = density * area / 1.0e6;
    match Poisson::new(mean) {
        Ok(p) => p.sample(rng) as usize,
        Err(_) => 0, // mean 0
    }
}

pub(super) fn field_position(rng: &mut ChaCha8Rng, scene: &Scene) -> (f64, f64) {
    let x = uniform(
        rng,
        (-FIELD_BORDER, scene.width as f64 - 1.0 + FIELD_BORDER),
    );
    let y = uniform(
        rng,
        (-FIELD_BORDER, scene.height as f64 - 1.0 + FIELD_BORDER),
    );
    (x, y)
}

pub(super) fn interior_position(rng: &mut ChaCha8Rng, scene: &Scene) -> (f64, f64) {
    let x = uniform(rng, (EDGE_MARGIN, scene.width as f64 - 1.0 - EDGE_MARGIN));
    let y = uniform(rng, (EDGE_MARGIN, scene.height as f64 - 1.0 - EDGE_MARGIN));
    (x, y)
}

/// The flux that brings a point source's peak in A to saturation.
pub(super) fn saturating_flux(scene: &Scene, config: &GenerateConfig) -> f64 {
    (config.saturate - scene.a.sky) / scene.a.psf.peak(1.0)
}

pub(super) fn draw_stars(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &Scene,
    faint: f64,
) -> Vec<Star> {
    let n = field_count(rng, scene, config.stars_per_megapixel);
    let brightest = BRIGHTEST_OVER_SATURATING * saturating_flux(scene, config);
    // Inverse CDF of a power law truncated to [faint, brightest].
    let tail = (faint / brightest).powf(STAR_SLOPE);
    (0..n)
        .map(|_| {
            let (x, y) = field_position(rng, scene);
            let u: f64 = rng.gen();
            let flux = faint * (1.0 - u * (1.0 - tail)).powf(-1.0 / STAR_SLOPE);
            Star {
                x,
                y,
                flux_a: flux,
                flux_b: flux,
            }
        })
        .collect()
}

pub(super) fn draw_galaxy(rng: &mut ChaCha8Rng, (x, y): (f64, f64), faint: f64) -> Galaxy {
    let (lo, hi) = GALAXY_FLUX_OVER_FAINT;
    Galaxy {
        x,
        y,
        flux: log_uniform(rng, (lo * faint, hi * faint)),
        shape: GalaxyShape {
            half_light: uniform(rng, GALAXY_HALF_LIGHT),
            axis_ratio: uniform(rng, GALAXY_AXIS_RATIO),
            angle: uniform(rng, (0.0, PI)),
        },
    }
}

pub(super) fn draw_galaxies(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &Scene,
    faint: f64,
) -> Vec<Galaxy> {
    let n = field_count(rng, scene, config.galaxies_per_megapixel);
    (0..n)
        .map(|_| {
            let pos = field_position(rng, scene);
            draw_galaxy(rng, pos, faint)
        })
        .collect()
}
