//! Sky background and noise, estimated on a coarse mesh of cells.
//!
//! Each cell gets a sigma-clipped median (the sky) and a robust standard
//! deviation (the noise) of its finite pixels; a 3×3 median filter over the
//! mesh then removes cells spoilt by a bright star or a large galaxy, and
//! bilinear interpolation between cell centres gives full-resolution maps.
//! The robust statistics used here ([`robust_sigma`], [`clipped_median`],
//! [`median`]) are public because later steps need the same estimators.

use crate::image::Image;
use thiserror::Error;

/// Scale from the median absolute deviation to the standard deviation of a
/// normal distribution.
const MAD_TO_SIGMA: f32 = 1.482_602_2;

/// Tunables of the background mesh.
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundParams {
    /// Cell side in pixels (default 64): large enough that a cell holds a few
    /// thousand sky pixels even with a star or two in it, small enough to
    /// follow the sky gradients of a 512–2048 px image.
    pub cell_size: usize,
    /// Clipping threshold in robust σ (default 3): the usual choice, which
    /// removes star pixels and cosmic rays but barely truncates Gaussian noise
    /// (0.27 % of it).
    pub clip_sigma: f32,
    /// Most clipping iterations per cell (default 10): clipping converges in
    /// 3–5 on real sky; the cap only bounds the work.
    pub max_iterations: usize,
    /// Fewest finite pixels, as a fraction of the cell, for the cell to be
    /// used (default 0.25): cells mostly off the image (NaN after resampling)
    /// are filled from their neighbours instead of from a few edge pixels.
    pub min_fraction: f32,
    /// A cell whose level differs from the median of its 3×3 neighbourhood
    /// by more than this many times its noise σ is replaced by that median
    /// (default 1.0; `f32::INFINITY` disables). A cell under a saturated
    /// star or a big galaxy reads high even after clipping; replacing only
    /// such outliers, rather than filtering every cell, keeps a smooth sky
    /// gradient intact at the mesh's edges, where a plain median filter
    /// would pull corner cells toward the interior.
    pub mesh_filter_sigma: f32,
}

impl Default for BackgroundParams {
    fn default() -> Self {
        BackgroundParams {
            cell_size: 64,
            clip_sigma: 3.0,
            max_iterations: 10,
            min_fraction: 0.25,
            mesh_filter_sigma: 1.0,
        }
    }
}

/// Why no background could be estimated.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BackgroundError {
    /// Nothing to measure.
    #[error("image of {width}x{height} pixels has no finite pixel; cannot estimate a background")]
    NoData {
        /// Image width.
        width: usize,
        /// Image height.
        height: usize,
    },
}

/// Result of [`clipped_median`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClippedStats {
    /// Median of the values that survived clipping.
    pub median: f32,
    /// Robust standard deviation (1.4826 × MAD) of the surviving values.
    pub sigma: f32,
    /// How many values survived.
    pub count: usize,
}

/// The sky level and noise of one image on a mesh of cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Background {
    width: usize,
    height: usize,
    /// Cell centres along x (pixel coordinates), one per mesh column.
    centres_x: Vec<f64>,
    /// Cell centres along y, one per mesh row.
    centres_y: Vec<f64>,
    /// Sky level per cell, row-major over the mesh.
    level: Vec<f32>,
    /// Noise (one σ) per cell, row-major over the mesh.
    noise: Vec<f32>,
    /// Median of the cell levels.
    global_level: f32,
    /// Median of the cell noises.
    global_noise: f32,
}

