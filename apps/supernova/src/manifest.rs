//! The dataset manifest: every pair's size and the sites that hold it.
//!
//! [`Manifest::plan`] decides all of it from the configuration and seed
//! alone, without rendering an image, so a simulator can plan 1052 pairs
//! instantly; [`crate::generate::generate`] renders exactly what the plan
//! says. The manifest is stored as `dir/manifest.json`.
//!
//! Sites: with four sites the pairs are spread over them as in the
//! Constellation paper's Table 2 (see [`crate::layout`]); the groups are
//! filled in a seeded shuffled order of the pairs, so which pair lands where
//! is random but reproducible. With any other number of sites there is no
//! table to follow, and each pair goes to a single site, round-robin over
//! the same shuffled order. An empty site list means [`DEFAULT_SITES`].
//!
//! Sizes: width and height are drawn independently and uniformly from the
//! multiples of 16 in `[min_size, max_size]` (bounds given in either order),
//! so processing time varies between pairs. If the range holds no multiple
//! of 16, `min_size` rounded up to one is used.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::fsutil::write_atomic;
use crate::generate::{stream, GenerateConfig, Purpose};
use crate::layout::{group_counts, Epoch, DEFAULT_SITES, GROUPS};

/// The dataset: its seed, its sites and its pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The seed everything was drawn from.
    pub seed: u64,
    /// All sites, in order.
    pub sites: Vec<String>,
    /// All pairs, in id order.
    pub pairs: Vec<PairEntry>,
}

/// One pair of images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairEntry {
    /// `pair-0001`, `pair-0002`, …
    pub id: String,
    /// Image width in pixels (both epochs).
    pub width: usize,
    /// Image height in pixels (both epochs).
    pub height: usize,
    /// Size of `a.fits` plus `b.fits` (one replica), in bytes.
    pub bytes: u64,
    /// The sites holding a replica of this pair.
    pub sites: Vec<String>,
}

impl PairEntry {
    /// Pixels per image.
    pub fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }
}

/// Why a manifest could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: cannot read the manifest: {source}")]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid manifest JSON.
    #[error("{path}: not a valid manifest: {source}")]
    Parse {
        /// The manifest file.
        path: PathBuf,
        /// Where and why parsing failed.
        source: serde_json::Error,
    },
    /// The JSON parsed but contradicts itself.
    #[error("{path}: inconsistent manifest: {reason}")]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// What is inconsistent.
        reason: String,
    },
    /// The file could not be written.
    #[error("{path}: cannot write the manifest: {source}")]
    Write {
        /// The manifest file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The id of the pair with 0-based `index`: `pair-0001` for 0.
pub fn pair_id(index: usize) -> String {
    format!("pair-{:04}", index + 1)
}

impl Manifest {
    /// The manifest's file name inside a dataset directory.
    pub const FILE_NAME: &'static str = "manifest.json";

    /// Sizes and sites of `config.pairs` pairs, drawn from `config.seed`
    /// without rendering anything.
    pub fn plan(config: &GenerateConfig) -> Manifest {
        let sites = site_names(&config.sites);
        let site_lists = assign_sites(config.seed, config.pairs, &sites);
        let pairs = site_lists
            .into_iter()
            .enumerate()
            .map(|(index, sites)| {
                let (width, height) = draw_size(config, index);
                PairEntry {
                    id: pair_id(index),
                    width,
                    height,
                    bytes: 2 * crate::fits::file_size(width, height),
                    sites,
                }
            })
            .collect();
        Manifest {
            seed: config.seed,
            sites,
            pairs,
        }
    }

    /// Writes `dir/manifest.json` (atomically).
    pub fn save(&self, dir: &Path) -> Result<(), ManifestError> {
        let path = dir.join(Self::FILE_NAME);
        let json = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        write_atomic(&path, &json).map_err(|source| ManifestError::Write { path, source })
    }

    /// Reads and checks `dir/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(Self::FILE_NAME);
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|source| ManifestError::Parse {
                path: path.clone(),
                source,
            })?;
        manifest
            .check()
            .map_err(|reason| ManifestError::Invalid { path, reason })?;
        Ok(manifest)
    }

    /// `dir/sites/<site>/<pair>/<a|b>.fits`.
    pub fn image_path(dir: &Path, pair_id: &str, site: &str, epoch: Epoch) -> PathBuf {
        crate::layout::image_path(dir, pair_id, site, epoch)
    }

    /// The `n` largest pairs by pixel count, largest first; equal sizes in
    /// id order.
    pub fn largest(&self, n: usize) -> Vec<&PairEntry> {
        let mut pairs: Vec<&PairEntry> = self.pairs.iter().collect();
        pairs.sort_by(|a, b| b.pixels().cmp(&a.pixels()).then_with(|| a.id.cmp(&b.id)));
        pairs.truncate(n);
        pairs
    }

    /// The pair with this id.
    pub fn pair(&self, id: &str) -> Option<&PairEntry> {
        self.pairs.iter().find(|p| p.id == id)
    }

    /// The pairs that `site` holds, in id order.
    pub fn pairs_on<'a>(&'a self, site: &'a str) -> impl Iterator<Item = &'a PairEntry> + 'a {
        self.pairs
            .iter()
            .filter(move |p| p.sites.iter().any(|s| s == site))
    }

    /// Checks what serde cannot: unique ids, known sites, non-empty images.
    fn check(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        for p in &self.pairs {
            if !ids.insert(p.id.as_str()) {
                return Err(format!("pair id {} appears twice", p.id));
            }
            if p.width == 0 || p.height == 0 {
                return Err(format!(
                    "pair {} has an empty {} x {} image",
                    p.id, p.width, p.height
                ));
            }
            if p.sites.is_empty() {
                return Err(format!("pair {} is on no site", p.id));
            }
            if let Some(s) = p.sites.iter().find(|s| !self.sites.contains(s)) {
                return Err(format!(
                    "pair {} is on site {s:?}, which is not in the site list",
                    p.id
                ));
            }
        }
        Ok(())
    }
}

