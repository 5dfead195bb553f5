//! How long the pipeline's steps take, as a function of image size: the
//! workload model of the simulated scenarios.
//!
//! The shape comes from our own pipeline. `scripts/eval/measure-steps.sh`
//! runs the sequential version on square pairs of several sizes and writes
//! the mean time per activity of each step to
//! `apps/supernova/eval/step-times.tsv`; [`StepModel::measured`] fits
//! `seconds = a + b · pixels` per step to those figures by least squares
//! (through the origin where the intercept comes out negative), except for
//! 7.2, whose activities each work on one fixed-size tile and so get the
//! mean time per tile.
//!
//! Two figures then come from the paper, each used once:
//! - [`StepModel::calibrated`] scales every step by one factor so that the
//!   sequential time of the 30 largest pairs averages 820 s, as the paper
//!   measured on its hardware (its section 5.2);
//! - [`StepModel::paper_profile`] gives step 7.2 the weight the paper
//!   reports ("most activities required 1 to 8 seconds, (7) can take
//!   between 5 and 20 minutes"): 90 % of a pair's work at the dataset's
//!   mean size, where our own 7.2 is a few per cent.

use crate::manifest::PairEntry;
use crate::pipeline::StepKind;
use crate::steps::Epoch;
use crate::tiles::{self, TileParams};

/// The measurements the model is fitted to, as the script wrote them.
pub const MEASURED: &str = include_str!("../../eval/step-times.tsv");

/// The mean sequential seconds of the paper's 30 largest pairs.
pub const PAPER_LARGEST_30_MEAN_SECONDS: f64 = 820.0;

/// Step 7's share of a pair's work in the paper's profile.
pub const PAPER_STEP7_SHARE: f64 = 0.9;

/// The pipeline's steps, as the model times them: [`DetectNova`]'s stages.
///
/// [`DetectNova`]: crate::activities::DetectNova
pub use crate::activities::Stage as Step;

impl Step {
    /// Every step, in pipeline order.
    pub const ALL: [Step; 9] = [
        Step::Prepare,
        Step::Detect,
        Step::Align,
        Step::Equalize,
        Step::Split,
        Step::Compare,
        Step::Recombine,
        Step::Extract,
        Step::Cleanup,
    ];

    /// The pipeline step this stands for; the one with epoch A or tile 0
    /// where a step has several activities.
    pub fn kind(self) -> StepKind {
        match self {
            Step::Prepare => StepKind::Prepare,
            Step::Detect => StepKind::Detect(Epoch::A),
            Step::Align => StepKind::Align,
            Step::Equalize => StepKind::Equalize(Epoch::A),
            Step::Split => StepKind::Split,
            Step::Compare => StepKind::Compare(0),
            Step::Recombine => StepKind::Recombine,
            Step::Extract => StepKind::Extract,
            Step::Cleanup => StepKind::Cleanup,
        }
    }

    /// The name the run's step table prints (`2,3-detect`, ...).
    pub fn table_name(self) -> &'static str {
        self.kind().name()
    }

    /// A short name, for activity kinds: the table name without its
    /// step numbers (`detect`).
    pub fn name(self) -> &'static str {
        let table = self.table_name();
        table.split_once('-').map_or(table, |(_, name)| name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// `seconds = intercept + per_pixel · pixels` for one step's activities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFit {
    /// Seconds at zero pixels.
    pub intercept: f64,
    /// Seconds per pixel of the pair's image size (width × height).
    pub per_pixel: f64,
    /// Measurements the fit used.
    pub points: usize,
}

/// Seconds per activity of each step, against image size.
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    fits: [StepFit; 9],
    /// Every step is multiplied by this (1 for the raw fit).
    pub scale: f64,
    /// Step 7.2 is multiplied by this on top (1 for our own profile).
    pub compare_weight: f64,
    tiling: TileParams,
}

/// Why the measurements could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StepModelError {
    /// A line is not `side run step count mean`.
    #[error("step-times line {line}: {reason}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A step has no measurement at all.
    #[error("no measurements for step {0}; rerun scripts/eval/measure-steps.sh")]
    Missing(&'static str),
}

impl StepModel {
    /// The model fitted to the measurements shipped with the code.
    pub fn measured() -> Result<StepModel, StepModelError> {
        Self::from_tsv(MEASURED)
    }

