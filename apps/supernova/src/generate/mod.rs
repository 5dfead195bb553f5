//! Drawing and rendering the synthetic image pairs.
//!
//! [`generate`] renders every pair of the [`Manifest::plan`] once, writes its
//! `a.fits` and `b.fits` into the directory of every site holding it
//! (replicas are byte-identical copies), then `truth.json` and, last,
//! `manifest.json`, so a dataset with a manifest is complete. Existing files
//! are overwritten; stale files from an earlier, larger dataset are not
//! removed.
//!
//! # Determinism
//!
//! Every random choice comes from a ChaCha8 stream keyed by the seed, a
//! purpose (site order, sizes, scene, noise of A, noise of B) and the pair
//! index, never from a shared generator, so the files are byte-identical for
//! a given seed whatever the number of threads or the order they run in.
//!
//! # The model, per pair
//!
//! * Detector: gain, read noise and saturation from the configuration
//!   (default 2 e-/ADU, 5 e-, 60000 ADU), written to the FITS headers.
//! * Sky: flat, drawn uniformly from 800–1500 ADU independently for A and B.
//! * Noise: each pixel's expected electrons (sky + objects, times the gain)
//!   get Poisson noise and Gaussian read noise, and are converted back to
//!   ADU. Pixels are then clipped at the saturation level, which gives
//!   bright stars flat-topped cores (no bleed trails are modelled).
//! * PSF: for the whole pair either a circular Gaussian or, with probability
//!   1/2, a circular Moffat with β uniform in 2.5–4; FWHM uniform in
//!   2.2–4.5 px, drawn separately for A and B and at least 0.3 px apart, so
//!   one epoch is always the sharper.
//! * Geometry: B is A's field moved by a translation uniform in ±15 px on
//!   each axis and a rotation uniform in ±0.3° about the image centre
//!   `((w-1)/2, (h-1)/2)`: `x_B = R(x_A - c) + c + shift`. Objects are drawn
//!   over the image plus a 40 px border, so B's edges show field that A does
//!   not.
//! * Transparency: B's object fluxes are A's times a factor uniform in
//!   0.85–1.15 (the sky is drawn separately).
//! * Stars: a Poisson number with mean `stars_per_megapixel` (default 400)
//!   per megapixel of field; fluxes from a truncated power law
//!   `N(>F) ∝ F^-0.65` from the S/N = 3 point-source flux of A up to 50
//!   times the flux that saturates A's peak, which leaves a handful of
//!   saturated stars per megapixel.
//! * Galaxies: a Poisson number with mean `galaxies_per_megapixel` (default
//!   80) per megapixel; elliptical exponential discs with half-light radius
//!   uniform in 2–6 px (major axis), axis ratio 0.3–1, any orientation, flux
//!   log-uniform from 5 to 300 times the S/N = 3 point-source flux. The PSF
//!   profile is a derived sum of 14 concentric Gaussians, so the PSF
//!   convolution is exact for a Gaussian PSF; a Moffat PSF is replaced by
//!   its Gaussian-equivalent sigma for galaxies only, and pixel integration
//!   is approximated by adding 1/12 px² to each component's variance.
//! * Cosmic rays: per image a number uniform in `[n/2, 3n/2]` for
//!   `n = cosmic_rays_per_image` (default 4), each 1–3 touching pixels of
//!   2000–15000 ADU (later pixels weaker), added after the noise, drawn
//!   independently for A and B, and kept 8 px away from transients so the
//!   truth stays unambiguous.
//! * Supernovae (B only): point sources with B's PSF and transparency. Their
//!   target truth S/N values are stratified so that a quarter lie uniformly
//!   in 3–5 and the rest log-uniformly in 5–40; the flux follows from the
//!   S/N definition. Each is placed near a galaxy: 1–3 half-light radii
//!   (and at least 2 px) from its centre in a random direction, at least
//!   40 px from the edges of A, 12 px from other transients, and clear of
//!   every star by `max(3 FWHM, r + 2 FWHM)` where `r` is where the star's
//!   profile falls below A's sky noise (so well away from saturated stars).
//!   When the existing galaxies offer no such spot a new host galaxy is
//!   added; if none works after many tries the supernova is dropped, so tiny
//!   images may hold fewer than asked.
//! * Variable stars: existing stars at least 40 px from A's edges, at least
//!   10 times the S/N = 3 flux and faint enough never to saturate, change
//!   flux by a factor `1 + u`, `u` uniform in 0.3–2.0: brighter in B with
//!   probability 3/4, otherwise brighter in A by that factor. New stars are
//!   added where too few qualify.
//!
//! Truth S/N is defined in [`crate::truth`]:
//! `|ΔF| / sqrt(NEA (nA² + nB²) + |ΔF|/g)` with NEA the noise-equivalent
//! area of the broader PSF (Moffat wings included) and nA, nB the sky
//! noise per pixel
//! `sqrt(sky/g + (RN/g)²)`, B's divided by its transparency.

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::fits::FitsError;
use crate::layout::{Epoch, DEFAULT_SITES};
use crate::manifest::{Manifest, ManifestError};
use crate::truth::{Truth, TruthError};

