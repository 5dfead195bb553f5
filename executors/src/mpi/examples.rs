//! Two small M-tasks that show the pattern (check inputs on every rank, do
//! this rank's share, reduce to rank 0) and serve as the self-test's work.

use ::mpi::collective::SystemOperation;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use serde::{Deserialize, Serialize};

use super::{MpiActivity, MpiValue};

/// The dot product x·y of two vectors of length `n` with `x[i] = i` and
/// `y[i] = 2`, computed by summing over the elements, split into one
/// contiguous block per rank and reduced on rank 0.
///
/// The exact answer is `n·(n−1)`, so a result can be checked without
/// trusting the computation; see [`DotProduct::exact`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DotProduct {
    /// The vector length.
    pub n: u64,
}

/// What [`DotProduct`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DotProductResult {
    /// The vector length.
    pub n: u64,
    /// x·y, as summed and reduced by the ranks.
    pub dot: u64,
}

impl DotProduct {
    /// The closed form `n·(n−1)`, or `None` when it does not fit in a `u64`.
    pub fn exact(n: u64) -> Option<u64> {
        n.checked_mul(n.saturating_sub(1))
    }

    /// Rank `rank`'s part of the sum when `ranks` ranks share it: the
    /// elements `n·rank/ranks .. n·(rank+1)/ranks`. Callers check first that
    /// [`exact`](Self::exact) fits, so no partial sum overflows.
    pub fn share(&self, rank: u64, ranks: u64) -> u64 {
        let ranks = ranks.max(1);
        let bound = |r: u64| ((u128::from(self.n) * u128::from(r)) / u128::from(ranks)) as u64;
        let (lo, hi) = (bound(rank), bound(rank + 1));
        (lo..hi).map(|i| i * 2).fold(0_u64, u64::wrapping_add)
    }
}

#[typetag::serde]
impl MpiActivity for DotProduct {
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String> {
        // Every rank refuses alike, before any collective: nobody is left
        // waiting in the reduce.
        if DotProduct::exact(self.n).is_none() {
            return Err(format!(
                "n = {} is too large: n·(n−1) overflows u64",
                self.n
            ));
        }
        let rank = u64::try_from(world.rank()).map_err(|e| e.to_string())?;
        let ranks = u64::try_from(world.size()).map_err(|e| e.to_string())?;
        let local = self.share(rank, ranks);
        let root = world.process_at_rank(0);
        if rank == 0 {
            let mut dot = 0_u64;
            root.reduce_into_root(&local, &mut dot, SystemOperation::sum());
            MpiValue::encode(DotProductResult { n: self.n, dot })
        } else {
            root.reduce_into(&local, SystemOperation::sum());
            Ok(MpiValue::default())
        }
    }
}

/// π by Monte Carlo: every rank throws `samples_per_rank` points into the
/// unit square and counts those inside the quarter circle; rank 0 sums the
/// counts. The generator is seeded from `seed` and the rank, so a run is
/// reproducible for the same seed and number of ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MonteCarloPi {
    /// Points each rank throws.
    pub samples_per_rank: u64,
    /// The seed all ranks derive their streams from.
    pub seed: u64,
}

/// What [`MonteCarloPi`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PiEstimate {
    /// Points thrown over all ranks.
    pub samples: u64,
    /// Points inside the quarter circle.
    pub hits: u64,
    /// `4 · hits / samples`.
    pub pi: f64,
}

impl MonteCarloPi {
    /// The points inside the quarter circle among rank `rank`'s samples.
    pub fn hits_on_rank(&self, rank: u64) -> u64 {
        // Distinct, well-mixed streams per rank: SplitMix64 outputs are a
        // bijection of the state, so different starting states never merge.
        let mut rng = SplitMix64(self.seed ^ SplitMix64(rank).next());
        let mut hits = 0;
        for _ in 0..self.samples_per_rank {
            let (x, y) = (rng.unit(), rng.unit());
            if x * x + y * y < 1.0 {
                hits += 1;
            }
        }
        hits
    }
}

#[typetag::serde]
impl MpiActivity for MonteCarloPi {
    fn run(&mut self, world: &SimpleCommunicator) -> Result<MpiValue, String> {
        let rank = u64::try_from(world.rank()).map_err(|e| e.to_string())?;
        let ranks = u64::try_from(world.size()).map_err(|e| e.to_string())?;
        let samples = match self.samples_per_rank.checked_mul(ranks) {
            Some(0) => return Err("no samples: samples_per_rank is 0".to_string()),
            Some(samples) => samples,
            None => {
                return Err(format!(
                    "{} samples on each of {ranks} ranks overflow u64",
                    self.samples_per_rank
                ))
            }
        };
        let local = self.hits_on_rank(rank);
        let root = world.process_at_rank(0);
        if rank == 0 {
            let mut hits = 0_u64;
            root.reduce_into_root(&local, &mut hits, SystemOperation::sum());
            let pi = 4.0 * hits as f64 / samples as f64;
            MpiValue::encode(PiEstimate { samples, hits, pi })
        } else {
            root.reduce_into(&local, SystemOperation::sum());
            Ok(MpiValue::default())
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for
/// Monte Carlo; no dependency needed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)` from the top 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1_u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_closed_form_for_any_rank_count() {
        for n in [0, 1, 2, 7, 1000, 12_345] {
            let work = DotProduct { n };
            for ranks in 1..=5 {
                let total: u64 = (0..ranks).map(|r| work.share(r, ranks)).sum();
                assert_eq!(Some(total), DotProduct::exact(n), "n={n} ranks={ranks}");
            }
        }
        assert_eq!(DotProduct::exact(u64::MAX), None);
    }

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // Reference outputs of splitmix64 seeded with 1234567.
        let mut rng = SplitMix64(1_234_567);
        assert_eq!(rng.next(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn ranks_draw_different_streams_that_estimate_pi() {
        let work = MonteCarloPi {
            samples_per_rank: 200_000,
            seed: 42,
        };
        let (a, b) = (work.hits_on_rank(0), work.hits_on_rank(1));
        assert_ne!(a, b);
        let pi = 4.0 * (a + b) as f64 / 400_000.0;
        assert!((pi - std::f64::consts::PI).abs() < 0.02, "{pi}");
    }
}