    /// The model fitted to `text`, in the measurement script's format.
    pub fn from_tsv(text: &str) -> Result<StepModel, StepModelError> {
        let mut points: Vec<Vec<(f64, f64)>> = vec![Vec::new(); Step::ALL.len()];
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| StepModelError::BadLine {
                line: number + 1,
                reason: reason.to_string(),
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [side, _run, step, _count, mean] = fields[..] else {
                return Err(bad("expected 5 fields: side run step count mean"));
            };
            let side: f64 = side.parse().map_err(|_| bad("the side is not a number"))?;
            let mean: f64 = mean.parse().map_err(|_| bad("the mean is not a number"))?;
            if !(side > 0.0 && mean.is_finite() && mean >= 0.0) {
                return Err(bad("the side must be positive and the mean not negative"));
            }
            let Some(step) = Step::ALL.iter().find(|s| s.table_name() == step) else {
                return Err(bad(&format!("unknown step {step:?}")));
            };
            points[step.index()].push((side * side, mean));
        }
        let mut fits = [StepFit {
            intercept: 0.0,
            per_pixel: 0.0,
            points: 0,
        }; 9];
        for step in Step::ALL {
            let data = &points[step.index()];
            if data.is_empty() {
                return Err(StepModelError::Missing(step.table_name()));
            }
            fits[step.index()] = match step {
                // One tile per activity whatever the image size.
                Step::Compare => StepFit {
                    intercept: data.iter().map(|p| p.1).sum::<f64>() / data.len() as f64,
                    per_pixel: 0.0,
                    points: data.len(),
                },
                _ => fit_line(data),
            };
        }
        Ok(StepModel {
            fits,
            scale: 1.0,
            compare_weight: 1.0,
            tiling: TileParams::default(),
        })
    }

    /// The fit of one step, unscaled.
    pub fn fit(&self, step: Step) -> StepFit {
        self.fits[step.index()]
    }

    /// Seconds one activity of `step` takes on one reference core, for a
    /// pair of `pixels` pixels per image.
    pub fn seconds(&self, step: Step, pixels: f64) -> f64 {
        let fit = self.fits[step.index()];
        let weight = if step == Step::Compare {
            self.compare_weight
        } else {
            1.0
        };
        (fit.intercept + fit.per_pixel * pixels).max(0.0) * self.scale * weight
    }

    /// How many activities of `step` one pair has.
    pub fn count(&self, step: Step, pair: &PairEntry) -> usize {
        match step {
            Step::Detect | Step::Equalize => 2,
            Step::Compare => tiles::count(pair.width, pair.height, &self.tiling),
            _ => 1,
        }
    }

    /// Seconds of one pair's whole pipeline on one core.
    pub fn sequential_seconds(&self, pair: &PairEntry) -> f64 {
        let pixels = pixels(pair);
        (Step::ALL.iter())
            .map(|&step| self.seconds(step, pixels) * self.count(step, pair) as f64)
            .sum()
    }

    /// Seconds of the monolithic version on `cores` cores: steps 2 and 3,
    /// 5 and 6 run side by side, the tiles of 7.2 spread over the cores,
    /// the rest on one core, as `NovaDetection` does.
    pub fn monolithic_seconds(&self, pair: &PairEntry, cores: u32) -> f64 {
        let pixels = pixels(pair);
        let cores = cores.max(1) as usize;
        (Step::ALL.iter())
            .map(|&step| {
                let count = self.count(step, pair);
                let rounds = count.div_ceil(cores.min(count.max(1)));
                self.seconds(step, pixels) * rounds as f64
            })
            .sum()
    }

    /// This model scaled so that the `30` largest of `pairs` take
    /// [`PAPER_LARGEST_30_MEAN_SECONDS`] on average, sequentially.
    pub fn calibrated(mut self, pairs: &[PairEntry]) -> StepModel {
        let mut sizes: Vec<&PairEntry> = pairs.iter().collect();
        sizes.sort_by_key(|pair| std::cmp::Reverse(pair.width * pair.height));
        let largest = &sizes[..sizes.len().min(30)];
        if largest.is_empty() {
            return self;
        }
        self.scale = 1.0;
        let mean = largest
            .iter()
            .map(|p| self.sequential_seconds(p))
            .sum::<f64>()
            / largest.len() as f64;
        if mean > 0.0 {
            self.scale = PAPER_LARGEST_30_MEAN_SECONDS / mean;
        }
        self
    }

    /// This model with step 7.2 weighted so that it is
    /// [`PAPER_STEP7_SHARE`] of the work of a pair of `pairs`' mean size.
    pub fn paper_profile(mut self, pairs: &[PairEntry]) -> StepModel {
        if pairs.is_empty() {
            return self;
        }
        self.compare_weight = 1.0;
        let n = pairs.len() as f64;
        let compare: f64 = (pairs.iter())
            .map(|p| self.seconds(Step::Compare, pixels(p)) * self.count(Step::Compare, p) as f64)
            .sum::<f64>()
            / n;
        let all: f64 = pairs
            .iter()
            .map(|p| self.sequential_seconds(p))
            .sum::<f64>()
            / n;
        let others = all - compare;
        if compare > 0.0 {
            self.compare_weight = PAPER_STEP7_SHARE / (1.0 - PAPER_STEP7_SHARE) * others / compare;
        }
        self
    }

    /// The share of a pair's sequential work that step 7.2 is, averaged
    /// over `pairs`.
    pub fn compare_share(&self, pairs: &[PairEntry]) -> f64 {
        let (mut compare, mut all) = (0.0, 0.0);
        for pair in pairs {
            compare +=
                self.seconds(Step::Compare, pixels(pair)) * self.count(Step::Compare, pair) as f64;
            all += self.sequential_seconds(pair);
        }
        if all > 0.0 {
            compare / all
        } else {
            0.0
        }
    }
}

/// Pixels per image of a pair.
pub fn pixels(pair: &PairEntry) -> f64 {
    (pair.width * pair.height) as f64
}