mod render;
mod scene;
#[cfg(test)]
mod tests;
mod transients;
mod write;

pub(crate) use render::{pair_truth, render};
pub(crate) use scene::Scene;
use scene::{draw_conditions, draw_galaxies, draw_stars, sky_noise};
use transients::{draw_cosmic_rays, place_supernovae, place_variables};
use write::write_all_pairs;

/// Transients stay this far (pixels) from A's edges.
pub const EDGE_MARGIN: f64 = 40.0;

/// Smallest image side [`generate`] accepts: room for the edge margins.
pub const MIN_IMAGE_SIZE: usize = 96;

/// Largest image side [`generate`] accepts (memory stays below ~1 GB per thread).
pub const MAX_IMAGE_SIZE: usize = 8192;

const SKY_RANGE: (f64, f64) = (800.0, 1500.0);
const FWHM_RANGE: (f64, f64) = (2.2, 4.5);
const MIN_FWHM_DIFFERENCE: f64 = 0.3;
const MOFFAT_BETA_RANGE: (f64, f64) = (2.5, 4.0);
const MAX_SHIFT: f64 = 15.0;
const MAX_ROTATION_DEG: f64 = 0.3;
const TRANSPARENCY_RANGE: (f64, f64) = (0.85, 1.15);
/// Objects are drawn this far beyond A's edges so B's shifted view is full.
const FIELD_BORDER: f64 = 40.0;
/// Cumulative star counts `N(>F) ∝ F^-STAR_SLOPE`.
const STAR_SLOPE: f64 = 0.65;
/// The faintest stars have this S/N in A.
const FAINT_SNR: f64 = 3.0;
/// The brightest star is this many times the flux that saturates its peak.
const BRIGHTEST_OVER_SATURATING: f64 = 50.0;
const GALAXY_FLUX_OVER_FAINT: (f64, f64) = (5.0, 300.0);
const GALAXY_HALF_LIGHT: (f64, f64) = (2.0, 6.0);
const GALAXY_AXIS_RATIO: (f64, f64) = (0.3, 1.0);
const SN_SNR_RANGE: (f64, f64) = (3.0, 40.0);
const SN_FAINT_SNR: f64 = 5.0;
/// Share of supernovae with truth S/N below [`SN_FAINT_SNR`].
const SN_FAINT_SHARE: f64 = 0.25;
const SN_HOST_OFFSET: (f64, f64) = (1.0, 3.0);
const SN_MIN_HOST_OFFSET: f64 = 2.0;
const TRANSIENT_SEPARATION: f64 = 12.0;
const PLACEMENT_TRIES: usize = 400;
const VARIABLE_AMPLITUDE: (f64, f64) = (0.3, 2.0);
const VARIABLE_BRIGHTENING: f64 = 0.75;
const VARIABLE_MIN_OVER_FAINT: f64 = 10.0;
const COSMIC_AMPLITUDE: (f64, f64) = (2000.0, 15000.0);
const COSMIC_CLEARANCE: f64 = 8.0;

/// What to generate. [`Default`] is a small demo: 6 pairs of 512–1280 px.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateConfig {
    /// Seed for everything; the same seed gives byte-identical files.
    pub seed: u64,
    /// Number of pairs.
    pub pairs: usize,
    /// Smallest image side (pixels); sides are multiples of 16.
    pub min_size: usize,
    /// Largest image side (pixels).
    pub max_size: usize,
    /// Site names; four sites get the paper's layout (see [`crate::layout`]).
    pub sites: Vec<String>,
    /// Supernovae injected into each pair (fewer if they do not fit).
    pub supernovae_per_pair: usize,
    /// Variable stars in each pair.
    pub variables_per_pair: usize,
    /// Mean star density per megapixel of field.
    pub stars_per_megapixel: f64,
    /// Mean galaxy density per megapixel of field.
    pub galaxies_per_megapixel: f64,
    /// Typical number of cosmic-ray hits per image.
    pub cosmic_rays_per_image: usize,
    /// Gain in e-/ADU.
    pub gain: f64,
    /// Read noise in electrons.
    pub read_noise: f64,
    /// Saturation level in ADU.
    pub saturate: f64,
    /// Worker threads; 0 means one per available core. Does not affect output.
    pub threads: usize,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            seed: 2008,
            pairs: 6,
            min_size: 512,
            max_size: 1280,
            sites: DEFAULT_SITES.iter().map(|s| s.to_string()).collect(),
            supernovae_per_pair: 10,
            variables_per_pair: 5,
            stars_per_megapixel: 400.0,
            galaxies_per_megapixel: 80.0,
            cosmic_rays_per_image: 4,
            gain: 2.0,
            read_noise: 5.0,
            saturate: 60000.0,
            threads: 0,
        }
    }
}

