//! Detector noise: photon (Poisson) noise on the electrons plus Gaussian
//! read noise.
//!
//! rand_distr's Poisson sampler evaluates several log-gamma functions per
//! draw, which at ~1.6 million sky pixels per image of ~2000 electrons each
//! dominated the generation time. This module uses Hörmann's PTRS
//! transformed-rejection sampler instead (W. Hörmann, "The transformed
//! rejection method for generating Poisson random variables", Insurance:
//! Mathematics and Economics 12, 1993), which accepts most draws without
//! any logarithm and is exact, and Knuth's product method below λ = 10.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// Below this mean PTRS's constants are not valid; Knuth's method is cheap there.
const PTRS_MIN_LAMBDA: f64 = 10.0;

/// A Poisson deviate with mean `lambda` (0 for `lambda <= 0` or NaN).
pub(crate) fn poisson<R: Rng + ?Sized>(lambda: f64, rng: &mut R) -> f64 {
    if lambda >= PTRS_MIN_LAMBDA {
        ptrs(lambda, rng)
    } else if lambda > 0.0 {
        knuth(lambda, rng)
    } else {
        0.0
    }
}

fn knuth<R: Rng + ?Sized>(lambda: f64, rng: &mut R) -> f64 {
    let limit = (-lambda).exp();
    let mut k = 0.0;
    let mut p: f64 = rng.gen();
    while p > limit {
        k += 1.0;
        p *= rng.gen::<f64>();
    }
    k
}

fn ptrs<R: Rng + ?Sized>(lambda: f64, rng: &mut R) -> f64 {
    let slam = lambda.sqrt();
    let loglam = lambda.ln();
    let b = 0.931 + 2.53 * slam;
    let a = -0.059 + 0.02483 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let v_r = 0.9277 - 3.6224 / (b - 2.0);
    loop {
        let u = rng.gen::<f64>() - 0.5;
        let v = rng.gen::<f64>();
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + lambda + 0.43).floor();
        // The squeeze: inside it the hat and the target agree closely
        // enough to accept without evaluating the density.
        if us >= 0.07 && v <= v_r {
            return k;
        }
        // `us == 0` would make `k` NaN; reject it with the negative ones.
        if k.is_nan() || k < 0.0 || (us < 0.013 && v > us) {
            continue;
        }
        let lhs = v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln();
        if lhs <= -lambda + k * loglam - ln_factorial(k) {
            return k;
        }
    }
}

/// `ln(k!)` for a non-negative integer-valued `k`.
fn ln_factorial(k: f64) -> f64 {
    if k < 16.0 {
        let mut sum = 0.0;
        let mut i = 2.0;
        while i <= k {
            sum += f64::ln(i);
            i += 1.0;
        }
        return sum;
    }
    // Stirling's series for ln Γ(x), x = k + 1 ≥ 17: the next term is below 1e-14.
    let x = k + 1.0;
    let x2 = x * x;
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x2)
        + 1.0 / (1260.0 * x * x2 * x2)
}

/// A noisy observation of `expected` (ADU per pixel, sky included): each
/// pixel gets Poisson noise on its `expected × gain` electrons and Gaussian
/// read noise of `read_noise` electrons, then is converted back to ADU.
pub(crate) fn observe<R: Rng + ?Sized>(
    expected: &[f64],
    gain: f64,
    read_noise: f64,
    rng: &mut R,
) -> Vec<f32> {
    expected
        .iter()
        .map(|&adu| {
            let read: f64 = StandardNormal.sample(rng);
            let electrons = poisson(adu * gain, rng) + read_noise * read;
            (electrons / gain) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn moments(lambda: f64, n: usize) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let draws: Vec<f64> = (0..n).map(|_| poisson(lambda, &mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var)
    }

    #[test]
    fn poisson_mean_and_variance() {
        for lambda in [0.5, 4.0, 10.0, 37.5, 2000.0, 3.0e6] {
            let n = 200_000;
            let (mean, var) = moments(lambda, n);
            let se = (lambda / n as f64).sqrt();
            assert!(
                (mean - lambda).abs() < 5.0 * se,
                "lambda {lambda}: mean {mean}"
            );
            assert!(
                (var / lambda - 1.0).abs() < 0.02,
                "lambda {lambda}: var {var}"
            );
        }
        assert_eq!(poisson(0.0, &mut ChaCha8Rng::seed_from_u64(1)), 0.0);
        assert_eq!(poisson(f64::NAN, &mut ChaCha8Rng::seed_from_u64(1)), 0.0);
    }

    #[test]
    fn poisson_small_probabilities_match() {
        // P(k = 10 | λ = 12) = e^-12 12^10 / 10! ≈ 0.104837
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 400_000;
        let hits = (0..n).filter(|_| poisson(12.0, &mut rng) == 10.0).count();
        assert!((hits as f64 / n as f64 - 0.104837).abs() < 0.003);
    }

    #[test]
    fn ln_factorial_is_accurate() {
        let mut exact = 0.0;
        for k in 1..60 {
            exact += f64::ln(k as f64);
            assert!(
                (ln_factorial(k as f64) - exact).abs() < 1e-10 * exact.max(1.0),
                "k = {k}"
            );
        }
    }

    #[test]
    fn observed_noise_matches_model() {
        let (gain, rn, sky) = (2.0, 5.0, 1000.0);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let img = observe(&vec![sky; 100_000], gain, rn, &mut rng);
        let mean = img.iter().map(|&p| p as f64).sum::<f64>() / img.len() as f64;
        let var = img.iter().map(|&p| (p as f64 - mean).powi(2)).sum::<f64>() / img.len() as f64;
        let model = sky / gain + (rn / gain).powi(2);
        assert!((mean - sky).abs() < 0.5, "{mean}");
        assert!((var / model - 1.0).abs() < 0.03, "{var} vs {model}");
    }
}
