//! Scoring a pipeline's candidates against the truth catalogue.
//!
//! Only candidates with verdict [`Verdict::Supernova`] count as reported.
//! Matching is greedy, nearest first: all (candidate, supernova) pairs of
//! the same image pair within the match radius are taken in order of
//! distance (ties by candidate order, then truth order), and each candidate
//! and each supernova is used at most once. A matched candidate is a true
//! positive; every other reported candidate is a false positive, noted as
//! sitting on a variable star or on an already-matched supernova where it
//! does.
//!
//! Recall counts only supernovae with truth S/N ≥ `min_snr`; a candidate
//! that matches a fainter one is still a true positive (it is real), and is
//! counted separately as a faint detection. Precision is true positives
//! over reported; with nothing reported it is 1.0 (no false claims), and
//! recall is 1.0 when there is nothing to find. Only the listed pairs are
//! scored: candidates and truth from other pairs are ignored.
//!
//! Variables are matched the same way against candidates with verdict
//! [`Verdict::Variable`], to report how many were recognised.

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;

use crate::catalog::{Candidate, Verdict};
use crate::truth::{Transient, TransientKind, Truth};

/// The usual match radius in pixels.
pub const DEFAULT_RADIUS: f64 = 2.5;

/// The usual S/N threshold for a supernova to count towards recall.
pub const DEFAULT_MIN_SNR: f64 = 5.0;

/// A reported candidate that matched no supernova.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FalsePositive {
    /// Its pair.
    pub pair: String,
    /// Position in A's frame.
    pub x: f64,
    /// Position in A's frame.
    pub y: f64,
    /// The pipeline's S/N for it.
    pub snr: f64,
    /// It lies within the match radius of an injected variable star.
    pub on_variable: bool,
    /// It lies within the match radius of a supernova that another, nearer
    /// candidate already claimed (a duplicate detection).
    pub on_supernova: bool,
}

/// A supernova bright enough to count that no candidate matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MissedSupernova {
    /// Its pair.
    pub pair: String,
    /// Position in A's frame.
    pub x: f64,
    /// Position in A's frame.
    pub y: f64,
    /// Its truth S/N.
    pub snr: f64,
}

/// How a pipeline did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    /// Pairs scored.
    pub pairs: usize,
    /// Match radius used (pixels).
    pub radius: f64,
    /// S/N threshold for recall.
    pub min_snr: f64,
    /// Candidates with verdict Supernova in the scored pairs.
    pub reported: usize,
    /// Reported candidates matched to a supernova (of any S/N).
    pub true_positives: usize,
    /// Reported candidates matched to nothing.
    pub false_positives: Vec<FalsePositive>,
    /// Supernovae with truth S/N ≥ `min_snr`.
    pub detectable: usize,
    /// Of those, how many were matched.
    pub detected: usize,
    /// Matched supernovae below `min_snr` (a bonus, not in recall).
    pub faint_detected: usize,
    /// Detectable supernovae nobody matched, brightest first.
    pub missed: Vec<MissedSupernova>,
    /// `detected / detectable`, or 1.0 when nothing is detectable.
    pub recall: f64,
    /// `true_positives / reported`, or 1.0 when nothing was reported.
    pub precision: f64,
    /// Injected variable stars in the scored pairs.
    pub variables: usize,
    /// Of those, how many a Variable candidate matched.
    pub variables_flagged: usize,
}

