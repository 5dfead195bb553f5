//! The pipeline's steps (the Constellation paper's Figure 3) as functions on
//! a pair's work directory.
//!
//! Every step reads what earlier steps left in the directory and writes its
//! own result there, so each one can run anywhere that sees the directory:
//! in a loop (the sequential reference), on threads inside one activity (the
//! monolithic version), as an activity of its own (the many-task version)
//! or as a process started by a script (`supernova step …`). All three
//! paths call these functions, which is why their output is identical.
//!
//! The work directory of a pair holds:
//!
//! | file | written by |
//! |---|---|
//! | `a.fits`, `b.fits` | 1 prepare: copies from site storage |
//! | `detect-a.json`, `detect-b.json` | 2, 3 detect |
//! | `align.json` | 4 align |
//! | `a-eq.fits`, `b-eq.fits` | 5, 6 equalize |
//! | `tiles.json`, `tiles/tile-NNNN-{a,b}.fits` | 7.1 split |
//! | `tiles/tile-NNNN.json` | 7.2 compare |
//! | `residuals.json` | 7.3 recombine |
//! | `candidates.json` (and a copy in the results directory) | 8 extract |
//!
//! Step 9 removes the directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::catalog::{Alignment, Candidate, Detection, Residual, Tile};
use crate::compare::{self, CompareParams, Significance};
use crate::fits::{self, FitsHeader};
use crate::image::Image;
use crate::manifest::PairEntry;
use crate::{align, classify, detect, equalize, recombine, tiles};

/// Why a step failed: which step, on which file, and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A file could not be read or written.
    #[error("{step}: {path}: {source}")]
    Io {
        /// The step.
        step: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A FITS image could not be read or written.
    #[error("{step}: {source}")]
    Fits {
        /// The step.
        step: &'static str,
        /// What went wrong, naming the file.
        source: fits::FitsError,
    },
    /// A JSON file an earlier step wrote is not what this step expects.
    #[error("{step}: {path} is not a valid result of an earlier step ({source}); run the earlier steps again")]
    Json {
        /// The step.
        step: &'static str,
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// The step ran but its algorithm gave up on this data.
    #[error("{step}: {message}")]
    Failed {
        /// The step.
        step: &'static str,
        /// Why, in words.
        message: String,
    },
}

pub use crate::layout::Epoch;

/// Where step 1 got a pair's images from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The site whose copy was read.
    pub site: String,
    /// Whether that site is not the executor's own, so the copy crossed
    /// the (emulated) wide-area network.
    pub remote: bool,
    /// Bytes copied.
    pub bytes: u64,
}

/// How step 1 copies data in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyPolicy {
    /// The site the executor runs at, if it has one.
    pub executor_site: Option<String>,
    /// Bytes per second for a copy from another site; `None` copies at
    /// full speed. Emulates the paper's 1 MB/s wide-area limit.
    pub wan_bytes_per_second: Option<f64>,
}

/// Step 7.1's plan for step 7.2: the tiles kept and what comparing needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilePlan {
    /// The kept tiles, by index.
    pub tiles: Vec<Tile>,
    /// How many tiles the image has in all, kept or not.
    pub total_tiles: usize,
    /// Gaussian sigma of the common PSF after equalization, in pixels.
    pub psf_sigma: f32,
    /// Electrons per ADU of image A.
    pub gain: f32,
    /// Circles `(x, y, radius)` around saturated stars of either image, in
    /// A's frame: residuals there are artefacts.
    pub exclusions: Vec<(f64, f64, f64)>,
}

/// The tile images and parameters step 7.2 works on.
pub struct TileInputs {
    /// The tile.
    pub tile: Tile,
    /// Its cut of A' (equalized A).
    pub a: Image,
    /// Its cut of B' (B resampled onto A and equalized).
    pub b: Image,
    /// The pair's plan.
    pub plan: TilePlan,
}

