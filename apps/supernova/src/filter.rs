//! Separable, NaN-aware Gaussian smoothing.
//!
//! Used to smooth images before detection and to broaden the sharper image's
//! PSF during equalisation. Missing pixels (NaN) get no weight and the
//! kernel is renormalised over the pixels that exist, so a hole or an image
//! edge does not darken its surroundings; a NaN pixel stays NaN.

use crate::image::Image;

/// The discrete Gaussian kernel `e^{-t} I_n(t)` with `t = sigma²`
/// (Lindeberg's discrete analogue of the Gaussian), truncated at
/// `ceil(4σ) + 1` and normalised to sum 1.
///
/// Unlike a sampled Gaussian, its variance is exactly `sigma²` even for
/// `sigma` well below a pixel, which matters when the two epochs' seeing
/// differs only slightly: PSF variances then add exactly under convolution.
/// Returns `[1.0]` for `sigma` ≤ 0 or not finite.
pub fn discrete_gaussian(sigma: f64) -> Vec<f32> {
    if !(sigma > 0.0 && sigma.is_finite()) {
        return vec![1.0];
    }
    let t = sigma * sigma;
    let r = (4.0 * sigma).ceil() as usize + 1;
    // The Bessel series loses precision for large t; a sampled Gaussian is
    // indistinguishable from the discrete one there.
    let half: Vec<f64> = if t > 25.0 {
        (0..=r)
            .map(|n| (-((n * n) as f64) / (2.0 * t)).exp())
            .collect()
    } else {
        (0..=r).map(|n| (-t).exp() * bessel_i(n, t)).collect()
    };
    symmetric_normalised(&half)
}

/// Mirrors `half[0..=r]` into a kernel of length `2r+1` summing to 1.
fn symmetric_normalised(half: &[f64]) -> Vec<f32> {
    let r = half.len() - 1;
    let total: f64 = half[0] + 2.0 * half[1..].iter().sum::<f64>();
    (0..=2 * r)
        .map(|k| (half[k.abs_diff(r)] / total) as f32)
        .collect()
}

/// Modified Bessel function of the first kind `I_n(t)` by its power series.
fn bessel_i(n: usize, t: f64) -> f64 {
    let h = t / 2.0;
    // First term (t/2)^n / n!, then term_{k+1} = term_k · h² / ((k+1)(k+n+1)).
    let mut term = (0..n).fold(1.0, |acc, k| acc * h / (k + 1) as f64);
    let mut sum = term;
    for k in 0..500 {
        term *= h * h / ((k + 1) as f64 * (k + n + 1) as f64);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// Convolves `img` with `kernel ⊗ kernel` (odd length, centred), ignoring
/// NaN pixels and pixels beyond the edges by renormalising the weights of
/// those that exist. Output pixels that are NaN in the input stay NaN.
pub fn convolve_nan_aware(img: &Image, kernel: &[f32]) -> Image {
    let (w, h) = (img.width(), img.height());
    if kernel.len() <= 1 || w == 0 || h == 0 {
        return img.clone();
    }
    // Split values and a 0/1 mask so both passes are branch-free sums.
    let mut vals = Vec::with_capacity(w * h);
    let mut mask = Vec::with_capacity(w * h);
    for &v in img.pixels() {
        let ok = v.is_finite();
        vals.push(if ok { v } else { 0.0 });
        mask.push(if ok { 1.0f32 } else { 0.0 });
    }
    let hv = horizontal(&vals, w, h, kernel);
    let hm = horizontal(&mask, w, h, kernel);
    let vv = vertical(&hv, w, h, kernel);
    let vm = vertical(&hm, w, h, kernel);
    let out: Vec<f32> = img
        .pixels()
        .iter()
        .zip(vv.iter().zip(&vm))
        .map(|(&orig, (&num, &den))| {
            if orig.is_finite() && den > 1e-6 {
                num / den
            } else {
                f32::NAN
            }
        })
        .collect();
    Image::from_pixels(w, h, out).expect("same size")
}

/// Horizontal pass with zero padding beyond the row ends.
fn horizontal(src: &[f32], w: usize, h: usize, k: &[f32]) -> Vec<f32> {
    let r = k.len() / 2;
    let mut out = vec![0f32; w * h];
    for y in 0..h {
        let row = &src[y * w..(y + 1) * w];
        let dst = &mut out[y * w..(y + 1) * w];
        for (j, &kj) in k.iter().enumerate() {
            // Output x reads row[x + j - r]; restrict x so that index exists.
            let x_lo = r.saturating_sub(j);
            let x_hi = (w + r).saturating_sub(j).min(w);
            if x_lo >= x_hi {
                continue;
            }
            let s0 = x_lo + j - r;
            let src_part = &row[s0..s0 + (x_hi - x_lo)];
            for (d, s) in dst[x_lo..x_hi].iter_mut().zip(src_part) {
                *d += kj * s;
            }
        }
    }
    out
}

/// Vertical pass with zero padding beyond the first and last rows.
fn vertical(src: &[f32], w: usize, h: usize, k: &[f32]) -> Vec<f32> {
    let r = k.len() / 2;
    let mut out = vec![0f32; w * h];
    for y in 0..h {
        let dst = &mut out[y * w..(y + 1) * w];
        for (j, &kj) in k.iter().enumerate() {
            let yy = y as isize + j as isize - r as isize;
            if yy < 0 || yy >= h as isize {
                continue;
            }
            let row = &src[yy as usize * w..(yy as usize + 1) * w];
            for (d, s) in dst.iter_mut().zip(row) {
                *d += kj * s;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variance(k: &[f32]) -> f64 {
        let r = (k.len() / 2) as f64;
        k.iter()
            .enumerate()
            .map(|(i, &v)| v as f64 * (i as f64 - r).powi(2))
            .sum()
    }

    #[test]
    fn discrete_gaussian_has_exact_variance() {
        for &s in &[0.2, 0.5, 1.0, 1.7, 3.0, 6.0] {
            let k = discrete_gaussian(s);
            let sum: f32 = k.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5);
            assert!(
                (variance(&k) - s * s).abs() < 2e-3 * (1.0 + s * s),
                "σ {s}: {}",
                variance(&k)
            );
        }
        assert_eq!(discrete_gaussian(0.0), vec![1.0]);
        assert_eq!(discrete_gaussian(f64::NAN), vec![1.0]);
    }

    #[test]
    fn convolution_keeps_flux_and_handles_nan() {
        let mut img = Image::new(41, 31);
        img.set(20, 15, 100.0);
        let out = convolve_nan_aware(&img, &discrete_gaussian(1.5));
        let total: f32 = out.pixels().iter().sum();
        assert!((total - 100.0).abs() < 1e-3);
        let mut holes = Image::filled(20, 20, 3.0);
        holes.set(5, 5, f32::NAN);
        let out = convolve_nan_aware(&holes, &discrete_gaussian(2.0));
        assert!(out.get(5, 5).is_nan());
        assert!((out.get(6, 5) - 3.0).abs() < 1e-5 && (out.get(0, 0) - 3.0).abs() < 1e-5);
    }
}