/// Scores `candidates` against `truth` over `pairs` (see the module docs).
pub fn score(
    candidates: &[Candidate],
    truth: &Truth,
    pairs: &[String],
    radius: f64,
    min_snr: f64,
) -> Score {
    let listed: HashSet<&str> = pairs.iter().map(String::as_str).collect();
    let in_scope = |pair: &str| listed.contains(pair);
    let reported: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.verdict == Verdict::Supernova && in_scope(&c.pair))
        .collect();
    let flagged: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.verdict == Verdict::Variable && in_scope(&c.pair))
        .collect();
    let of_kind = |kind| -> Vec<&Transient> {
        truth
            .transients
            .iter()
            .filter(|t| t.kind == kind && in_scope(&t.pair))
            .collect()
    };
    let supernovae = of_kind(TransientKind::Supernova);
    let variables = of_kind(TransientKind::Variable);

    let sn_match = match_nearest(&reported, &supernovae, radius);
    let var_match = match_nearest(&flagged, &variables, radius);

    let false_positives = reported
        .iter()
        .zip(&sn_match)
        .filter(|(_, m)| m.is_none())
        .map(|(c, _)| FalsePositive {
            pair: c.pair.clone(),
            x: c.x,
            y: c.y,
            snr: c.snr,
            on_variable: variables.iter().any(|t| near(c, t, radius)),
            on_supernova: supernovae.iter().any(|t| near(c, t, radius)),
        })
        .collect();
    let matched_sn: HashSet<usize> = sn_match.iter().flatten().copied().collect();
    let detectable: Vec<usize> = (0..supernovae.len())
        .filter(|&i| supernovae[i].snr >= min_snr)
        .collect();
    let detected = detectable.iter().filter(|i| matched_sn.contains(i)).count();
    let mut missed: Vec<MissedSupernova> = detectable
        .iter()
        .filter(|i| !matched_sn.contains(i))
        .map(|&i| {
            let t = supernovae[i];
            MissedSupernova {
                pair: t.pair.clone(),
                x: t.x,
                y: t.y,
                snr: t.snr,
            }
        })
        .collect();
    missed.sort_by(|a, b| b.snr.total_cmp(&a.snr));
    let true_positives = matched_sn.len();

    Score {
        pairs: listed.len(),
        radius,
        min_snr,
        reported: reported.len(),
        true_positives,
        false_positives,
        detectable: detectable.len(),
        detected,
        faint_detected: true_positives - detected,
        missed,
        recall: ratio_or_one(detected, detectable.len()),
        precision: ratio_or_one(true_positives, reported.len()),
        variables: variables.len(),
        variables_flagged: var_match.iter().flatten().count(),
    }
}

/// Nothing to find, or nothing claimed, is a perfect score rather than 0/0.
fn ratio_or_one(num: usize, den: usize) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

fn distance2(c: &Candidate, t: &Transient) -> f64 {
    (c.x - t.x).powi(2) + (c.y - t.y).powi(2)
}

fn near(c: &Candidate, t: &Transient, radius: f64) -> bool {
    c.pair == t.pair && distance2(c, t) <= radius * radius
}

/// For each candidate, the index of the truth object it matched, if any
/// (greedy, nearest first; see the module docs).
fn match_nearest(cands: &[&Candidate], truth: &[&Transient], radius: f64) -> Vec<Option<usize>> {
    let mut links: Vec<(f64, usize, usize)> = Vec::new();
    for (ci, c) in cands.iter().enumerate() {
        for (ti, t) in truth.iter().enumerate() {
            if near(c, t, radius) {
                links.push((distance2(c, t), ci, ti));
            }
        }
    }
    links.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut result = vec![None; cands.len()];
    let mut taken = vec![false; truth.len()];
    for (_, ci, ti) in links {
        if result[ci].is_none() && !taken[ti] {
            result[ci] = Some(ti);
            taken[ti] = true;
        }
    }
    result
}