impl Background {
    /// Measures the background of `img` on a mesh of about
    /// `params.cell_size` px cells (the image is split into equal cells, so
    /// there are no slivers at the edges). Fails only if no pixel is finite.
    pub fn estimate(img: &Image, params: &BackgroundParams) -> Result<Background, BackgroundError> {
        let (width, height) = (img.width(), img.height());
        let no_data = BackgroundError::NoData { width, height };
        if width == 0 || height == 0 {
            return Err(no_data);
        }
        let xs = cell_edges(width, params.cell_size);
        let ys = cell_edges(height, params.cell_size);
        let (nx, ny) = (xs.len() - 1, ys.len() - 1);
        let mut level = vec![f32::NAN; nx * ny];
        let mut noise = vec![f32::NAN; nx * ny];
        let mut buf = Vec::new();
        let mut scratch = Vec::new();
        for j in 0..ny {
            for i in 0..nx {
                buf.clear();
                for y in ys[j]..ys[j + 1] {
                    let row = &img.row(y)[xs[i]..xs[i + 1]];
                    buf.extend(row.iter().copied().filter(|v| v.is_finite()));
                }
                let area = (xs[i + 1] - xs[i]) * (ys[j + 1] - ys[j]);
                let enough = buf.len() as f32 >= params.min_fraction * area as f32;
                if !enough || buf.is_empty() {
                    continue;
                }
                if let Some(s) = clip_in_place(&mut buf, &mut scratch, params) {
                    level[j * nx + i] = s.median;
                    let (xr, yr) = ((xs[i], xs[i + 1]), (ys[j], ys[j + 1]));
                    noise[j * nx + i] = difference_sigma(
                        img,
                        xr,
                        yr,
                        &s,
                        params.clip_sigma,
                        &mut buf,
                        &mut scratch,
                    );
                }
            }
        }
        if !fill_holes(&mut level, nx, ny) || !fill_holes(&mut noise, nx, ny) {
            return Err(no_data);
        }
        let (level_f, noise_f) = (
            median_filter_mesh(&level, nx, ny),
            median_filter_mesh(&noise, nx, ny),
        );
        for k in 0..level.len() {
            if (level[k] - level_f[k]).abs() > params.mesh_filter_sigma * noise_f[k] {
                level[k] = level_f[k];
                noise[k] = noise_f[k];
            }
        }
        let centre = |e: &[usize]| -> Vec<f64> {
            e.windows(2)
                .map(|w| (w[0] + w[1] - 1) as f64 / 2.0)
                .collect()
        };
        Ok(Background {
            width,
            height,
            centres_x: centre(&xs),
            centres_y: centre(&ys),
            global_level: median(&level),
            global_noise: median(&noise),
            level,
            noise,
        })
    }

    /// Median sky level over the mesh (ADU).
    pub fn level(&self) -> f32 {
        self.global_level
    }

    /// Median per-pixel sky noise over the mesh (ADU, one σ).
    pub fn noise(&self) -> f32 {
        self.global_noise
    }

    /// Mesh columns and rows.
    pub fn mesh_size(&self) -> (usize, usize) {
        (self.centres_x.len(), self.centres_y.len())
    }

    /// The full-resolution sky map (bilinear between cell centres, constant
    /// beyond the outermost centres).
    pub fn level_map(&self) -> Image {
        self.interpolate(&self.level)
    }

    /// The full-resolution noise map (one σ per pixel).
    pub fn noise_map(&self) -> Image {
        self.interpolate(&self.noise)
    }

    /// Subtracts the sky map from `img` in place (NaN stays NaN). `img` must
    /// have the size the background was measured on; otherwise only the
    /// overlapping part is changed.
    pub fn subtract_from(&self, img: &mut Image) {
        let map = self.level_map();
        let w = img.width().min(self.width);
        let iw = img.width();
        for y in 0..img.height().min(self.height) {
            let src = map.row(y);
            let dst = &mut img.pixels_mut()[y * iw..y * iw + w];
            for (d, s) in dst.iter_mut().zip(src) {
                *d -= *s;
            }
        }
    }

    fn interpolate(&self, mesh: &[f32]) -> Image {
        let nx = self.centres_x.len();
        let cols: Vec<(usize, usize, f32)> = (0..self.width)
            .map(|x| bracket(&self.centres_x, x as f64))
            .collect();
        let mut out = Image::new(self.width, self.height);
        let mut lo = vec![0f32; nx];
        for y in 0..self.height {
            // Interpolate the mesh once along y for this row, then along x per pixel.
            let (j0, j1, u) = bracket(&self.centres_y, y as f64);
            for (i, l) in lo.iter_mut().enumerate() {
                *l = mesh[j0 * nx + i] * (1.0 - u) + mesh[j1 * nx + i] * u;
            }
            let row = &mut out.pixels_mut()[y * self.width..(y + 1) * self.width];
            for (p, &(i0, i1, t)) in row.iter_mut().zip(&cols) {
                *p = lo[i0] * (1.0 - t) + lo[i1] * t;
            }
        }
        out
    }
}

