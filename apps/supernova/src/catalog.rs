//! What the pipeline steps hand each other: object lists, the alignment of
//! the two epochs, tiles, residuals and the final candidates. All of it is
//! serde, so steps that run as separate processes pass it as JSON files.

use serde::{Deserialize, Serialize};

/// One object found by detection (steps 2 and 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// Flux-weighted centroid, in pixels of the image it was found in.
    pub x: f64,
    /// Flux-weighted centroid, in pixels.
    pub y: f64,
    /// Background-subtracted flux summed over the object's pixels (ADU).
    pub flux: f64,
    /// Highest background-subtracted pixel value (ADU).
    pub peak: f64,
    /// Full width at half maximum from the second moments, in pixels.
    pub fwhm: f64,
    /// Pixels above the threshold.
    pub pixels: u32,
    /// Signal-to-noise of `flux` against the background noise.
    pub snr: f64,
    /// Some pixel reached the saturation level.
    pub saturated: bool,
    /// Compact like the image's stars (FWHM close to the seeing), as
    /// opposed to an extended galaxy or a too-sharp cosmic ray.
    pub point_like: bool,
}

/// Everything detection found in one image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detection {
    /// Image width in pixels.
    pub width: usize,
    /// Image height in pixels.
    pub height: usize,
    /// Median sky level after sigma clipping (ADU).
    pub background: f64,
    /// Sky noise, one standard deviation per pixel (ADU).
    pub noise: f64,
    /// The seeing: median FWHM of unsaturated point-like sources, in pixels.
    pub seeing_fwhm: f64,
    /// The objects, brightest first.
    pub sources: Vec<Source>,
}

/// An affine map `x' = a·x + b·y + c`, `y' = d·x + e·y + f`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Affine {
    /// Coefficients `[a, b, c, d, e, f]`.
    pub coefficients: [f64; 6],
}

impl Affine {
    /// The identity map.
    pub const IDENTITY: Affine = Affine {
        coefficients: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    };

    /// Where `(x, y)` goes.
    #[inline]
    pub fn apply(&self, x: f64, y: f64) -> (f64, f64) {
        let [a, b, c, d, e, f] = self.coefficients;
        (a * x + b * y + c, d * x + e * y + f)
    }
}

/// How image B lies on image A, and how their PSFs and fluxes compare
/// (step 4's result, which steps 5 and 6 use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alignment {
    /// Maps pixel coordinates of A to those of B.
    pub a_to_b: Affine,
    /// Star pairs the fit kept.
    pub matched: usize,
    /// Star pairs the fit rejected as outliers.
    pub rejected: usize,
    /// RMS distance of the kept pairs after the fit, in pixels, each pair
    /// weighted as in the fit (by its inverse centroid variance).
    pub rms: f64,
    /// Seeing of A (FWHM, pixels).
    pub fwhm_a: f64,
    /// Seeing of B (FWHM, pixels).
    pub fwhm_b: f64,
    /// Flux of B over flux of A for the same stars (weighted mean over the
    /// matched, unsaturated stars that agree on it, so variable stars do not
    /// count; see [`crate::align::align`]).
    pub flux_ratio: f64,
}

/// A tile of the aligned images (step 7.1), in A's pixel frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tile {
    /// 0, 1, … in row-major order over all tiles of the image, kept or not.
    pub index: usize,
    /// First column, overlap included.
    pub x0: usize,
    /// First row, overlap included.
    pub y0: usize,
    /// Columns, overlap included.
    pub width: usize,
    /// Rows, overlap included.
    pub height: usize,
    /// The part this tile owns, `[x_start, x_end)`, without overlap: each
    /// image pixel is owned by exactly one tile.
    pub own_x: (usize, usize),
    /// Rows it owns, `[y_start, y_end)`.
    pub own_y: (usize, usize),
    /// Candidate objects (from B's detections) that fall on the tile.
    pub candidates: usize,
}

/// A significant positive residual in the difference image (step 7.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// Centroid, in A's pixel frame (the whole image, not the tile).
    pub x: f64,
    /// Centroid, in A's pixel frame.
    pub y: f64,
    /// Flux in the difference image (ADU, A's scale).
    pub flux: f64,
    /// Peak of the matched-filter significance map.
    pub snr: f64,
    /// Connected pixels above the threshold.
    pub pixels: u32,
}

/// What step 8 makes of a residual.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A new point source with no star under it in A: a supernova candidate.
    Supernova,
    /// A star of A that changed brightness: flagged, not reported.
    Variable,
}

/// A final candidate (step 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The pair it was found in.
    pub pair: String,
    /// Position in A's pixel frame.
    pub x: f64,
    /// Position in A's pixel frame.
    pub y: f64,
    /// Flux in the difference image (ADU).
    pub flux: f64,
    /// Detection significance.
    pub snr: f64,
    /// Supernova or variable.
    pub verdict: Verdict,
}

impl Affine {
    /// A rotation by `degrees` (counter-clockwise in pixel coordinates)
    /// about `centre`, followed by a shift: how a telescope's pointing
    /// moves between epochs.
    pub fn rotation_about(centre: (f64, f64), degrees: f64, shift: (f64, f64)) -> Affine {
        let (s, co) = degrees.to_radians().sin_cos();
        let (cx, cy) = centre;
        Affine {
            coefficients: [
                co,
                -s,
                cx - co * cx + s * cy + shift.0,
                s,
                co,
                cy - s * cx - co * cy + shift.1,
            ],
        }
    }

    /// The map that undoes this one, or `None` if it squashes the plane
    /// (determinant zero or not finite).
    pub fn inverse(&self) -> Option<Affine> {
        let [a, b, c, d, e, f] = self.coefficients;
        let det = a * e - b * d;
        if !(det.abs() > 1e-12 && det.is_finite()) {
            return None;
        }
        let (ia, ib, id, ie) = (e / det, -b / det, -d / det, a / det);
        Some(Affine {
            coefficients: [ia, ib, -(ia * c + ib * f), id, ie, -(id * c + ie * f)],
        })
    }
}