impl fmt::Display for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} pairs, match radius {} px, recall counts S/N >= {}",
            self.pairs, self.radius, self.min_snr
        )?;
        writeln!(f, "reported  TP  FP  precision | detectable  found  recall | faint found | variables flagged")?;
        writeln!(
            f,
            "{:>8} {:>3} {:>3} {:>10.3} | {:>10} {:>6} {:>7.3} | {:>11} | {:>9}/{}",
            self.reported,
            self.true_positives,
            self.false_positives.len(),
            self.precision,
            self.detectable,
            self.detected,
            self.recall,
            self.faint_detected,
            self.variables_flagged,
            self.variables
        )?;
        if !self.false_positives.is_empty() {
            writeln!(f, "false positives:")?;
            for fp in &self.false_positives {
                let note = match (fp.on_variable, fp.on_supernova) {
                    (true, _) => "  on a variable star",
                    (false, true) => "  duplicate of a supernova",
                    _ => "",
                };
                writeln!(
                    f,
                    "  {} ({:.1}, {:.1}) S/N {:.1}{note}",
                    fp.pair, fp.x, fp.y, fp.snr
                )?;
            }
        }
        if !self.missed.is_empty() {
            writeln!(f, "missed supernovae:")?;
            for m in &self.missed {
                writeln!(
                    f,
                    "  {} ({:.1}, {:.1}) truth S/N {:.1}",
                    m.pair, m.x, m.y, m.snr
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sn(pair: &str, x: f64, y: f64, snr: f64) -> Transient {
        Transient {
            pair: pair.into(),
            kind: TransientKind::Supernova,
            x,
            y,
            flux_a: 0.0,
            flux_b: 100.0 * snr,
            snr,
        }
    }

    fn var(pair: &str, x: f64, y: f64) -> Transient {
        Transient {
            kind: TransientKind::Variable,
            flux_a: 1000.0,
            flux_b: 2000.0,
            ..sn(pair, x, y, 20.0)
        }
    }

    fn cand(pair: &str, x: f64, y: f64, verdict: Verdict) -> Candidate {
        Candidate {
            pair: pair.into(),
            x,
            y,
            flux: 500.0,
            snr: 8.0,
            verdict,
        }
    }

    fn pairs(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn truth() -> Truth {
        Truth {
            transients: vec![
                sn("p1", 100.0, 100.0, 10.0),
                sn("p1", 200.0, 50.0, 4.0),
                sn("p2", 30.0, 40.0, 6.0),
                var("p1", 300.0, 300.0),
            ],
        }
    }

    #[test]
    fn empty_everything_is_perfect_but_says_so() {
        let s = score(&[], &Truth::default(), &[], DEFAULT_RADIUS, DEFAULT_MIN_SNR);
        assert_eq!(
            (s.reported, s.detectable, s.recall, s.precision),
            (0, 0, 1.0, 1.0)
        );
        let s = score(&[], &truth(), &pairs(&["p1", "p2"]), 2.5, 5.0);
        assert_eq!(
            (s.detectable, s.detected, s.recall, s.precision),
            (2, 0, 0.0, 1.0)
        );
        assert_eq!(s.missed.len(), 2);
        assert_eq!(s.missed[0].snr, 10.0, "brightest missed first");
        assert_eq!(s.variables, 1);
    }

    #[test]
    fn two_candidates_on_one_supernova_give_one_tp_one_fp() {
        let c = [
            cand("p1", 101.5, 100.0, Verdict::Supernova),
            cand("p1", 100.5, 100.5, Verdict::Supernova),
        ];
        let s = score(&c, &truth(), &pairs(&["p1"]), 2.5, 5.0);
        assert_eq!(
            (s.reported, s.true_positives, s.false_positives.len()),
            (2, 1, 1)
        );
        // The nearer one wins, whatever the order.
        assert_eq!(s.false_positives[0].x, 101.5);
        assert!(s.false_positives[0].on_supernova && !s.false_positives[0].on_variable);
        assert_eq!(
            (s.detectable, s.detected, s.recall, s.precision),
            (1, 1, 1.0, 0.5)
        );
    }

    #[test]
    fn faint_pair_scope_variables_and_verdicts() {
        let c = [
            cand("p1", 200.0, 51.0, Verdict::Supernova), // faint SN: TP, not in recall
            cand("p1", 300.5, 300.0, Verdict::Supernova), // on the variable: FP
            cand("p1", 299.0, 300.0, Verdict::Variable), // flags the variable
            cand("p1", 100.0, 100.0, Verdict::Variable), // a Variable verdict is not a report
            cand("p2", 30.0, 40.0, Verdict::Supernova),  // pair not listed: ignored
            cand("p1", 100.0, 103.0, Verdict::Supernova), // 3 px away: FP
        ];
        let s = score(&c, &truth(), &pairs(&["p1"]), 2.5, 5.0);
        assert_eq!((s.reported, s.true_positives, s.faint_detected), (3, 1, 1));
        assert_eq!((s.detectable, s.detected), (1, 0));
        assert_eq!(s.false_positives.len(), 2);
        assert!(s.false_positives.iter().any(|f| f.on_variable));
        assert_eq!(s.variables_flagged, 1);
        assert!((s.precision - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.missed.len(), 1);
        let text = s.to_string();
        assert!(
            text.contains("on a variable star") && text.contains("missed supernovae"),
            "{text}"
        );
    }

    #[test]
    fn candidates_in_other_pairs_never_match() {
        let c = [cand("p2", 100.0, 100.0, Verdict::Supernova)];
        let s = score(&c, &truth(), &pairs(&["p1", "p2"]), 2.5, 5.0);
        assert_eq!((s.true_positives, s.false_positives.len()), (0, 1));
    }
}