/// Why a dataset could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The configuration cannot produce a sensible dataset.
    #[error("invalid generator configuration: {0}")]
    Config(String),
    /// A directory or replica could not be made.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An image could not be written.
    #[error(transparent)]
    Fits(#[from] FitsError),
    /// The manifest could not be written.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The truth catalogue could not be written.
    #[error(transparent)]
    Truth(#[from] TruthError),
}

/// What a random stream is for; part of its key so streams never overlap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Purpose {
    SiteOrder = 1,
    Size = 2,
    Scene = 3,
    NoiseA = 4,
    NoiseB = 5,
}

/// The random stream for `(seed, purpose, index, sub)`.
pub(crate) fn stream(seed: u64, purpose: Purpose, index: u64, sub: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    for (chunk, word) in key
        .chunks_exact_mut(8)
        .zip([seed, purpose as u64, index, sub])
    {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

/// Generates the dataset described by `config` into `out_dir` (created if
/// needed), calling `progress(done, total)` after each pair.
pub fn generate(
    config: &GenerateConfig,
    out_dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Manifest, Truth), GenerateError> {
    validate(config)?;
    let manifest = Manifest::plan(config);
    std::fs::create_dir_all(out_dir).map_err(|source| GenerateError::Io {
        path: out_dir.to_path_buf(),
        what: "cannot create the output directory",
        source,
    })?;
    let per_pair = write_all_pairs(config, &manifest, out_dir, progress)?;
    let truth = Truth {
        transients: per_pair.into_iter().flatten().collect(),
    };
    truth.save(out_dir)?;
    // Last, so that a manifest on disk means the dataset is complete.
    manifest.save(out_dir)?;
    Ok((manifest, truth))
}

fn validate(config: &GenerateConfig) -> Result<(), GenerateError> {
    let fail = |msg: String| Err(GenerateError::Config(msg));
    let smallest = config.min_size.min(config.max_size);
    let largest = config.min_size.max(config.max_size);
    if smallest < MIN_IMAGE_SIZE {
        return fail(format!(
            "image size {smallest} px is too small: sides must be at least {MIN_IMAGE_SIZE} px \
             so that supernovae keep {EDGE_MARGIN} px from the edges"
        ));
    }
    if largest > MAX_IMAGE_SIZE {
        return fail(format!(
            "image size {largest} px is above the limit of {MAX_IMAGE_SIZE} px"
        ));
    }
    let sites = if config.sites.is_empty() {
        DEFAULT_SITES.iter().map(|s| s.to_string()).collect()
    } else {
        config.sites.clone()
    };
    for (i, s) in sites.iter().enumerate() {
        let plain =
            !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\']) && s.is_ascii();
        if !plain {
            return fail(format!(
                "site name {s:?} must be a plain ASCII directory name"
            ));
        }
        if sites[..i].contains(s) {
            return fail(format!("site name {s:?} is listed twice"));
        }
    }
    if !(config.gain.is_finite() && config.gain > 0.0) {
        return fail(format!("gain {} e-/ADU must be positive", config.gain));
    }
    if !(config.read_noise.is_finite() && config.read_noise >= 0.0) {
        return fail(format!(
            "read noise {} e- must not be negative",
            config.read_noise
        ));
    }
    if !(config.saturate.is_finite() && config.saturate >= 2.0 * SKY_RANGE.1) {
        return fail(format!(
            "saturation {} ADU must be at least {} ADU, twice the brightest sky",
            config.saturate,
            2.0 * SKY_RANGE.1
        ));
    }
    for (name, v) in [
        ("stars", config.stars_per_megapixel),
        ("galaxies", config.galaxies_per_megapixel),
    ] {
        if !(v.is_finite() && (0.0..=1.0e5).contains(&v)) {
            return fail(format!(
                "{name} per megapixel = {v} must be between 0 and 100000"
            ));
        }
    }
    Ok(())
}

/// Draws the whole scene of pair `index` from its own stream.
pub(crate) fn draw_scene(
    config: &GenerateConfig,
    index: usize,
    width: usize,
    height: usize,
) -> Scene {
    let mut rng = stream(config.seed, Purpose::Scene, index as u64, 0);
    let (a, b, a_to_b) = draw_conditions(&mut rng, width, height);
    let faint = FAINT_SNR * a.psf.noise_equivalent_area().sqrt() * sky_noise(&a, config);
    let mut scene = Scene {
        width,
        height,
        a,
        b,
        a_to_b,
        stars: Vec::new(),
        variables: Vec::new(),
        galaxies: Vec::new(),
        supernovae: Vec::new(),
        cosmic_a: Vec::new(),
        cosmic_b: Vec::new(),
    };
    scene.stars = draw_stars(&mut rng, config, &scene, faint);
    scene.galaxies = draw_galaxies(&mut rng, config, &scene, faint);
    place_variables(&mut rng, config, &mut scene, faint);
    place_supernovae(&mut rng, config, &mut scene, faint);
    scene.cosmic_a = draw_cosmic_rays(&mut rng, config, &scene, Epoch::A);
    scene.cosmic_b = draw_cosmic_rays(&mut rng, config, &scene, Epoch::B);
    scene
}