/// Pixel noise of a cell from differences of horizontally adjacent sky
/// pixels (both within `clip` σ of the sky): robust σ of the differences
/// over √2. Unlike the spread of the pixel values themselves it ignores a
/// sky gradient across the cell. Falls back to the clipped σ with fewer
/// than 32 pairs.
fn difference_sigma(
    img: &Image,
    xr: (usize, usize),
    yr: (usize, usize),
    s: &ClippedStats,
    clip: f32,
    buf: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
) -> f32 {
    let (lo, hi) = (s.median - clip * s.sigma, s.median + clip * s.sigma);
    let sky = |v: f32| v >= lo && v <= hi;
    buf.clear();
    for y in yr.0..yr.1 {
        let row = &img.row(y)[xr.0..xr.1];
        buf.extend(
            row.windows(2)
                .filter(|p| sky(p[0]) && sky(p[1]))
                .map(|p| p[1] - p[0]),
        );
    }
    if buf.len() < 32 {
        return s.sigma;
    }
    let med = median_in_place(buf);
    mad_sigma(buf, med, scratch) / std::f32::consts::SQRT_2
}

/// Boundaries of `n` ≈ `len / cell` equal cells covering `0..len`.
fn cell_edges(len: usize, cell: usize) -> Vec<usize> {
    let cell = cell.max(1);
    let n = ((len as f64 / cell as f64).round() as usize).clamp(1, len.max(1));
    (0..=n).map(|i| i * len / n).collect()
}

/// The two mesh nodes around `x` and the weight of the second.
fn bracket(centres: &[f64], x: f64) -> (usize, usize, f32) {
    let n = centres.len();
    if n == 1 || x <= centres[0] {
        return (0, 0, 0.0);
    }
    if x >= centres[n - 1] {
        return (n - 1, n - 1, 0.0);
    }
    let i = centres.partition_point(|&c| c <= x) - 1;
    let t = (x - centres[i]) / (centres[i + 1] - centres[i]);
    (i, i + 1, t as f32)
}

/// Replaces NaN cells by the mean of their finite 8-neighbours, repeatedly,
/// so holes fill from their edges inward. False if the mesh has no finite cell.
fn fill_holes(mesh: &mut [f32], nx: usize, ny: usize) -> bool {
    if mesh.iter().all(|v| !v.is_finite()) {
        return false;
    }
    while mesh.iter().any(|v| !v.is_finite()) {
        let prev = mesh.to_vec();
        for j in 0..ny {
            for i in 0..nx {
                if prev[j * nx + i].is_finite() {
                    continue;
                }
                let (mut sum, mut n) = (0.0f32, 0);
                for jj in j.saturating_sub(1)..(j + 2).min(ny) {
                    for ii in i.saturating_sub(1)..(i + 2).min(nx) {
                        let v = prev[jj * nx + ii];
                        if v.is_finite() {
                            sum += v;
                            n += 1;
                        }
                    }
                }
                if n > 0 {
                    mesh[j * nx + i] = sum / n as f32;
                }
            }
        }
    }
    true
}

/// 3×3 median filter of the mesh (edges use the cells that exist).
fn median_filter_mesh(mesh: &[f32], nx: usize, ny: usize) -> Vec<f32> {
    let mut out = vec![0f32; mesh.len()];
    let mut buf = Vec::with_capacity(9);
    for j in 0..ny {
        for i in 0..nx {
            buf.clear();
            for jj in j.saturating_sub(1)..(j + 2).min(ny) {
                for ii in i.saturating_sub(1)..(i + 2).min(nx) {
                    buf.push(mesh[jj * nx + ii]);
                }
            }
            out[j * nx + i] = median_in_place(&mut buf);
        }
    }
    out
}

/// Median of the finite values of `values` (NaN if there are none). The
/// mean of the two middle values is taken for an even count.
pub fn median(values: &[f32]) -> f32 {
    let mut buf: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    median_in_place(&mut buf)
}

/// Robust standard deviation of the finite values: 1.4826 × the median
/// absolute deviation from the median. NaN if there are no finite values.
/// Insensitive to up to half the values being outliers (stars, cosmic rays).
pub fn robust_sigma(values: &[f32]) -> f32 {
    let mut buf: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let mut scratch = Vec::new();
    let med = median_in_place(&mut buf);
    mad_sigma(&buf, med, &mut scratch)
}

/// Iteratively sigma-clipped median and robust σ of the finite values:
/// values farther than `clip_sigma` robust σ from the median are dropped and
/// the statistics recomputed, until nothing changes or `max_iterations`.
/// `None` if there are no finite values.
pub fn clipped_median(
    values: &[f32],
    clip_sigma: f32,
    max_iterations: usize,
) -> Option<ClippedStats> {
    let mut buf: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let params = BackgroundParams {
        clip_sigma,
        max_iterations,
        ..BackgroundParams::default()
    };
    clip_in_place(&mut buf, &mut Vec::new(), &params)
}

