//! End-to-end tests: detect → align → equalise → tiles → significance →
//! residuals → recombine → classify on simulated image pairs.

use crate::align::{align, AlignParams};
use crate::catalog::{Affine, Alignment, Candidate, Detection, Residual, Verdict};
use crate::classify::{classify, ClassifyParams};
use crate::compare::{find_residuals, significance, CompareParams};
use crate::detect::{detect, DetectParams, FWHM_PER_SIGMA};
use crate::equalize::{equalize_a, equalize_b, EqualizeParams};
use crate::image::Image;
use crate::recombine::{recombine, RecombineParams};
use crate::testutil::{random_field, render, Epoch, Psf, Thing};
use crate::tiles::{split, TileParams};
use std::time::Instant;

/// Everything the pipeline produced, with per-step wall times (s).
#[allow(dead_code)]
pub struct Outcome {
    pub det_a: Detection,
    pub det_b: Detection,
    pub alignment: Alignment,
    pub residuals: Vec<Residual>,
    pub candidates: Vec<Candidate>,
    pub timings: Vec<(&'static str, f64)>,
}

/// The products of steps 2–7.1, reusable with other step-7/8 parameters.
pub struct Prepared {
    det_a: Detection,
    det_b: Detection,
    alignment: Alignment,
    pa: Image,
    pb: Image,
    tiles: Vec<crate::catalog::Tile>,
    exclusions: Vec<(f64, f64, f64)>,
    psf_sigma: f32,
    timings: Vec<(&'static str, f64)>,
}

/// Exclusion circles around saturated stars of both epochs, in A's frame.
fn exclusions(da: &Detection, db: &Detection, b_to_a: &Affine, fwhm: f64) -> Vec<(f64, f64, f64)> {
    let r = 5.0 * fwhm;
    let mut out: Vec<(f64, f64, f64)> = da
        .sources
        .iter()
        .filter(|s| s.saturated)
        .map(|s| (s.x, s.y, r))
        .collect();
    for s in db.sources.iter().filter(|s| s.saturated) {
        let (x, y) = b_to_a.apply(s.x, s.y);
        out.push((x, y, r));
    }
    out
}

/// Steps 2 to 7.1 with default parameters.
pub fn prepare(a: &Image, b: &Image) -> Prepared {
    let mut timings = Vec::new();
    let mut t = Instant::now();
    let mut lap = |name: &'static str, t: &mut Instant| {
        timings.push((name, t.elapsed().as_secs_f64()));
        *t = Instant::now();
    };
    let det_a = detect(a, &DetectParams::default()).expect("detect A");
    lap("detect A", &mut t);
    let det_b = detect(b, &DetectParams::default()).expect("detect B");
    lap("detect B", &mut t);
    let alignment = align(&det_a, &det_b, &AlignParams::default()).expect("align");
    lap("align", &mut t);
    let (w, h) = (a.width(), a.height());
    let pa = equalize_a(a, &alignment, &EqualizeParams::default());
    lap("equalize A", &mut t);
    let pb = equalize_b(b, &alignment, w, h, &EqualizeParams::default());
    lap("equalize B", &mut t);
    let b_to_a = alignment.a_to_b.inverse().expect("invertible");
    let cands: Vec<(f64, f64)> = det_b
        .sources
        .iter()
        .map(|s| b_to_a.apply(s.x, s.y))
        .collect();
    let tiles = split(w, h, &cands, &TileParams::default());
    lap("tiles", &mut t);
    let fwhm = alignment.fwhm_a.max(alignment.fwhm_b);
    let exclusions = exclusions(&det_a, &det_b, &b_to_a, fwhm);
    let psf_sigma = (fwhm / FWHM_PER_SIGMA) as f32;
    Prepared {
        det_a,
        det_b,
        alignment,
        pa,
        pb,
        tiles,
        exclusions,
        psf_sigma,
        timings,
    }
}

/// Steps 7.2 to 8 on prepared images.
pub fn finish(p: &Prepared, gain: f32, cp: &CompareParams, kp: &ClassifyParams) -> Outcome {
    let mut timings = p.timings.clone();
    let t = Instant::now();
    let per_tile: Vec<_> = p
        .tiles
        .iter()
        .map(|tile| {
            let ta = p.pa.cut(tile.x0, tile.y0, tile.width, tile.height);
            let tb = p.pb.cut(tile.x0, tile.y0, tile.width, tile.height);
            let sig = significance(&ta, &tb, p.psf_sigma, gain);
            (tile.clone(), find_residuals(&sig, tile, &p.exclusions, cp))
        })
        .collect();
    timings.push(("compare (all tiles)", t.elapsed().as_secs_f64()));
    let t = Instant::now();
    let residuals = recombine(&per_tile, &RecombineParams::default());
    let candidates = classify("sim", &residuals, &p.det_a, kp);
    timings.push(("recombine + classify", t.elapsed().as_secs_f64()));
    Outcome {
        det_a: p.det_a.clone(),
        det_b: p.det_b.clone(),
        alignment: p.alignment.clone(),
        residuals,
        candidates,
        timings,
    }
}

/// Runs the whole chain with default parameters.
pub fn run(a: &Image, b: &Image, gain: f32) -> Outcome {
    finish(
        &prepare(a, b),
        gain,
        &CompareParams::default(),
        &ClassifyParams::default(),
    )
}

/// Sky variance (ADU²) for gain 2 and read noise 5 e-.
fn sky_var(sky: f64) -> f64 {
    sky / 2.0 + 6.25
}

/// Flux giving matched-filter S/N `snr` in the sky-limited difference of A
/// and B′ (common PSF FWHM `fwhm`, B's flux scale `scale`).
fn flux_for_snr(snr: f64, fwhm: f64, sky_a: f64, sky_b: f64, scale: f64) -> f64 {
    let var = sky_var(sky_a) + sky_var(sky_b) / (scale * scale);
    let s = fwhm / FWHM_PER_SIGMA;
    snr * var.sqrt() * (4.0 * std::f64::consts::PI).sqrt() * s
}

fn rotation(w: usize, h: usize, deg: f64, tx: f64, ty: f64) -> Affine {
    let c = ((w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0);
    Affine::rotation_about(c, deg, (tx, ty))
}

/// Injected supernovae and how the pipeline did on them.
struct Score {
    /// (S/N, found as supernova) per injected supernova.
    sne: Vec<(f64, bool)>,
    /// Supernova candidates matching no injected one.
    false_sne: Vec<Candidate>,
}

fn score(things: &[Thing], snr_of: &dyn Fn(f64) -> f64, out: &Outcome) -> Score {
    let sn_list: Vec<(f64, f64, f64)> = things
        .iter()
        .filter_map(|t| match *t {
            Thing::Supernova { x, y, flux } => Some((x, y, flux)),
            _ => None,
        })
        .collect();
    let is_sn = |c: &Candidate| c.verdict == Verdict::Supernova;
    let sne = sn_list
        .iter()
        .map(|&(x, y, f)| {
            (
                snr_of(f),
                out.candidates
                    .iter()
                    .any(|c| is_sn(c) && (c.x - x).hypot(c.y - y) < 2.0),
            )
        })
        .collect();
    let false_sne = out
        .candidates
        .iter()
        .filter(|c| {
            is_sn(c)
                && !sn_list
                    .iter()
                    .any(|&(x, y, _)| (c.x - x).hypot(c.y - y) < 2.0)
        })
        .cloned()
        .collect();
    Score { sne, false_sne }
}

#[test]
fn end_to_end_on_a_synthetic_pair() {
    let (w, h) = (560, 440);
    let (pa, pb) = (Psf::Gaussian(2.6), Psf::Gaussian(3.6));
    let (sky_a, sky_b, scale) = (1000.0, 1250.0, 0.92);
    let f = |snr: f64| flux_for_snr(snr, 3.6, sky_a, sky_b, scale);
    let mut things = random_field(w, h, 700.0, 8, 5, 7, |i| f(12.0 + 4.0 * i as f64));
    // A strongly varying star, to be flagged as a variable.
    things.push(Thing::Star {
        x: 300.3,
        y: 200.6,
        flux: 40_000.0,
        flux_b: 80_000.0,
    });
    let map = rotation(w, h, 0.2, 6.4, -4.3);
    let ea = Epoch {
        psf: pa,
        sky: sky_a,
        scale: 1.0,
        map: Affine::IDENTITY,
        is_b: false,
        cosmics: 4,
    };
    let eb = Epoch {
        psf: pb,
        sky: sky_b,
        scale,
        map,
        is_b: true,
        cosmics: 4,
    };
    let a = render(w, h, &things, &ea, 1);
    let b = render(w, h, &things, &eb, 2);
    let out = run(&a, &b, 2.0);
    let al = &out.alignment;
    assert!((al.flux_ratio / scale - 1.0).abs() < 0.03, "{al:?}");
    assert!(
        (al.fwhm_a - 2.6).abs() < 0.3 && (al.fwhm_b - 3.6).abs() < 0.3,
        "{al:?}"
    );
    let (u, v) = al.a_to_b.apply(100.0, 300.0);
    let (tu, tv) = map.apply(100.0, 300.0);
    assert!(
        (u - tu).hypot(v - tv) < 0.05,
        "map off by {}",
        (u - tu).hypot(v - tv)
    );
    let snr_of = |flux: f64| flux / f(1.0);
    let s = score(&things, &snr_of, &out);
    assert!(
        s.sne.iter().all(|&(_, found)| found),
        "missed: {:?}\n{:?}",
        s.sne,
        out.candidates
    );
    assert!(s.false_sne.len() <= 1, "false: {:?}", s.false_sne);
    assert!(
        out.candidates
            .iter()
            .any(|c| c.verdict == Verdict::Variable && (c.x - 300.3).hypot(c.y - 200.6) < 2.0),
        "{:?}",
        out.candidates
    );
}

/// Parameter variants tried by the realistic evaluation (`SN_VARIANTS=1`).
fn variants() -> Vec<(String, CompareParams, ClassifyParams)> {
    let mut v = vec![(
        "default".to_string(),
        CompareParams::default(),
        ClassifyParams::default(),
    )];
    if std::env::var("SN_VARIANTS").is_err() {
        return v;
    }
    for thr in [4.5f32, 4.0] {
        v.push((
            format!("threshold {thr}"),
            CompareParams {
                threshold: thr,
                ..CompareParams::default()
            },
            ClassifyParams::default(),
        ));
    }
    for (sf, core) in [(0.7, 0.0), (0.7, 0.5), (0.7, 0.75), (0.5, 0.75)] {
        let kp = ClassifyParams {
            seeing_factor: sf,
            core_radius: core,
            ..ClassifyParams::default()
        };
        v.push((
            format!("seeing_factor {sf} core {core}"),
            CompareParams::default(),
            kp,
        ));
    }
    v
}

/// Realistic 2048 × 1800 pairs: prints recall per S/N bin, the false
/// supernovae and the step timings. Run with
/// `cargo test --release -- --ignored --nocapture realistic`.
#[test]
#[ignore]
fn realistic_large_pairs() {
    let (w, h) = (2048, 1800);
    let configs = [
        (Psf::Moffat(2.6, 3.0), Psf::Moffat(3.8, 2.5), 0.0, 11u64),
        (Psf::Gaussian(3.9), Psf::Gaussian(2.4), 0.25, 12),
        (Psf::Moffat(4.4, 4.0), Psf::Gaussian(3.0), -0.3, 13),
        (Psf::Gaussian(2.2), Psf::Moffat(2.8, 3.5), 0.1, 14),
    ];
    let variants = variants();
    let mut all_sne = vec![Vec::new(); variants.len()];
    let mut false_total = vec![0; variants.len()];
    let verbose = std::env::var("SN_VERBOSE").is_ok();
    for &(pa, pb, rot, seed) in &configs {
        let (sky_a, sky_b, scale) = (900.0, 1400.0, 1.12);
        let fwhm = pa.fwhm().max(pb.fwhm());
        let f = |snr: f64| flux_for_snr(snr, fwhm, sky_a, sky_b, scale);
        let things = random_field(w, h, 500.0, 120, 60, seed, |i| {
            f(3.0 + 37.0 * (i as f64 / 59.0).powi(2))
        });
        let map = rotation(w, h, rot, 13.7, -11.2);
        let ea = Epoch {
            psf: pa,
            sky: sky_a,
            scale: 1.0,
            map: Affine::IDENTITY,
            is_b: false,
            cosmics: 12,
        };
        let eb = Epoch {
            psf: pb,
            sky: sky_b,
            scale,
            map,
            is_b: true,
            cosmics: 12,
        };
        let a = render(w, h, &things, &ea, seed * 10 + 1);
        let b = render(w, h, &things, &eb, seed * 10 + 2);
        let prep = prepare(&a, &b);
        for (vi, (name, cp, kp)) in variants.iter().enumerate() {
            let out = finish(&prep, 2.0, cp, kp);
            let snr_of = |flux: f64| flux / f(1.0);
            let s = score(&things, &snr_of, &out);
            false_total[vi] += s.false_sne.len();
            if vi == 0 {
                println!("config {pa:?} {pb:?} rot {rot}: {:?}", out.alignment);
                println!(
                    "  sources A {} B {}, residuals {}",
                    out.det_a.sources.len(),
                    out.det_b.sources.len(),
                    out.residuals.len()
                );
                for (name, t) in &out.timings {
                    println!("  {name:>22}: {t:.3} s");
                }
            }
            if vi == 0 {
                width_quantiles(&things, &out.det_a);
            }
            if vi == 0 || verbose {
                println!("  -- {name}");
                report(&things, &s, &out, &a, &b, verbose);
            }
            all_sne[vi].extend(s.sne);
        }
    }
    for (vi, (name, _, _)) in variants.iter().enumerate() {
        println!("== {name}");
        let sne = &all_sne[vi];
        for (lo, hi) in [
            (3.0, 5.0),
            (5.0, 6.0),
            (6.0, 8.0),
            (8.0, 15.0),
            (15.0, 41.0),
        ] {
            let bin: Vec<_> = sne.iter().filter(|s| s.0 >= lo && s.0 < hi).collect();
            let found = bin.iter().filter(|s| s.1).count();
            println!("   S/N {lo:>4}-{hi:<4}: {found}/{}", bin.len());
        }
        let above: Vec<_> = sne.iter().filter(|s| s.0 >= 5.0).collect();
        let found = above.iter().filter(|s| s.1).count();
        let true_found = sne.iter().filter(|s| s.1).count();
        println!(
            "   recall(S/N>=5) {:.3}  precision {:.3} ({} false)",
            found as f64 / above.len() as f64,
            true_found as f64 / (true_found + false_total[vi]) as f64,
            false_total[vi]
        );
    }
}

/// Prints the false and missed supernovae of one run.
fn report(things: &[Thing], s: &Score, out: &Outcome, a: &Image, b: &Image, verbose: bool) {
    for c in &s.false_sne {
        let near = nearest_thing(things, c.x, c.y);
        println!(
            "  FALSE {:.1},{:.1} snr {:.1} flux {:.0}: nearest {near}",
            c.x, c.y, c.snr, c.flux
        );
        if verbose {
            println!("     {}", diagnose(a, b, out, c.x, c.y));
        }
    }
    let sn_things = things
        .iter()
        .filter(|t| matches!(t, Thing::Supernova { .. }));
    for (t, &(snr, found)) in sn_things.zip(&s.sne) {
        let Thing::Supernova { x, y, .. } = *t else {
            continue;
        };
        if found || snr < 5.0 {
            continue;
        }
        let res = out
            .residuals
            .iter()
            .find(|r| (r.x - x).hypot(r.y - y) < 3.0);
        let src: Vec<_> = out
            .det_a
            .sources
            .iter()
            .filter(|s| (s.x - x).hypot(s.y - y) < 4.0)
            .map(|s| {
                (
                    ((s.x - x).hypot(s.y - y) * 10.0).round() / 10.0,
                    s.point_like,
                    (s.fwhm * 100.0).round() / 100.0,
                )
            })
            .collect();
        let res = res.map(|r| format!("at {:.1} px, S {:.1}", (r.x - x).hypot(r.y - y), r.snr));
        println!("  MISSED S/N {snr:.1} at {x:.1},{y:.1}: residual {res:?}, A sources (d, point, fwhm) {src:?}");
        if res.is_none() && verbose {
            println!("     why: {}", diagnose(a, b, out, x, y));
        }
    }
}

/// A description of the simulated object nearest `(x, y)`.
fn nearest_thing(things: &[Thing], x: f64, y: f64) -> String {
    let mut best = (f64::INFINITY, String::new());
    for t in things {
        let (tx, ty, what) = match *t {
            Thing::Star { x, y, flux, flux_b } => (x, y, format!("star {flux:.0}->{flux_b:.0}")),
            Thing::Galaxy { x, y, flux, re, .. } => (x, y, format!("galaxy {flux:.0} re {re:.1}")),
            Thing::Supernova { x, y, flux } => (x, y, format!("sn {flux:.0}")),
        };
        let d = (tx - x).hypot(ty - y);
        if d < best.0 {
            best = (d, format!("{what} at {d:.1} px"));
        }
    }
    best.1
}

/// Which rejection test removed the residual nearest `(x, y)`.
fn diagnose(a: &Image, b: &Image, out: &Outcome, x: f64, y: f64) -> String {
    let al = &out.alignment;
    let (w, h) = (a.width(), a.height());
    let pa = equalize_a(a, al, &EqualizeParams::default());
    let pb = equalize_b(b, al, w, h, &EqualizeParams::default());
    let tiles = split(w, h, &[(x, y)], &TileParams::default());
    let Some(tile) = tiles.first() else {
        return "no tile".into();
    };
    let ta = pa.cut(tile.x0, tile.y0, tile.width, tile.height);
    let tb = pb.cut(tile.x0, tile.y0, tile.width, tile.height);
    let fwhm = al.fwhm_a.max(al.fwhm_b);
    let sig = significance(&ta, &tb, (fwhm / FWHM_PER_SIGMA) as f32, 2.0);
    let (px, py) = (
        (x - tile.x0 as f64).round() as usize,
        (y - tile.y0 as f64).round() as usize,
    );
    if px < 11 || py < 11 || px + 11 >= tile.width || py + 11 >= tile.height {
        return "near tile edge".into();
    }
    let mut smax = f32::NEG_INFINITY;
    let mut smin = f32::INFINITY;
    for yy in py - 3..=py + 3 {
        for xx in px - 3..=px + 3 {
            smax = smax.max(sig.snr.get(xx, yy));
        }
    }
    for yy in py - 10..=py + 10 {
        for xx in px - 10..=px + 10 {
            smin = smin.min(sig.snr.get(xx, yy));
        }
    }
    let b_to_a = al.a_to_b.inverse().unwrap();
    let ex = exclusions(&out.det_a, &out.det_b, &b_to_a, fwhm);
    let base = CompareParams::default();
    let variants: [(&str, CompareParams); 4] = [
        (
            "edge",
            CompareParams {
                edge_margin: 0,
                ..base.clone()
            },
        ),
        (
            "dipole",
            CompareParams {
                dipole_fraction: f32::INFINITY,
                ..base.clone()
            },
        ),
        (
            "cosmic",
            CompareParams {
                cosmic_ratio: f32::INFINITY,
                ..base.clone()
            },
        ),
        (
            "threshold4",
            CompareParams {
                threshold: 4.0,
                ..base.clone()
            },
        ),
    ];
    let near = |list: &[Residual]| list.iter().any(|r| (r.x - x).hypot(r.y - y) < 3.0);
    let mut why = format!(
        "S max {smax:.1} min(10px) {smin:.1} scale {:.2};",
        sig.scale
    );
    if std::env::var("SN_DUMP").is_ok() {
        for yy in py - 7..=py + 7 {
            let row: Vec<String> = (px - 7..=px + 7)
                .map(|xx| format!("{:5.1}", sig.snr.get(xx, yy)))
                .collect();
            why += &format!("\n      {}", row.join(" "));
        }
    }
    if near(&find_residuals(&sig, tile, &[], &base)) {
        why += " exclusion;";
    }
    for (name, p) in variants {
        if near(&find_residuals(&sig, tile, &ex, &p)) {
            why += &format!(" {name};");
        }
    }
    why
}

/// Quantiles of FWHM / seeing for A's detections of true stars and galaxies.
fn width_quantiles(things: &[Thing], d: &Detection) {
    let mut stars: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut gals: Vec<f64> = Vec::new();
    for s in &d.sources {
        if s.saturated {
            continue;
        }
        let mut best = (f64::INFINITY, 0usize);
        for t in things {
            let (x, y, kind) = match *t {
                Thing::Star { x, y, .. } => (x, y, 0),
                Thing::Galaxy { x, y, .. } => (x, y, 1),
                Thing::Supernova { .. } => continue,
            };
            let dd = (x - s.x).hypot(y - s.y);
            if dd < best.0 {
                best = (dd, kind);
            }
        }
        if best.0 > 1.0 {
            continue;
        }
        let r = s.fwhm / d.seeing_fwhm;
        if best.1 == 1 {
            gals.push(r);
        } else {
            let bin = if s.snr < 10.0 {
                0
            } else if s.snr < 30.0 {
                1
            } else {
                2
            };
            stars[bin].push(r);
        }
    }
    let q = |v: &mut Vec<f64>| -> String {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return "-".into();
        }
        let at = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
        format!(
            "n {} q01 {:.2} q05 {:.2} q50 {:.2} q95 {:.2} q99 {:.2}",
            v.len(),
            at(0.01),
            at(0.05),
            at(0.5),
            at(0.95),
            at(0.99)
        )
    };
    for (i, name) in ["stars snr<10", "stars 10-30", "stars >30"]
        .iter()
        .enumerate()
    {
        println!("  {name}: {}", q(&mut stars[i]));
    }
    println!("  galaxies: {}", q(&mut gals));
}

/// Wall time of each step on one 2048 × 2048 pair (one core). Run with
/// `cargo test --release -- --ignored --nocapture timing_2048`.
#[test]
#[ignore]
fn timing_2048() {
    let (w, h) = (2048, 2048);
    let things = random_field(w, h, 500.0, 100, 20, 5, |_| 5000.0);
    let ea = Epoch {
        psf: Psf::Gaussian(2.6),
        sky: 1000.0,
        scale: 1.0,
        map: Affine::IDENTITY,
        is_b: false,
        cosmics: 10,
    };
    let eb = Epoch {
        psf: Psf::Gaussian(3.6),
        sky: 1300.0,
        scale: 0.9,
        map: rotation(w, h, 0.3, 12.3, -7.7),
        is_b: true,
        cosmics: 10,
    };
    let a = render(w, h, &things, &ea, 1);
    let b = render(w, h, &things, &eb, 2);
    // And B the sharper one, which moves the convolution into equalize_b.
    let eb2 = Epoch {
        psf: Psf::Gaussian(2.3),
        ..eb
    };
    let b2 = render(w, h, &things, &eb2, 3);
    for (label, bb) in [("B broader", &b), ("B sharper", &b2)] {
        let prep = prepare(&a, bb);
        let t = Instant::now();
        let mut n = 0;
        for tile in &prep.tiles {
            let ta = prep.pa.cut(tile.x0, tile.y0, tile.width, tile.height);
            let tb = prep.pb.cut(tile.x0, tile.y0, tile.width, tile.height);
            let sig = significance(&ta, &tb, prep.psf_sigma, 2.0);
            n += find_residuals(&sig, tile, &prep.exclusions, &CompareParams::default()).len();
        }
        let per_tile = t.elapsed().as_secs_f64() / prep.tiles.len() as f64;
        let out = finish(
            &prep,
            2.0,
            &CompareParams::default(),
            &ClassifyParams::default(),
        );
        println!(
            "{label}: {} tiles, {n} residuals, {} candidates",
            prep.tiles.len(),
            out.candidates.len()
        );
        for (name, t) in &out.timings {
            println!("  {name:>22}: {t:.3} s");
        }
        println!("  {:>22}: {:.4} s", "compare (one tile)", per_tile);
    }
}
