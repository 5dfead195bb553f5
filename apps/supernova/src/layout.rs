//! Where the pairs live: the site groups of the Constellation paper's
//! Table 2, scaled to any number of pairs, and the dataset's directory
//! layout.
//!
//! Of the paper's 1052 pairs, 105 were on both `lu` and `uva`, 105 only on
//! `uva`, 420 only on `vu3`, 105 on both `vu3` and `vu4` and 317 only on
//! `vu4`. [`group_counts`] scales these shares to `n` pairs with
//! largest-remainder rounding, so the counts always sum to `n` and are
//! exactly the paper's for `n = 1052`. For `n < 5` some groups necessarily
//! get no pair; each group gets what the rounding gives it (at most one).
//!
//! On disk a dataset is `dir/manifest.json`, `dir/truth.json` and
//! `dir/sites/<site>/<pair>/a.fits` and `b.fits`.

use std::path::{Path, PathBuf};

/// The sites of the paper's grid, in the order [`GROUPS`] refers to them.
pub const DEFAULT_SITES: [&str; 4] = ["lu", "uva", "vu3", "vu4"];

/// A set of sites holding the same pairs, as indices into the site list,
/// with the number of pairs it held in the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteGroup {
    /// Indices into the site list (`DEFAULT_SITES` order).
    pub sites: &'static [usize],
    /// Pairs in this group out of the paper's [`PAPER_PAIRS`].
    pub paper_pairs: usize,
}

/// The paper's total number of pairs.
pub const PAPER_PAIRS: usize = 1052;

/// Table 2 of the Constellation paper, as groups over [`DEFAULT_SITES`].
pub const GROUPS: [SiteGroup; 5] = [
    SiteGroup {
        sites: &[0, 1],
        paper_pairs: 105,
    },
    SiteGroup {
        sites: &[1],
        paper_pairs: 105,
    },
    SiteGroup {
        sites: &[2],
        paper_pairs: 420,
    },
    SiteGroup {
        sites: &[2, 3],
        paper_pairs: 105,
    },
    SiteGroup {
        sites: &[3],
        paper_pairs: 317,
    },
];

/// How many of `n` pairs each of [`GROUPS`] gets: the paper's shares scaled
/// to `n`, floors first, then the leftover pairs one each to the groups with
/// the largest remainders (ties to the earlier group, for determinism).
pub fn group_counts(n: usize) -> [usize; 5] {
    // Integer arithmetic keeps the rounding exact and platform-independent.
    let scaled = GROUPS.map(|g| g.paper_pairs as u128 * n as u128);
    let total = PAPER_PAIRS as u128;
    let mut counts = scaled.map(|s| (s / total) as usize);
    let assigned: usize = counts.iter().sum();
    let mut order: Vec<usize> = (0..GROUPS.len()).collect();
    // Stable sort: equal remainders keep the table's order.
    order.sort_by_key(|&i| std::cmp::Reverse(scaled[i] % total));
    for &i in order.iter().take(n - assigned) {
        counts[i] += 1;
    }
    counts
}

/// One of the two images of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Epoch {
    /// The reference image.
    A,
    /// The later image, which holds the supernovae.
    B,
}

impl Epoch {
    /// Both epochs, A first.
    pub const BOTH: [Epoch; 2] = [Epoch::A, Epoch::B];

    /// `"A"` or `"B"`, as in the FITS `EPOCH` key.
    pub fn as_str(self) -> &'static str {
        match self {
            Epoch::A => "A",
            Epoch::B => "B",
        }
    }

    /// `a.fits` or `b.fits`.
    /// `a` or `b`, as in the names of the pipeline's files.
    pub fn letter(self) -> &'static str {
        match self {
            Epoch::A => "a",
            Epoch::B => "b",
        }
    }

    pub fn file_name(self) -> &'static str {
        match self {
            Epoch::A => "a.fits",
            Epoch::B => "b.fits",
        }
    }
}

impl std::str::FromStr for Epoch {
    type Err = String;

    fn from_str(text: &str) -> Result<Epoch, String> {
        match text {
            "a" | "A" => Ok(Epoch::A),
            "b" | "B" => Ok(Epoch::B),
            other => Err(format!("unknown epoch `{other}`: say `a` or `b`")),
        }
    }
}

/// `dir/sites/<site>/<pair>`: the directory holding one replica of a pair.
pub fn pair_dir(dir: &Path, pair_id: &str, site: &str) -> PathBuf {
    dir.join("sites").join(site).join(pair_id)
}

/// `dir/sites/<site>/<pair>/<a|b>.fits`.
pub fn image_path(dir: &Path, pair_id: &str, site: &str, epoch: Epoch) -> PathBuf {
    pair_dir(dir, pair_id, site).join(epoch.file_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_counts_are_reproduced() {
        assert_eq!(group_counts(1052), [105, 105, 420, 105, 317]);
        let per_site = |c: [usize; 5]| {
            let mut s = [0; 4];
            for (g, n) in GROUPS.iter().zip(c) {
                for &i in g.sites {
                    s[i] += n;
                }
            }
            s
        };
        assert_eq!(per_site(group_counts(1052)), [105, 210, 525, 422]);
    }

    #[test]
    fn scaled_counts_sum_to_n() {
        // 6 pairs: the vu3+vu4 group loses the rounding to the bigger vu4 share.
        assert_eq!(group_counts(6), [1, 1, 2, 0, 2]);
        assert_eq!(group_counts(20), [2, 2, 8, 2, 6]);
        for n in 0..3000 {
            assert_eq!(group_counts(n).iter().sum::<usize>(), n, "n = {n}");
        }
        assert_eq!(group_counts(0), [0; 5]);
        assert_eq!(group_counts(1), [0, 0, 1, 0, 0]);
    }

    #[test]
    fn paths_follow_the_layout() {
        let p = image_path(Path::new("/d"), "pair-0007", "vu3", Epoch::B);
        assert_eq!(p, PathBuf::from("/d/sites/vu3/pair-0007/b.fits"));
    }
}