/// Clipping loop on finite values in `buf` (reordered and shrunk in place).
fn clip_in_place(
    buf: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
    params: &BackgroundParams,
) -> Option<ClippedStats> {
    if buf.is_empty() {
        return None;
    }
    let mut med = median_in_place(buf);
    let mut sigma = mad_sigma(buf, med, scratch);
    for _ in 0..params.max_iterations {
        // A zero σ (constant data) would clip everything but the median.
        if sigma <= 0.0 || !sigma.is_finite() {
            break;
        }
        let limit = params.clip_sigma * sigma;
        let before = buf.len();
        buf.retain(|v| (v - med).abs() <= limit);
        if buf.len() == before || buf.is_empty() {
            break;
        }
        med = median_in_place(buf);
        sigma = mad_sigma(buf, med, scratch);
    }
    Some(ClippedStats {
        median: med,
        sigma,
        count: buf.len(),
    })
}

/// 1.4826 × median |v − med|; `scratch` avoids an allocation per call.
fn mad_sigma(values: &[f32], med: f32, scratch: &mut Vec<f32>) -> f32 {
    scratch.clear();
    scratch.extend(values.iter().map(|v| (v - med).abs()));
    MAD_TO_SIGMA * median_in_place(scratch)
}

/// Median of `buf` (all finite), reordering it. NaN when empty.
pub(crate) fn median_in_place(buf: &mut [f32]) -> f32 {
    let n = buf.len();
    if n == 0 {
        return f32::NAN;
    }
    let mid = n / 2;
    let (left, m, _) = buf.select_nth_unstable_by(mid, f32::total_cmp);
    let upper = *m;
    if n % 2 == 1 {
        return upper;
    }
    let lower = left.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    0.5 * (lower + upper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{add_noise, gaussian_star, rng};

    #[test]
    fn robust_stats_of_simple_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0, f32::NAN]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert!(robust_sigma(&[f32::NAN]).is_nan());
        assert_eq!(robust_sigma(&[5.0; 10]), 0.0);
        let s = clipped_median(&[1.0, 2.0, 3.0, 1000.0, 2.0, 2.0], 3.0, 10).unwrap();
        assert_eq!(s.median, 2.0);
        assert!(s.count < 6);
        assert!(clipped_median(&[f32::NAN], 3.0, 5).is_none());
    }

    #[test]
    fn recovers_sloped_sky_and_noise_under_stars() {
        let (w, h) = (300, 200);
        let mut img = Image::new(w, h);
        for y in 0..h {
            for x in 0..w {
                img.set(x, y, 1000.0 + 0.5 * x as f32 + 0.2 * y as f32);
            }
        }
        let mut r = rng(1);
        for k in 0..40 {
            let (x, y) = ((k * 37 % 290) as f64 + 5.0, (k * 53 % 190) as f64 + 5.0);
            gaussian_star(&mut img, x, y, 50_000.0, 1.5);
        }
        add_noise(&mut img, 25.0, &mut r);
        let bg = Background::estimate(&img, &BackgroundParams::default()).unwrap();
        let map = bg.level_map();
        for &(x, y) in &[(40usize, 40usize), (150, 100), (260, 160)] {
            let truth = 1000.0 + 0.5 * x as f32 + 0.2 * y as f32;
            let err = (map.get(x, y) - truth).abs();
            assert!(
                err < 0.02 * 25.0 * 10.0,
                "({x},{y}) {} vs {truth}",
                map.get(x, y)
            );
        }
        let noise = bg.noise();
        assert!((noise - 25.0).abs() < 0.04 * 25.0, "noise {noise}");
    }

    #[test]
    fn nan_regions_and_tiny_images() {
        let mut img = Image::filled(130, 70, 500.0);
        for y in 0..70 {
            for x in 0..65 {
                img.set(x, y, f32::NAN);
            }
        }
        let bg = Background::estimate(&img, &BackgroundParams::default()).unwrap();
        assert!((bg.level_map().get(0, 0) - 500.0).abs() < 1e-3);
        let tiny = Image::filled(2, 1, 7.0);
        let bg = Background::estimate(&tiny, &BackgroundParams::default()).unwrap();
        assert_eq!(bg.level(), 7.0);
        let empty = Image::filled(10, 10, f32::NAN);
        assert!(Background::estimate(&empty, &BackgroundParams::default()).is_err());
        assert!(Background::estimate(&Image::new(0, 0), &BackgroundParams::default()).is_err());
    }
}
