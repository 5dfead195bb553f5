//! The truth catalogue: every injected supernova and variable star.
//!
//! Positions are in the pixel frame of image A (pixel centres at integer
//! coordinates, as in [`crate::image`]); fluxes are total fluxes in ADU on
//! A's flux scale, so a B flux has been divided by B's transparency.
//!
//! Truth S/N is the signal-to-noise of the flux change in an ideal
//! difference image measured with optimal PSF weighting
//! (see [`difference_snr`]):
//!
//! `snr = |ΔF| / sqrt(NEA (nA² + nB²) + |ΔF| / g)`
//!
//! where `NEA` is the noise-equivalent area `1 / ∫ P²` of the broader of
//! the two epochs' PSFs (`4πσ²` for a Gaussian, larger for a Moffat profile
//! of the same FWHM), `nA` and `nB` are the per-pixel sky noise of A and of
//! B expressed on A's flux scale (ADU), and `g` is the gain (e-/ADU). The
//! last term is the transient's own photon noise. Noise from the host
//! galaxy or the variable star's constant part is left out, so the real S/N
//! is a little lower on bright hosts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::write_atomic;

/// What kind of transient was injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransientKind {
    /// A new point source in B only, near a galaxy.
    Supernova,
    /// A star present in both epochs whose flux changed.
    Variable,
}

impl TransientKind {
    /// `supernova` or `variable`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TransientKind::Supernova => "supernova",
            TransientKind::Variable => "variable",
        }
    }
}

/// One injected transient.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transient {
    /// The pair it is in.
    pub pair: String,
    /// Supernova or variable star.
    pub kind: TransientKind,
    /// Position in A's pixel frame.
    pub x: f64,
    /// Position in A's pixel frame.
    pub y: f64,
    /// Total flux in A (ADU); 0 for a supernova.
    pub flux_a: f64,
    /// Total flux in B, on A's flux scale (ADU).
    pub flux_b: f64,
    /// Truth S/N of the flux change (module docs).
    pub snr: f64,
}

/// Everything injected into a dataset.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Truth {
    /// All transients, by pair then kind then position of creation.
    pub transients: Vec<Transient>,
}

/// Why a truth catalogue could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    /// The file could not be read.
    #[error("{path}: cannot read the truth catalogue: {source}")]
    Read {
        /// The truth file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid truth JSON.
    #[error("{path}: not a valid truth catalogue: {source}")]
    Parse {
        /// The truth file.
        path: PathBuf,
        /// Where and why parsing failed.
        source: serde_json::Error,
    },
    /// The file could not be written.
    #[error("{path}: cannot write the truth catalogue: {source}")]
    Write {
        /// The truth file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Truth {
    /// The catalogue's file name inside a dataset directory.
    pub const FILE_NAME: &'static str = "truth.json";

    /// Writes `dir/truth.json` (atomically).
    pub fn save(&self, dir: &Path) -> Result<(), TruthError> {
        let path = dir.join(Self::FILE_NAME);
        // Non-finite numbers are the only thing that could fail; the
        // generator never produces them, and JSON `null` would hide a bug.
        let json = serde_json::to_vec_pretty(self).expect("truth values are finite");
        write_atomic(&path, &json).map_err(|source| TruthError::Write { path, source })
    }

    /// Reads `dir/truth.json`.
    pub fn load(dir: &Path) -> Result<Truth, TruthError> {
        let path = dir.join(Self::FILE_NAME);
        let text = std::fs::read_to_string(&path).map_err(|source| TruthError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| TruthError::Parse { path, source })
    }

    /// The catalogue as CSV with a header line:
    /// `pair,kind,x,y,flux_a,flux_b,snr`.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("pair,kind,x,y,flux_a,flux_b,snr\n");
        for t in &self.transients {
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "{},{},{:.3},{:.3},{:.1},{:.1},{:.2}",
                t.pair,
                t.kind.as_str(),
                t.x,
                t.y,
                t.flux_a,
                t.flux_b,
                t.snr
            );
        }
        out
    }

    /// The transients of one pair.
    pub fn in_pair<'a>(&'a self, pair: &'a str) -> impl Iterator<Item = &'a Transient> + 'a {
        self.transients.iter().filter(move |t| t.pair == pair)
    }
}

/// Truth S/N of a flux change `delta_flux` (ADU, A's scale): see the module
/// docs. `sigma` is the larger PSF sigma in pixels, `noise_a` and `noise_b`
/// the per-pixel sky noise (ADU, A's scale), `gain` in e-/ADU.
pub fn difference_snr(delta_flux: f64, area: f64, noise_a: f64, noise_b: f64, gain: f64) -> f64 {
    let signal = delta_flux.abs();
    signal / (area * (noise_a * noise_a + noise_b * noise_b) + signal / gain).sqrt()
}

/// The flux whose [`difference_snr`] is `snr`: the positive root of
/// `F² - (snr²/g) F - snr² A = 0` with `A = NEA (nA² + nB²)`.
pub fn flux_for_snr(snr: f64, nea: f64, noise_a: f64, noise_b: f64, gain: f64) -> f64 {
    let area = nea * (noise_a * noise_a + noise_b * noise_b);
    let b = snr * snr / gain;
    (b + (b * b + 4.0 * snr * snr * area).sqrt()) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsutil::test_dir;

    fn sample() -> Truth {
        Truth {
            transients: vec![
                Transient {
                    pair: "pair-0001".into(),
                    kind: TransientKind::Supernova,
                    x: 100.25,
                    y: 57.5,
                    flux_a: 0.0,
                    flux_b: 1234.5,
                    snr: 7.25,
                },
                Transient {
                    pair: "pair-0002".into(),
                    kind: TransientKind::Variable,
                    x: 10.0,
                    y: 20.0,
                    flux_a: 5000.0,
                    flux_b: 9000.0,
                    snr: 30.0,
                },
            ],
        }
    }

    #[test]
    fn json_round_trip_uses_snake_case() {
        let dir = test_dir("truth");
        sample().save(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join("truth.json")).unwrap();
        assert!(text.contains("\"supernova\"") && text.contains("\"variable\""));
        assert_eq!(Truth::load(&dir).unwrap(), sample());
        std::fs::write(dir.join("truth.json"), "[1,2]").unwrap();
        let err = Truth::load(&dir).unwrap_err();
        assert!(
            err.to_string()
                .contains("truth.json: not a valid truth catalogue"),
            "{err}"
        );
    }

    #[test]
    fn csv_has_header_and_one_line_each() {
        let csv = sample().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "pair,kind,x,y,flux_a,flux_b,snr");
        assert_eq!(
            lines[1],
            "pair-0001,supernova,100.250,57.500,0.0,1234.5,7.25"
        );
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn snr_and_flux_are_inverse() {
        let (sigma, na, nb, g) = (1.5, 22.0, 25.0, 2.0);
        for snr in [3.0, 5.0, 40.0] {
            let f = flux_for_snr(snr, sigma, na, nb, g);
            assert!((difference_snr(f, sigma, na, nb, g) - snr).abs() < 1e-9);
            assert!((difference_snr(-f, sigma, na, nb, g) - snr).abs() < 1e-9);
        }
        // Sky-limited: doubling the flux doubles the S/N when it is faint.
        let s1 = difference_snr(100.0, sigma, na, nb, 1e12);
        assert!((difference_snr(200.0, sigma, na, nb, 1e12) / s1 - 2.0).abs() < 1e-9);
    }
}