/// Least squares `y = a + b x`; through the origin if `a` would be negative.
fn fit_line(points: &[(f64, f64)]) -> StepFit {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let intercept = my - slope * mx;
    if intercept >= 0.0 && slope >= 0.0 {
        return StepFit {
            intercept,
            per_pixel: slope,
            points: points.len(),
        };
    }
    let sxx0: f64 = points.iter().map(|(x, _)| x * x).sum();
    let sxy0: f64 = points.iter().map(|(x, y)| x * y).sum();
    StepFit {
        intercept: 0.0,
        per_pixel: if sxx0 > 0.0 {
            (sxy0 / sxx0).max(0.0)
        } else {
            0.0
        },
        points: points.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(side: usize) -> PairEntry {
        PairEntry {
            id: format!("p{side}"),
            width: side,
            height: side,
            bytes: 8 * (side * side) as u64,
            sites: vec!["vu3".into()],
        }
    }

    const TABLE: &str = "# side run step count mean_s
100 1 1-prepare 2 0.1
200 1 1-prepare 2 0.4
100 1 2,3-detect 4 1.0
200 1 2,3-detect 4 4.0
100 1 4-align 2 0.01
200 1 4-align 2 0.01
100 1 5,6-equalize 4 1.0
200 1 5,6-equalize 4 4.0
100 1 7.1-split 2 0.1
200 1 7.1-split 2 0.4
100 1 7.2-compare 2 0.2
200 1 7.2-compare 8 0.4
100 1 7.3-recombine 2 0
100 1 8-extract 2 0
100 1 9-cleanup 2 0
";

    #[test]
    fn lines_are_fitted_per_step() {
        let model = StepModel::from_tsv(TABLE).unwrap();
        let detect = model.fit(Step::Detect);
        assert!((detect.per_pixel - 1e-4).abs() < 1e-12, "{detect:?}");
        assert!(detect.intercept.abs() < 1e-9);
        // Constant: intercept only.
        assert_eq!(model.fit(Step::Align).per_pixel, 0.0);
        assert!((model.fit(Step::Align).intercept - 0.01).abs() < 1e-12);
        // 7.2 is per tile: the mean, whatever the size.
        assert!((model.seconds(Step::Compare, 1e9) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn monolithic_time_spreads_pairs_of_steps_and_tiles() {
        let model = StepModel::from_tsv(TABLE).unwrap();
        let big = pair(512); // 2 × 2 tiles of 256 px
        assert_eq!(model.count(Step::Compare, &big), 4);
        let one = model.monolithic_seconds(&big, 1);
        assert!((one - model.sequential_seconds(&big)).abs() < 1e-9);
        let px = pixels(&big);
        let two = model.monolithic_seconds(&big, 2);
        let saved = model.seconds(Step::Detect, px)
            + model.seconds(Step::Equalize, px)
            + 2.0 * model.seconds(Step::Compare, px);
        assert!((one - two - saved).abs() < 1e-9, "{one} {two} {saved}");
        // Beyond 4 cores nothing more runs side by side.
        assert_eq!(
            model.monolithic_seconds(&big, 4),
            model.monolithic_seconds(&big, 48)
        );
    }

    #[test]
    fn calibration_and_the_paper_profile() {
        let pairs: Vec<PairEntry> = (1..=40).map(|i| pair(256 + 32 * i)).collect();
        let model = StepModel::from_tsv(TABLE).unwrap().calibrated(&pairs);
        let mut largest: Vec<&PairEntry> = pairs.iter().collect();
        largest.sort_by_key(|p| std::cmp::Reverse(p.width));
        let mean: f64 = largest[..30]
            .iter()
            .map(|p| model.sequential_seconds(p))
            .sum::<f64>()
            / 30.0;
        assert!(
            (mean - PAPER_LARGEST_30_MEAN_SECONDS).abs() < 1e-6,
            "{mean}"
        );
        let paper = model.clone().paper_profile(&pairs);
        assert!((paper.compare_share(&pairs) - PAPER_STEP7_SHARE).abs() < 1e-9);
        assert!(model.compare_share(&pairs) < 0.5);
    }

    #[test]
    fn bad_measurements_are_clear_errors() {
        let error = StepModel::from_tsv("100 1 1-prepare 2\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "step-times line 1: expected 5 fields: side run step count mean"
        );
        let error = StepModel::from_tsv("100 1 9-sweep 2 0.1\n").unwrap_err();
        assert!(
            error.to_string().contains("unknown step \"9-sweep\""),
            "{error}"
        );
        let error = StepModel::from_tsv("100 1 1-prepare 2 0.1\n").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("no measurements for step 2,3-detect"),
            "{error}"
        );
    }

    #[test]
    fn the_shipped_measurements_fit() {
        let model = StepModel::measured().expect("the shipped table parses");
        for step in Step::ALL {
            assert!(model.fit(step).points >= 4, "{step:?}");
        }
        // Detection grows with the image.
        assert!(model.seconds(Step::Detect, 4e6) > model.seconds(Step::Detect, 1e6));
    }
}