/// The work directory of `pair` under `root`.
pub fn work_dir(root: &Path, pair: &str) -> PathBuf {
    root.join(pair)
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StepError {
    let path = path.to_path_buf();
    move |source| StepError::Io { step, path, source }
}

fn read_json<T: DeserializeOwned>(step: &'static str, path: &Path) -> Result<T, StepError> {
    let text = fs::read(path).map_err(io(step, path))?;
    serde_json::from_slice(&text).map_err(|source| StepError::Json {
        step,
        path: path.to_path_buf(),
        source,
    })
}

/// Writes through a temporary name, so that a reader never sees half a file.
fn write_json<T: Serialize>(step: &'static str, path: &Path, value: &T) -> Result<(), StepError> {
    let text = serde_json::to_vec_pretty(value).expect("step results serialize");
    crate::fsutil::write_atomic(path, &text).map_err(io(step, path))
}

fn read_image(step: &'static str, path: &Path) -> Result<(Image, FitsHeader), StepError> {
    fits::read_image(path).map_err(|source| StepError::Fits { step, source })
}

fn write_image(
    step: &'static str,
    path: &Path,
    image: &Image,
    header: &FitsHeader,
) -> Result<(), StepError> {
    fits::write_image(path, image, header).map_err(|source| StepError::Fits { step, source })
}

fn failed(step: &'static str) -> impl FnOnce(String) -> StepError {
    move |message| StepError::Failed { step, message }
}

/// Step 1: makes the work directory and copies the pair's two images into
/// it from a site that holds them, the executor's own site if it is one,
/// otherwise the first listed (throttled as `policy` says).
pub fn prepare(
    dataset: &Path,
    pair: &PairEntry,
    policy: &CopyPolicy,
    work: &Path,
) -> Result<Prepared, StepError> {
    const STEP: &str = "prepare";
    let local = policy
        .executor_site
        .as_ref()
        .filter(|site| pair.sites.contains(site));
    let Some(site) = local.or(pair.sites.first()).cloned() else {
        return Err(failed(STEP)(format!(
            "the manifest lists no site holding {}",
            pair.id
        )));
    };
    let remote = local.is_none();
    fs::create_dir_all(work).map_err(io(STEP, work))?;
    let rate = policy.wan_bytes_per_second.filter(|_| remote);
    let mut bytes = 0;
    for epoch in [Epoch::A, Epoch::B] {
        let from = crate::manifest::Manifest::image_path(dataset, &pair.id, &site, epoch);
        let to = work.join(format!("{}.fits", epoch.letter()));
        bytes += throttled_copy(&from, &to, rate).map_err(io(STEP, &from))?;
    }
    Ok(Prepared {
        site,
        remote,
        bytes,
    })
}

/// Copies `from` to `to` at no more than `rate` bytes per second, through a
/// temporary name, keeping `from`'s holes (a sparse image stays sparse, and
/// only its data counts against the rate). Returns the data bytes copied.
fn throttled_copy(from: &Path, to: &Path, rate: Option<f64>) -> std::io::Result<u64> {
    let mut input = fs::File::open(from)?;
    let partial = crate::fsutil::temp_sibling(to);
    let copied = fs::File::create(&partial).and_then(|mut output| {
        let start = Instant::now();
        let throttle = |copied: u64| {
            if let Some(rate) = rate.filter(|r| *r > 0.0) {
                let due = Duration::from_secs_f64(copied as f64 / rate);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        };
        let copied = crate::fsutil::copy_sparse(&mut input, &mut output, throttle)?;
        output.sync_data()?;
        Ok(copied)
    });
    let result = copied.and_then(|copied| fs::rename(&partial, to).map(|()| copied));
    if result.is_err() {
        // Best effort: the copy's own error is the one to report.
        let _ = fs::remove_file(&partial);
    }
    result
}

/// Steps 2 and 3: finds the objects in one image.
pub fn detect(work: &Path, epoch: Epoch) -> Result<Detection, StepError> {
    const STEP: &str = "detect";
    let (image, header) = read_image(STEP, &work.join(format!("{}.fits", epoch.letter())))?;
    let params = detect::DetectParams {
        saturation: header.saturate,
        ..Default::default()
    };
    let found = detect::detect(&image, &params).map_err(|e| failed(STEP)(e.to_string()))?;
    write_json(
        STEP,
        &work.join(format!("detect-{}.json", epoch.letter())),
        &found,
    )?;
    Ok(found)
}

/// Step 4: matches the two object lists and fits how B lies on A.
pub fn align(work: &Path) -> Result<Alignment, StepError> {
    const STEP: &str = "align";
    let a: Detection = read_json(STEP, &work.join("detect-a.json"))?;
    let b: Detection = read_json(STEP, &work.join("detect-b.json"))?;
    let alignment =
        align::align(&a, &b, &Default::default()).map_err(|e| failed(STEP)(e.to_string()))?;
    write_json(STEP, &work.join("align.json"), &alignment)?;
    Ok(alignment)
}

/// Steps 5 and 6: brings one image to the common PSF (and B onto A's
/// pixel grid and flux scale).
pub fn equalize(work: &Path, epoch: Epoch) -> Result<(), StepError> {
    const STEP: &str = "equalize";
    let alignment: Alignment = read_json(STEP, &work.join("align.json"))?;
    let (image, header) = read_image(STEP, &work.join(format!("{}.fits", epoch.letter())))?;
    let params = equalize::EqualizeParams::default();
    let equalized = match epoch {
        Epoch::A => equalize::equalize_a(&image, &alignment, &params),
        Epoch::B => {
            let a: Detection = read_json(STEP, &work.join("detect-a.json"))?;
            equalize::equalize_b(&image, &alignment, a.width, a.height, &params)
        }
    };
    write_image(
        STEP,
        &work.join(format!("{}-eq.fits", epoch.letter())),
        &equalized,
        &header,
    )
}

fn tile_path(work: &Path, index: usize, suffix: &str) -> PathBuf {
    work.join("tiles").join(format!("tile-{index:04}{suffix}"))
}

/// Step 7.1: cuts the equalized images into overlapping tiles and keeps
/// those with enough candidate objects of B on them.
pub fn split(work: &Path) -> Result<TilePlan, StepError> {
    const STEP: &str = "split";
    let alignment: Alignment = read_json(STEP, &work.join("align.json"))?;
    let a_found: Detection = read_json(STEP, &work.join("detect-a.json"))?;
    let b_found: Detection = read_json(STEP, &work.join("detect-b.json"))?;
    let (a, header) = read_image(STEP, &work.join("a-eq.fits"))?;
    let (b, _) = read_image(STEP, &work.join("b-eq.fits"))?;
    let b_to_a = alignment.a_to_b.inverse().ok_or_else(|| {
        failed(STEP)("the fitted transform from A to B cannot be inverted".into())
    })?;
    let in_a = |x: f64, y: f64| b_to_a.apply(x, y);
    let candidates: Vec<(f64, f64)> = b_found.sources.iter().map(|s| in_a(s.x, s.y)).collect();
    let all = tiles::split(a.width(), a.height(), &candidates, &Default::default());
    let total_tiles = tiles::count(a.width(), a.height(), &Default::default());
    let dir = work.join("tiles");
    fs::create_dir_all(&dir).map_err(io(STEP, &dir))?;
    for tile in &all {
        let cut = |image: &Image| image.cut(tile.x0, tile.y0, tile.width, tile.height);
        write_image(
            STEP,
            &tile_path(work, tile.index, "-a.fits"),
            &cut(&a),
            &header,
        )?;
        write_image(
            STEP,
            &tile_path(work, tile.index, "-b.fits"),
            &cut(&b),
            &header,
        )?;
    }
    let exclusions = saturated_circles(&a_found, &b_found, in_a);
    let plan = TilePlan {
        tiles: all,
        total_tiles,
        psf_sigma: (alignment.fwhm_a.max(alignment.fwhm_b) / 2.3548) as f32,
        gain: header.gain as f32,
        exclusions,
    };
    write_json(STEP, &work.join("tiles.json"), &plan)?;
    Ok(plan)
}

/// Circles around saturated stars of A and of B (mapped into A): their
/// flat, bleeding cores never subtract cleanly.
pub(crate) fn saturated_circles(
    a: &Detection,
    b: &Detection,
    b_in_a: impl Fn(f64, f64) -> (f64, f64),
) -> Vec<(f64, f64, f64)> {
    let radius = |s: &crate::catalog::Source| (3.0 * s.fwhm).max(8.0);
    let from_a = a
        .sources
        .iter()
        .filter(|s| s.saturated)
        .map(|s| (s.x, s.y, radius(s)));
    let from_b = b.sources.iter().filter(|s| s.saturated).map(|s| {
        let (x, y) = b_in_a(s.x, s.y);
        (x, y, radius(s))
    });
    from_a.chain(from_b).collect()
}

/// Step 7.1's plan, as it left it in `work`.
pub fn tile_plan(work: &Path) -> Result<TilePlan, StepError> {
    read_json("compare", &work.join("tiles.json"))
}

/// Reads what step 7.2 needs for tile `index`: I/O and set-up, the part of
/// the step that stays on the CPU when the numeric work goes to a GPU.
pub fn tile_inputs(work: &Path, index: usize) -> Result<TileInputs, StepError> {
    const STEP: &str = "compare";
    let plan = tile_plan(work)?;
    let Some(tile) = plan.tiles.iter().find(|t| t.index == index).cloned() else {
        return Err(failed(STEP)(format!(
            "tile {index} is not among the {} tiles step 7.1 kept",
            plan.tiles.len()
        )));
    };
    let (a, _) = read_image(STEP, &tile_path(work, index, "-a.fits"))?;
    let (b, _) = read_image(STEP, &tile_path(work, index, "-b.fits"))?;
    Ok(TileInputs { tile, a, b, plan })
}

/// Step 7.2's numeric part on the CPU.
pub fn significance_cpu(inputs: &TileInputs) -> Significance {
    compare::significance(
        &inputs.a,
        &inputs.b,
        inputs.plan.psf_sigma,
        inputs.plan.gain,
    )
}

/// Step 7.2's post-processing: the residuals of a significance map, written
/// to the tile's result file.
pub fn finish_compare(
    work: &Path,
    inputs: &TileInputs,
    significance: &Significance,
) -> Result<Vec<Residual>, StepError> {
    let residuals = compare::find_residuals(
        significance,
        &inputs.tile,
        &inputs.plan.exclusions,
        &CompareParams::default(),
    );
    write_json(
        "compare",
        &tile_path(work, inputs.tile.index, ".json"),
        &residuals,
    )?;
    Ok(residuals)
}

/// Step 7.2 on the CPU: compares one tile pair.
pub fn compare(work: &Path, index: usize) -> Result<Vec<Residual>, StepError> {
    let inputs = tile_inputs(work, index)?;
    let significance = significance_cpu(&inputs);
    finish_compare(work, &inputs, &significance)
}

/// Step 7.3: merges the tiles' residuals, counting overlaps once.
pub fn recombine(work: &Path) -> Result<Vec<Residual>, StepError> {
    const STEP: &str = "recombine";
    let plan: TilePlan = read_json(STEP, &work.join("tiles.json"))?;
    let mut per_tile = Vec::with_capacity(plan.tiles.len());
    for tile in plan.tiles {
        let residuals: Vec<Residual> = read_json(STEP, &tile_path(work, tile.index, ".json"))?;
        per_tile.push((tile, residuals));
    }
    let merged = recombine::recombine(&per_tile, &Default::default());
    write_json(STEP, &work.join("residuals.json"), &merged)?;
    Ok(merged)
}

/// Step 8: decides which residuals are supernova candidates and which are
/// known stars that varied; writes the list to the work directory and to
/// `results/<pair>.json`.
pub fn extract(work: &Path, pair: &str, results: &Path) -> Result<Vec<Candidate>, StepError> {
    const STEP: &str = "extract";
    let residuals: Vec<Residual> = read_json(STEP, &work.join("residuals.json"))?;
    let a: Detection = read_json(STEP, &work.join("detect-a.json"))?;
    let candidates = classify::classify(pair, &residuals, &a, &Default::default());
    write_json(STEP, &work.join("candidates.json"), &candidates)?;
    fs::create_dir_all(results).map_err(io(STEP, results))?;
    write_json(STEP, &results.join(format!("{pair}.json")), &candidates)?;
    Ok(candidates)
}

/// Step 9: removes the work directory.
pub fn cleanup(work: &Path) -> Result<(), StepError> {
    match fs::remove_dir_all(work) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("cleanup", work)(e)),
        _ => Ok(()),
    }
}
