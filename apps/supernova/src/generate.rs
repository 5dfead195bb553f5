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

use std::f64::consts::PI;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Poisson};

use crate::fits::{self, FitsError, FitsHeader};
use crate::image::Image;
use crate::layout::{self, Epoch, DEFAULT_SITES};
use crate::manifest::{Manifest, ManifestError, PairEntry};
use crate::noise;
use crate::psf::{add_galaxy, Canvas, GalaxyShape, Psf, PsfShape};
use crate::truth::{difference_snr, flux_for_snr, Transient, TransientKind, Truth, TruthError};

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

/// Renders and writes every pair, on worker threads; returns each pair's
/// transients in pair order.
fn write_all_pairs(
    config: &GenerateConfig,
    manifest: &Manifest,
    out_dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Transient>>, GenerateError> {
    let total = manifest.pairs.len();
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, total.max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                // Work is handed out pair by pair, so a slow big pair does not
                // hold up a fixed share of the others.
                while !stop.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = manifest.pairs.get(index) else {
                        break;
                    };
                    let result = write_pair(config, entry, index, out_dir);
                    let failed = result.is_err();
                    if tx.send((index, result)).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        collect_results(rx, total, &stop, progress)
    })
}

/// Gathers the workers' results on the calling thread (the progress
/// callback need not be thread-safe); the first error stops the workers.
fn collect_results(
    rx: mpsc::Receiver<(usize, Result<Vec<Transient>, GenerateError>)>,
    total: usize,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Transient>>, GenerateError> {
    let mut results = vec![Vec::new(); total];
    let mut done = 0;
    let mut first_error = None;
    for (index, result) in rx {
        match result {
            Ok(transients) => {
                results[index] = transients;
                done += 1;
                progress(done, total);
            }
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// Draws, renders and writes one pair to all its sites.
fn write_pair(
    config: &GenerateConfig,
    entry: &PairEntry,
    index: usize,
    out_dir: &Path,
) -> Result<Vec<Transient>, GenerateError> {
    let scene = draw_scene(config, index, entry.width, entry.height);
    for epoch in Epoch::BOTH {
        let image = render(&scene, epoch, config, index);
        let header = FitsHeader {
            gain: config.gain,
            read_noise: config.read_noise,
            saturate: config.saturate,
            pair: entry.id.clone(),
            epoch: epoch.as_str().to_string(),
        };
        let mut written: Option<PathBuf> = None;
        for site in &entry.sites {
            let path = layout::image_path(out_dir, &entry.id, site, epoch);
            let dir = path.parent().expect("image paths have a directory");
            std::fs::create_dir_all(dir).map_err(|source| GenerateError::Io {
                path: dir.to_path_buf(),
                what: "cannot create the pair directory",
                source,
            })?;
            match &written {
                // Copies, not re-renders, so replicas are identical by construction.
                Some(first) => crate::fsutil::copy_atomic(first, &path).map_err(|source| {
                    GenerateError::Io {
                        path: path.clone(),
                        what: "cannot copy the replica",
                        source,
                    }
                })?,
                None => fits::write_image(&path, &image, &header)?,
            }
            written.get_or_insert(path);
        }
    }
    Ok(pair_truth(&scene, &entry.id, config))
}

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
    pub fn apply(&self, x: f64, y: f64) -> (f64, f64) {
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
    pub fn conditions(&self, epoch: Epoch) -> &Conditions {
        match epoch {
            Epoch::A => &self.a,
            Epoch::B => &self.b,
        }
    }

    /// Where an A-frame position lands in `epoch`'s image.
    pub fn to_epoch(&self, epoch: Epoch, x: f64, y: f64) -> (f64, f64) {
        match epoch {
            Epoch::A => (x, y),
            Epoch::B => self.a_to_b.apply(x, y),
        }
    }

    /// The noise-equivalent area of the broader PSF: the difference image
    /// has (about) that PSF once the sharper image is matched to it.
    fn noise_area(&self) -> f64 {
        self.a
            .psf
            .noise_equivalent_area()
            .max(self.b.psf.noise_equivalent_area())
    }

    fn inside_margin(&self, x: f64, y: f64) -> bool {
        let (w, h) = (self.width as f64 - 1.0, self.height as f64 - 1.0);
        (EDGE_MARGIN..=w - EDGE_MARGIN).contains(&x) && (EDGE_MARGIN..=h - EDGE_MARGIN).contains(&y)
    }

    /// Positions (A frame) of all transients so far.
    fn transient_positions(&self) -> Vec<(f64, f64)> {
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
fn sky_noise(c: &Conditions, config: &GenerateConfig) -> f64 {
    let g = config.gain;
    (c.sky / g + (config.read_noise / g).powi(2)).sqrt() / c.transparency
}

fn uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    rng.gen_range(lo..hi)
}

fn log_uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    (lo.ln() + rng.gen::<f64>() * (hi / lo).ln()).exp()
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

fn draw_conditions(
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
fn field_count(rng: &mut ChaCha8Rng, scene: &Scene, density: f64) -> usize {
    let area =
        (scene.width as f64 + 2.0 * FIELD_BORDER) * (scene.height as f64 + 2.0 * FIELD_BORDER);
    let mean = density * area / 1.0e6;
    match Poisson::new(mean) {
        Ok(p) => p.sample(rng) as usize,
        Err(_) => 0, // mean 0
    }
}

fn field_position(rng: &mut ChaCha8Rng, scene: &Scene) -> (f64, f64) {
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

fn interior_position(rng: &mut ChaCha8Rng, scene: &Scene) -> (f64, f64) {
    let x = uniform(rng, (EDGE_MARGIN, scene.width as f64 - 1.0 - EDGE_MARGIN));
    let y = uniform(rng, (EDGE_MARGIN, scene.height as f64 - 1.0 - EDGE_MARGIN));
    (x, y)
}

/// The flux that brings a point source's peak in A to saturation.
fn saturating_flux(scene: &Scene, config: &GenerateConfig) -> f64 {
    (config.saturate - scene.a.sky) / scene.a.psf.peak(1.0)
}

fn draw_stars(
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

fn draw_galaxy(rng: &mut ChaCha8Rng, (x, y): (f64, f64), faint: f64) -> Galaxy {
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

fn draw_galaxies(
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

/// The brightest a variable may get (A's flux scale) without saturating in
/// either epoch, with a factor 2 to spare for noise and pixel phase.
fn variable_flux_limit(scene: &Scene, config: &GenerateConfig) -> f64 {
    let max_amp = 1.0 + VARIABLE_AMPLITUDE.1;
    let peak = scene
        .a
        .psf
        .peak(1.0)
        .max(scene.b.psf.peak(1.0) * scene.b.transparency);
    let headroom = config.saturate - scene.a.sky.max(scene.b.sky);
    0.5 * headroom / (peak * max_amp)
}

fn far_from(positions: &[(f64, f64)], x: f64, y: f64, distance: f64) -> bool {
    positions
        .iter()
        .all(|&(px, py)| (px - x).powi(2) + (py - y).powi(2) >= distance * distance)
}

fn place_variables(rng: &mut ChaCha8Rng, config: &GenerateConfig, scene: &mut Scene, faint: f64) {
    let wanted = config.variables_per_pair;
    let lo = VARIABLE_MIN_OVER_FAINT * faint;
    let hi = variable_flux_limit(scene, config);
    if wanted == 0 || hi <= lo {
        return;
    }
    let mut candidates: Vec<usize> = (0..scene.stars.len())
        .filter(|&i| {
            let s = &scene.stars[i];
            scene.inside_margin(s.x, s.y) && (lo..=hi).contains(&s.flux_a)
        })
        .collect();
    candidates.shuffle(rng);
    for i in candidates {
        if scene.variables.len() == wanted {
            break;
        }
        let (x, y) = (scene.stars[i].x, scene.stars[i].y);
        if far_from(&scene.transient_positions(), x, y, TRANSIENT_SEPARATION) {
            scene.variables.push(i);
        }
    }
    // Too few suitable stars (a small image): add new ones.
    for _ in 0..PLACEMENT_TRIES {
        if scene.variables.len() == wanted {
            break;
        }
        let (x, y) = interior_position(rng, scene);
        let flux = log_uniform(rng, (lo, hi));
        if far_from(&scene.transient_positions(), x, y, TRANSIENT_SEPARATION) {
            scene.stars.push(Star {
                x,
                y,
                flux_a: flux,
                flux_b: flux,
            });
            scene.variables.push(scene.stars.len() - 1);
        }
    }
    for k in 0..scene.variables.len() {
        let star = &mut scene.stars[scene.variables[k]];
        let factor = 1.0 + uniform(rng, VARIABLE_AMPLITUDE);
        star.flux_b = if rng.gen_bool(VARIABLE_BRIGHTENING) {
            star.flux_a * factor
        } else {
            star.flux_a / factor
        };
    }
}

/// Target S/N values: stratified over the quantiles so that every pair gets
/// the intended spread, a quarter in 3–5 and the rest log-uniform in 5–40.
fn supernova_snrs(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    let mut snrs: Vec<f64> = (0..n)
        .map(|i| {
            let u = (i as f64 + rng.gen::<f64>()) / n as f64;
            if u < SN_FAINT_SHARE {
                SN_SNR_RANGE.0 + (SN_FAINT_SNR - SN_SNR_RANGE.0) * u / SN_FAINT_SHARE
            } else {
                let t = (u - SN_FAINT_SHARE) / (1.0 - SN_FAINT_SHARE);
                SN_FAINT_SNR * (SN_SNR_RANGE.1 / SN_FAINT_SNR).powf(t)
            }
        })
        .collect();
    // Otherwise the faint ones would always be placed first, in the best spots.
    snrs.shuffle(rng);
    snrs
}

/// How far a supernova must stay from a star: a few FWHM, or further where
/// the star's light is still above the sky noise.
fn star_clearances(scene: &Scene, config: &GenerateConfig) -> Vec<f64> {
    let fwhm = scene.a.psf.fwhm.max(scene.b.psf.fwhm);
    let noise = sky_noise(&scene.a, config);
    scene
        .stars
        .iter()
        .map(|s| {
            let flux = s.flux_a.max(s.flux_b * scene.b.transparency);
            let reach = scene
                .a
                .psf
                .radius_above(flux, noise)
                .max(scene.b.psf.radius_above(flux, noise));
            (3.0 * fwhm).max(reach + 2.0 * fwhm)
        })
        .collect()
}

fn place_supernovae(rng: &mut ChaCha8Rng, config: &GenerateConfig, scene: &mut Scene, faint: f64) {
    let clearances = star_clearances(scene, config);
    let (area, na, nb) = (
        scene.noise_area(),
        sky_noise(&scene.a, config),
        sky_noise(&scene.b, config),
    );
    for snr in supernova_snrs(rng, config.supernovae_per_pair) {
        let flux = flux_for_snr(snr, area, na, nb, config.gain);
        if let Some((x, y, new_host)) = find_supernova_spot(rng, scene, &clearances, faint) {
            scene.galaxies.extend(new_host);
            scene.supernovae.push(Supernova { x, y, flux });
        }
    }
}

/// A position near a host galaxy that satisfies the placement rules, and
/// the new host galaxy if none of the existing ones served.
fn find_supernova_spot(
    rng: &mut ChaCha8Rng,
    scene: &Scene,
    clearances: &[f64],
    faint: f64,
) -> Option<(f64, f64, Option<Galaxy>)> {
    let taken = scene.transient_positions();
    for attempt in 0..PLACEMENT_TRIES {
        // Existing galaxies first; later tries bring their own host.
        let (host, is_new) = if attempt < PLACEMENT_TRIES / 2 && !scene.galaxies.is_empty() {
            (*scene.galaxies.choose(rng).expect("not empty"), false)
        } else {
            let pos = interior_position(rng, scene);
            (draw_galaxy(rng, pos, faint), true)
        };
        let offset = (uniform(rng, SN_HOST_OFFSET) * host.shape.half_light).max(SN_MIN_HOST_OFFSET);
        let angle = uniform(rng, (0.0, 2.0 * PI));
        let (x, y) = (host.x + offset * angle.cos(), host.y + offset * angle.sin());
        let clear_of_stars = scene
            .stars
            .iter()
            .zip(clearances)
            .all(|(s, c)| (s.x - x).powi(2) + (s.y - y).powi(2) >= c * c);
        if scene.inside_margin(x, y)
            && clear_of_stars
            && far_from(&taken, x, y, TRANSIENT_SEPARATION)
        {
            return Some((x, y, is_new.then_some(host)));
        }
    }
    None
}

fn draw_cosmic_rays(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &Scene,
    epoch: Epoch,
) -> Vec<CosmicRay> {
    let n = config.cosmic_rays_per_image;
    if n == 0 {
        return Vec::new();
    }
    let count = rng.gen_range(n.div_ceil(2)..=n + n / 2);
    let avoid: Vec<(f64, f64)> = scene
        .transient_positions()
        .into_iter()
        .map(|(x, y)| scene.to_epoch(epoch, x, y))
        .collect();
    let mut rays = Vec::with_capacity(count);
    for _ in 0..PLACEMENT_TRIES {
        if rays.len() == count {
            break;
        }
        let (x, y) = (
            rng.gen_range(0..scene.width),
            rng.gen_range(0..scene.height),
        );
        if far_from(&avoid, x as f64, y as f64, COSMIC_CLEARANCE) {
            rays.push(cosmic_ray_track(rng, scene, x, y));
        }
    }
    rays
}

/// A hit of one to three touching pixels, the later ones weaker.
fn cosmic_ray_track(rng: &mut ChaCha8Rng, scene: &Scene, x: usize, y: usize) -> CosmicRay {
    let mut amp = uniform(rng, COSMIC_AMPLITUDE);
    let mut hits = vec![(x, y, amp)];
    for _ in 0..rng.gen_range(0..=2) {
        let (px, py, _) = *hits.last().expect("one hit at least");
        let nx = (px as i64 + rng.gen_range(-1..=1)).clamp(0, scene.width as i64 - 1) as usize;
        let ny = (py as i64 + rng.gen_range(-1..=1)).clamp(0, scene.height as i64 - 1) as usize;
        amp *= uniform(rng, (0.3, 1.0));
        if hits.iter().all(|&(hx, hy, _)| (hx, hy) != (nx, ny)) {
            hits.push((nx, ny, amp));
        }
    }
    hits
}

/// Renders one epoch: sky, objects, noise, cosmic rays, saturation.
pub(crate) fn render(scene: &Scene, epoch: Epoch, config: &GenerateConfig, index: usize) -> Image {
    let cond = scene.conditions(epoch);
    let mut canvas = Canvas::new(scene.width, scene.height, cond.sky);
    let t = cond.transparency;
    for star in &scene.stars {
        let (x, y) = scene.to_epoch(epoch, star.x, star.y);
        let flux = match epoch {
            Epoch::A => star.flux_a,
            Epoch::B => star.flux_b,
        };
        cond.psf.add_point(&mut canvas, x, y, flux * t);
    }
    let turn = match epoch {
        Epoch::A => 0.0,
        Epoch::B => scene.a_to_b.angle,
    };
    for g in &scene.galaxies {
        let (x, y) = scene.to_epoch(epoch, g.x, g.y);
        let shape = GalaxyShape {
            angle: g.shape.angle + turn,
            ..g.shape
        };
        add_galaxy(&mut canvas, x, y, g.flux * t, shape, cond.psf.sigma());
    }
    if epoch == Epoch::B {
        for sn in &scene.supernovae {
            let (x, y) = scene.to_epoch(epoch, sn.x, sn.y);
            cond.psf.add_point(&mut canvas, x, y, sn.flux * t);
        }
    }
    let purpose = match epoch {
        Epoch::A => Purpose::NoiseA,
        Epoch::B => Purpose::NoiseB,
    };
    let mut rng = stream(config.seed, purpose, index as u64, 0);
    let mut pixels = noise::observe(&canvas.data, config.gain, config.read_noise, &mut rng);
    let rays = match epoch {
        Epoch::A => &scene.cosmic_a,
        Epoch::B => &scene.cosmic_b,
    };
    for &(x, y, adu) in rays.iter().flatten() {
        pixels[y * scene.width + x] += adu as f32;
    }
    let saturate = config.saturate as f32;
    for p in &mut pixels {
        *p = p.min(saturate);
    }
    Image::from_pixels(scene.width, scene.height, pixels).expect("canvas has width × height pixels")
}

/// The truth entries of one pair: supernovae, then variables.
pub(crate) fn pair_truth(scene: &Scene, pair: &str, config: &GenerateConfig) -> Vec<Transient> {
    let (area, na, nb) = (
        scene.noise_area(),
        sky_noise(&scene.a, config),
        sky_noise(&scene.b, config),
    );
    let snr = |delta: f64| difference_snr(delta, area, na, nb, config.gain);
    let sn = scene.supernovae.iter().map(|s| Transient {
        pair: pair.to_string(),
        kind: TransientKind::Supernova,
        x: s.x,
        y: s.y,
        flux_a: 0.0,
        flux_b: s.flux,
        snr: snr(s.flux),
    });
    let var = scene.variables.iter().map(|&i| {
        let s = &scene.stars[i];
        Transient {
            pair: pair.to_string(),
            kind: TransientKind::Variable,
            x: s.x,
            y: s.y,
            flux_a: s.flux_a,
            flux_b: s.flux_b,
            snr: snr(s.flux_b - s.flux_a),
        }
    });
    sn.chain(var).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsutil::test_dir;

    fn small(seed: u64) -> GenerateConfig {
        GenerateConfig {
            seed,
            pairs: 3,
            min_size: 160,
            max_size: 288,
            supernovae_per_pair: 4,
            variables_per_pair: 2,
            ..GenerateConfig::default()
        }
    }

    /// All files under `dir`, relative path → bytes.
    fn files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(
                        p.strip_prefix(dir).unwrap().to_path_buf(),
                        std::fs::read(&p).unwrap(),
                    );
                }
            }
        }
        out
    }

    #[test]
    fn same_seed_same_bytes_whatever_the_threads() {
        let (d1, d2, d3) = (test_dir("gen1"), test_dir("gen2"), test_dir("gen3"));
        let mut calls = Vec::new();
        let (m, truth) = generate(
            &GenerateConfig {
                threads: 1,
                ..small(5)
            },
            &d1,
            &mut |d, n| calls.push((d, n)),
        )
        .unwrap();
        assert_eq!(calls, vec![(1, 3), (2, 3), (3, 3)]);
        generate(
            &GenerateConfig {
                threads: 3,
                ..small(5)
            },
            &d2,
            &mut |_, _| {},
        )
        .unwrap();
        let (f1, f2) = (files(&d1), files(&d2));
        assert_eq!(f1.keys().collect::<Vec<_>>(), f2.keys().collect::<Vec<_>>());
        assert!(f1 == f2, "same seed must give byte-identical files");
        assert!(!truth.transients.is_empty());

        generate(&small(6), &d3, &mut |_, _| {}).unwrap();
        let f3 = files(&d3);
        let a = |m: &Manifest| {
            Manifest::image_path(
                Path::new(""),
                &m.pairs[0].id,
                &m.pairs[0].sites[0],
                Epoch::A,
            )
        };
        let m3 = Manifest::load(&d3).unwrap();
        assert_ne!(
            f1[&a(&m)],
            f3[&a(&m3)],
            "a different seed must give a different image"
        );

        // Replicas are identical and sizes are as planned.
        for p in &m.pairs {
            for e in Epoch::BOTH {
                let first = &f1[&Manifest::image_path(Path::new(""), &p.id, &p.sites[0], e)];
                for s in &p.sites {
                    assert_eq!(
                        &f1[&Manifest::image_path(Path::new(""), &p.id, s, e)],
                        first
                    );
                }
            }
            let a = f1[&Manifest::image_path(Path::new(""), &p.id, &p.sites[0], Epoch::A)].len();
            assert_eq!(2 * a as u64, p.bytes);
        }
        assert_eq!(Manifest::load(&d1).unwrap(), m);
        assert_eq!(Truth::load(&d1).unwrap(), truth);
    }

    #[test]
    fn truth_lies_inside_the_images_with_the_intended_snr_spread() {
        let config = GenerateConfig {
            pairs: 12,
            ..small(9)
        };
        let mut snrs = Vec::new();
        for (index, p) in Manifest::plan(&config).pairs.iter().enumerate() {
            let scene = draw_scene(&config, index, p.width, p.height);
            assert_eq!(scene.supernovae.len(), 4, "{}", p.id);
            assert_eq!(scene.variables.len(), 2, "{}", p.id);
            for t in pair_truth(&scene, &p.id, &config) {
                assert!(scene.inside_margin(t.x, t.y), "{t:?}");
                let (bx, by) = scene.to_epoch(Epoch::B, t.x, t.y);
                assert!(
                    bx > 20.0
                        && by > 20.0
                        && bx < p.width as f64 - 21.0
                        && by < p.height as f64 - 21.0
                );
                assert!(t.snr.is_finite() && t.flux_b > 0.0);
                if t.kind == TransientKind::Supernova {
                    snrs.push(t.snr);
                }
            }
        }
        assert!(
            snrs.iter().all(|&s| (3.0..=40.0 + 1e-9).contains(&s)),
            "{snrs:?}"
        );
        let faint = snrs.iter().filter(|&&s| s < 5.0).count();
        assert_eq!(faint * 4, snrs.len(), "a quarter below S/N 5: {snrs:?}");
    }

    #[test]
    fn supernovae_sit_near_but_not_on_galaxies() {
        let config = small(21);
        let scene = draw_scene(&config, 0, 256, 256);
        for sn in &scene.supernovae {
            let near = scene.galaxies.iter().any(|g| {
                let d = ((g.x - sn.x).powi(2) + (g.y - sn.y).powi(2)).sqrt();
                d >= 2.0 - 1e-9 && d <= 3.0 * g.shape.half_light + 1e-9
            });
            assert!(near, "{sn:?}");
        }
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// A `size`-pixel square of A free of objects and cosmic rays.
    fn clean_box(scene: &Scene, size: usize) -> Option<(usize, usize)> {
        let clear = star_clearances(scene, &small(0));
        let ok = |x0: usize, y0: usize| {
            let (cx, cy, half) = (
                x0 as f64 + size as f64 / 2.0,
                y0 as f64 + size as f64 / 2.0,
                size as f64 / 2.0,
            );
            let outside =
                |x: f64, y: f64, r: f64| (x - cx).abs() > half + r || (y - cy).abs() > half + r;
            scene
                .stars
                .iter()
                .zip(&clear)
                .all(|(s, c)| outside(s.x, s.y, *c))
                && scene
                    .galaxies
                    .iter()
                    .all(|g| outside(g.x, g.y, 6.0 * g.shape.half_light + 10.0))
                && scene
                    .cosmic_a
                    .iter()
                    .flatten()
                    .all(|&(x, y, _)| outside(x as f64, y as f64, 2.0))
        };
        let steps = (0..=scene.width - size).step_by(8);
        steps
            .flat_map(|x| (0..=scene.height - size).step_by(8).map(move |y| (x, y)))
            .find(|&(x, y)| ok(x, y))
    }

    #[test]
    fn sky_and_noise_match_the_model_and_supernovae_show_in_b() {
        let config = GenerateConfig {
            supernovae_per_pair: 6,
            ..small(17)
        };
        let scene = draw_scene(&config, 0, 256, 256);
        let a = render(&scene, Epoch::A, &config, 0);
        let b = render(&scene, Epoch::B, &config, 0);

        let (x0, y0) = clean_box(&scene, 24).expect("a clean 24 px box in a 256 px image");
        let cut = a.cut(x0, y0, 24, 24);
        let values: Vec<f64> = cut.pixels().iter().map(|&p| p as f64).collect();
        let med = median(values.clone());
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>()
            / (values.len() - 1) as f64)
            .sqrt();
        let model_noise = sky_noise(&scene.a, &config);
        assert!(
            (med / scene.a.sky - 1.0).abs() < 0.1,
            "median {med} vs sky {}",
            scene.a.sky
        );
        assert!(
            (std / model_noise - 1.0).abs() < 0.1,
            "noise {std} vs {model_noise}"
        );

        // The brightest supernova: excess over sky in a 7x7 box, B (rescaled) vs A.
        let sn = scene
            .supernovae
            .iter()
            .max_by(|p, q| p.flux.total_cmp(&q.flux))
            .unwrap();
        let excess = |img: &Image, (x, y): (f64, f64), sky: f64| -> f64 {
            let (cx, cy) = (x.round() as usize, y.round() as usize);
            let mut sum = 0.0;
            for yy in cy - 3..=cy + 3 {
                for xx in cx - 3..=cx + 3 {
                    sum += img.get(xx, yy) as f64 - sky;
                }
            }
            sum
        };
        let in_a = excess(&a, (sn.x, sn.y), scene.a.sky);
        let in_b =
            excess(&b, scene.to_epoch(Epoch::B, sn.x, sn.y), scene.b.sky) / scene.b.transparency;
        assert!(
            in_b - in_a > 0.3 * sn.flux,
            "B {in_b} vs A {in_a}, flux {}",
            sn.flux
        );
    }

    #[test]
    fn saturated_stars_are_flat_topped() {
        let config = GenerateConfig {
            stars_per_megapixel: 3000.0,
            ..small(3)
        };
        let scene = draw_scene(&config, 0, 512, 512);
        let a = render(&scene, Epoch::A, &config, 0);
        let at_limit = a.pixels().iter().filter(|&&p| p == 60000.0).count();
        assert!(at_limit > 0 && a.pixels().iter().all(|&p| p <= 60000.0));
    }

    #[test]
    fn bad_configurations_are_explained() {
        let dir = test_dir("gen-bad");
        let check = |c: GenerateConfig, words: &str| {
            let err = generate(&c, &dir, &mut |_, _| {}).unwrap_err();
            assert!(err.to_string().contains(words), "{err}");
        };
        check(
            GenerateConfig {
                min_size: 64,
                ..small(1)
            },
            "too small",
        );
        check(
            GenerateConfig {
                sites: vec!["a/b".into()],
                ..small(1)
            },
            "plain ASCII directory name",
        );
        check(
            GenerateConfig {
                sites: vec!["x".into(), "x".into()],
                ..small(1)
            },
            "listed twice",
        );
        check(
            GenerateConfig {
                gain: 0.0,
                ..small(1)
            },
            "gain",
        );
        check(
            GenerateConfig {
                saturate: 1000.0,
                ..small(1)
            },
            "saturation",
        );
    }

    #[test]
    fn a_to_b_frame_rotates_about_the_centre() {
        let f = Frame {
            shift: (3.0, -2.0),
            angle: 90f64.to_radians(),
            centre: (10.0, 10.0),
        };
        let (x, y) = f.apply(11.0, 10.0);
        assert!(
            (x - 13.0).abs() < 1e-12 && (y - 9.0).abs() < 1e-12,
            "{x} {y}"
        );
    }
}
