//! Classification of the residuals (step 8).
//!
//! A residual on top of a star of epoch A is that star changing brightness
//! (a variable, or a star the subtraction did not cancel exactly); anything
//! else is a new point source, typically in or near a galaxy: a supernova
//! candidate.

use crate::catalog::{Candidate, Detection, Residual, Verdict};

/// Tunables of the classification.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifyParams {
    /// Least match radius, px (default 2.0): centroid errors of faint
    /// residuals reach ~0.5–1 px.
    pub min_radius: f64,
    /// Match radius in units of A's seeing FWHM (default 0.7): a residual
    /// of a star is centred on it to well within half a FWHM, while a
    /// supernova offset from a galaxy's compact core by more than that is
    /// not mistaken for a variable.
    pub seeing_factor: f64,
    /// Also treat saturated sources of A as stars (default true): a
    /// saturated star's left-overs are not supernovae.
    pub include_saturated: bool,
    /// A residual within this many px of the centre of *any* source of A
    /// (default 0.75) is also a variable: it is that object changing or
    /// imperfectly subtracted — a galaxy nucleus left over by the PSF
    /// matching, a star too blended to look point-like. On simulated fields
    /// 0.75 px removed most such galaxy-core residuals; 1 px began to cost
    /// real supernovae close to their hosts' centres.
    pub core_radius: f64,
}

impl Default for ClassifyParams {
    fn default() -> Self {
        ClassifyParams {
            min_radius: 2.0,
            seeing_factor: 0.7,
            include_saturated: true,
            core_radius: 0.75,
        }
    }
}

/// The candidates of pair `pair`: each residual becomes a [`Verdict::Variable`]
/// if a point-like (or saturated) source of `a` lies within
/// `max(min_radius, seeing_factor × seeing)`, or any source within
/// `core_radius`; else a [`Verdict::Supernova`]. Sorted by (y, x).
pub fn classify(
    pair: &str,
    residuals: &[Residual],
    a: &Detection,
    params: &ClassifyParams,
) -> Vec<Candidate> {
    let radius = params.min_radius.max(params.seeing_factor * a.seeing_fwhm);
    let stars = by_row(a, |s| {
        s.point_like || (params.include_saturated && s.saturated)
    });
    let all = by_row(a, |_| true);
    let mut out: Vec<Candidate> = residuals
        .iter()
        .map(|r| {
            let near = any_within(&stars, r.x, r.y, radius)
                || any_within(&all, r.x, r.y, params.core_radius);
            Candidate {
                pair: pair.to_string(),
                x: r.x,
                y: r.y,
                flux: r.flux,
                snr: r.snr,
                verdict: if near {
                    Verdict::Variable
                } else {
                    Verdict::Supernova
                },
            }
        })
        .collect();
    out.sort_by(|p, q| p.y.total_cmp(&q.y).then(p.x.total_cmp(&q.x)));
    out
}

/// `(y, x)` of the sources passing `keep`, sorted so that a search can look
/// at a band of rows only.
fn by_row(a: &Detection, keep: impl Fn(&crate::catalog::Source) -> bool) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = a
        .sources
        .iter()
        .filter(|s| keep(s))
        .map(|s| (s.y, s.x))
        .collect();
    v.sort_by(|p, q| p.0.total_cmp(&q.0).then(p.1.total_cmp(&q.1)));
    v
}

/// Some point of `sorted` (from [`by_row`]) lies within `radius` of `(x, y)`.
fn any_within(sorted: &[(f64, f64)], x: f64, y: f64, radius: f64) -> bool {
    let from = sorted.partition_point(|s| s.0 < y - radius);
    sorted[from..]
        .iter()
        .take_while(|s| s.0 <= y + radius)
        .any(|s| (s.1 - x).hypot(s.0 - y) <= radius)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Source;

    fn source(x: f64, y: f64, point_like: bool, saturated: bool) -> Source {
        Source {
            x,
            y,
            flux: 1e4,
            peak: 1e3,
            fwhm: 3.0,
            pixels: 30,
            snr: 50.0,
            saturated,
            point_like,
        }
    }

    #[test]
    fn star_residual_is_variable_and_lone_one_supernova() {
        let a = Detection {
            width: 500,
            height: 500,
            background: 1000.0,
            noise: 25.0,
            seeing_fwhm: 4.0,
            sources: vec![
                source(100.0, 100.0, true, false),
                source(300.0, 300.0, false, false),
                source(50.0, 400.0, false, true),
            ],
        };
        let res = [
            Residual {
                x: 300.5,
                y: 301.0,
                flux: 500.0,
                snr: 8.0,
                pixels: 4,
            },
            Residual {
                x: 101.5,
                y: 101.2,
                flux: 900.0,
                snr: 12.0,
                pixels: 9,
            },
            Residual {
                x: 51.0,
                y: 400.0,
                flux: 900.0,
                snr: 12.0,
                pixels: 9,
            },
            Residual {
                x: 104.0,
                y: 100.0,
                flux: 900.0,
                snr: 12.0,
                pixels: 9,
            },
        ];
        let c = classify("p1", &res, &a, &ClassifyParams::default());
        let v: Vec<(f64, Verdict)> = c.iter().map(|c| (c.x, c.verdict)).collect();
        assert_eq!(
            v,
            vec![
                (104.0, Verdict::Supernova),
                (101.5, Verdict::Variable),
                (300.5, Verdict::Supernova),
                (51.0, Verdict::Variable)
            ]
        );
        assert_eq!(c[0].pair, "p1");
        let json = serde_json::to_string(&c[0]).unwrap();
        assert!(json.contains("\"verdict\":\"supernova\""));
    }
}