fn site_names(sites: &[String]) -> Vec<String> {
    if sites.is_empty() {
        DEFAULT_SITES.iter().map(|s| s.to_string()).collect()
    } else {
        sites.to_vec()
    }
}

/// The sites of each pair, by pair index.
fn assign_sites(seed: u64, n: usize, sites: &[String]) -> Vec<Vec<String>> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut stream(seed, Purpose::SiteOrder, 0, 0));
    let mut result = vec![Vec::new(); n];
    if sites.len() == DEFAULT_SITES.len() {
        let mut next = order.into_iter();
        for (group, count) in GROUPS.iter().zip(group_counts(n)) {
            for index in next.by_ref().take(count) {
                result[index] = group.sites.iter().map(|&s| sites[s].clone()).collect();
            }
        }
    } else {
        for (k, index) in order.into_iter().enumerate() {
            result[index] = vec![sites[k % sites.len()].clone()];
        }
    }
    result
}

/// `(width, height)` of pair `index`: multiples of 16 in the configured range.
fn draw_size(config: &GenerateConfig, index: usize) -> (usize, usize) {
    let (lo, hi) = if config.min_size <= config.max_size {
        (config.min_size, config.max_size)
    } else {
        (config.max_size, config.min_size)
    };
    let (k_lo, k_hi) = (lo.div_ceil(16).max(1), hi / 16);
    let mut rng = stream(config.seed, Purpose::Size, index as u64, 0);
    let mut draw = || {
        if k_lo > k_hi {
            k_lo * 16
        } else {
            rng.gen_range(k_lo..=k_hi) * 16
        }
    };
    let width = draw();
    (width, draw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsutil::test_dir;

    fn config(pairs: usize) -> GenerateConfig {
        GenerateConfig {
            pairs,
            ..GenerateConfig::default()
        }
    }

    fn per_site(m: &Manifest) -> Vec<(String, usize)> {
        m.sites
            .iter()
            .map(|s| (s.clone(), m.pairs_on(s).count()))
            .collect()
    }

    fn groups(m: &Manifest) -> std::collections::BTreeMap<String, usize> {
        let mut g = std::collections::BTreeMap::new();
        for p in &m.pairs {
            *g.entry(p.sites.join("+")).or_default() += 1;
        }
        g
    }

    #[test]
    fn paper_layout_for_1052_pairs() {
        let m = Manifest::plan(&config(1052));
        assert_eq!(m.pairs.len(), 1052);
        let g = groups(&m);
        let want = [
            ("lu+uva", 105),
            ("uva", 105),
            ("vu3", 420),
            ("vu3+vu4", 105),
            ("vu4", 317),
        ];
        assert_eq!(g, want.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        let sites: Vec<(String, usize)> = [("lu", 105), ("uva", 210), ("vu3", 525), ("vu4", 422)]
            .map(|(s, n)| (s.to_string(), n))
            .to_vec();
        assert_eq!(per_site(&m), sites);
    }

    #[test]
    fn scaled_layouts_sum_to_n() {
        for n in [6, 20] {
            let m = Manifest::plan(&config(n));
            assert_eq!(groups(&m).values().sum::<usize>(), n);
            let want = crate::layout::group_counts(n);
            assert_eq!(groups(&m).get("vu3").copied().unwrap_or(0), want[2]);
        }
    }

    #[test]
    fn plan_is_deterministic_and_seed_dependent() {
        let a = Manifest::plan(&config(50));
        assert_eq!(a, Manifest::plan(&config(50)));
        let other = GenerateConfig {
            seed: 99,
            ..config(50)
        };
        assert_ne!(a.pairs, Manifest::plan(&other).pairs);
    }

    #[test]
    fn sizes_are_multiples_of_16_in_range_and_vary() {
        let m = Manifest::plan(&GenerateConfig {
            pairs: 200,
            min_size: 500,
            max_size: 1300,
            ..GenerateConfig::default()
        });
        for p in &m.pairs {
            for s in [p.width, p.height] {
                assert!(s % 16 == 0 && (512..=1296).contains(&s), "{s}");
            }
            assert_eq!(p.bytes, 2 * crate::fits::file_size(p.width, p.height));
        }
        let distinct: std::collections::HashSet<_> = m.pairs.iter().map(|p| p.width).collect();
        assert!(distinct.len() > 20);
        let odd = Manifest::plan(&GenerateConfig {
            pairs: 1,
            min_size: 100,
            max_size: 103,
            ..GenerateConfig::default()
        });
        assert_eq!((odd.pairs[0].width, odd.pairs[0].height), (112, 112));
    }

    #[test]
    fn other_site_lists_go_round_robin() {
        let m = Manifest::plan(&GenerateConfig {
            pairs: 7,
            sites: vec!["x".into(), "y".into()],
            ..GenerateConfig::default()
        });
        assert_eq!(
            per_site(&m),
            vec![("x".to_string(), 4), ("y".to_string(), 3)]
        );
    }

    #[test]
    fn largest_sorts_by_pixels_then_id() {
        let mut m = Manifest::plan(&config(4));
        for (p, (w, h)) in m
            .pairs
            .iter_mut()
            .zip([(16, 32), (32, 32), (32, 16), (64, 64)])
        {
            p.width = w;
            p.height = h;
        }
        let ids: Vec<&str> = m.largest(3).iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["pair-0004", "pair-0002", "pair-0001"]);
        assert_eq!(m.largest(10).len(), 4);
    }

    #[test]
    fn save_load_round_trip_and_errors_name_the_file() {
        let dir = test_dir("manifest");
        let m = Manifest::plan(&config(6));
        m.save(&dir).unwrap();
        assert_eq!(Manifest::load(&dir).unwrap(), m);

        let err = Manifest::load(&dir.join("nowhere")).unwrap_err();
        assert!(
            err.to_string()
                .contains("nowhere/manifest.json: cannot read"),
            "{err}"
        );

        std::fs::write(dir.join("manifest.json"), "{\"seed\": 1, \"sites\": []}").unwrap();
        let err = Manifest::load(&dir).unwrap_err();
        assert!(
            err.to_string()
                .contains("manifest.json: not a valid manifest"),
            "{err}"
        );
        assert!(err.to_string().contains("pairs"), "{err}");

        let mut bad = m.clone();
        bad.pairs[1].sites = vec!["mars".into()];
        bad.save(&dir).unwrap();
        let err = Manifest::load(&dir).unwrap_err();
        assert!(err.to_string().contains("site \"mars\""), "{err}");
    }

    #[test]
    fn image_path_matches_layout() {
        let p = Manifest::image_path(Path::new("data"), "pair-0003", "uva", Epoch::A);
        assert_eq!(p, PathBuf::from("data/sites/uva/pair-0003/a.fits"));
    }
}
