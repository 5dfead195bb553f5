use super::scene::*;
use super::transients::*;
use super::*;
use crate::fsutil::test_dir;
use crate::image::Image;
use crate::truth::TransientKind;
use std::path::PathBuf;

fn small(seed: u64) -> GenerateConfig {
    GenerateConfig {
        seed,
        pairs: 3,
        min_size: 160,
        max_size: 288,
        supernovae_per_pair: 4,
        variables_per_pair: 2,
        ..GenerateConfig::default()
    }
}

/// All files under `dir`, relative path → bytes.
fn files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn same_seed_same_bytes_whatever_the_threads() {
    let (d1, d2, d3) = (test_dir("gen1"), test_dir("gen2"), test_dir("gen3"));
    let mut calls = Vec::new();
    let (m, truth) = generate(
        &GenerateConfig {
            threads: 1,
            ..small(5)
        },
        &d1,
        &mut |d, n| calls.push((d, n)),
    )
    .unwrap();
    assert_eq!(calls, vec![(1, 3), (2, 3), (3, 3)]);
    generate(
        &GenerateConfig {
            threads: 3,
            ..small(5)
        },
        &d2,
        &mut |_, _| {},
    )
    .unwrap();
    let (f1, f2) = (files(&d1), files(&d2));
    assert_eq!(f1.keys().collect::<Vec<_>>(), f2.keys().collect::<Vec<_>>());
    assert!(f1 == f2, "same seed must give byte-identical files");
    assert!(!truth.transients.is_empty());

    generate(&small(6), &d3, &mut |_, _| {}).unwrap();
    let f3 = files(&d3);
    let a = |m: &Manifest| {
        Manifest::image_path(
            Path::new(""),
            &m.pairs[0].id,
            &m.pairs[0].sites[0],
            Epoch::A,
        )
    };
    let m3 = Manifest::load(&d3).unwrap();
    assert_ne!(
        f1[&a(&m)],
        f3[&a(&m3)],
        "a different seed must give a different image"
    );

    // Replicas are identical and sizes are as planned.
    for p in &m.pairs {
        for e in Epoch::BOTH {
            let first = &f1[&Manifest::image_path(Path::new(""), &p.id, &p.sites[0], e)];
            for s in &p.sites {
                assert_eq!(
                    &f1[&Manifest::image_path(Path::new(""), &p.id, s, e)],
                    first
                );
            }
        }
        let a = f1[&Manifest::image_path(Path::new(""), &p.id, &p.sites[0], Epoch::A)].len();
        assert_eq!(2 * a as u64, p.bytes);
    }
    assert_eq!(Manifest::load(&d1).unwrap(), m);
    assert_eq!(Truth::load(&d1).unwrap(), truth);
}

#[test]
fn truth_lies_inside_the_images_with_the_intended_snr_spread() {
    let config = GenerateConfig {
        pairs: 12,
        ..small(9)
    };
    let mut snrs = Vec::new();
    for (index, p) in Manifest::plan(&config).pairs.iter().enumerate() {
        let scene = draw_scene(&config, index, p.width, p.height);
        assert_eq!(scene.supernovae.len(), 4, "{}", p.id);
        assert_eq!(scene.variables.len(), 2, "{}", p.id);
        for t in pair_truth(&scene, &p.id, &config) {
            assert!(scene.inside_margin(t.x, t.y), "{t:?}");
            let (bx, by) = scene.to_epoch(Epoch::B, t.x, t.y);
            assert!(
                bx > 20.0 && by > 20.0 && bx < p.width as f64 - 21.0 && by < p.height as f64 - 21.0
            );
            assert!(t.snr.is_finite() && t.flux_b > 0.0);
            if t.kind == TransientKind::Supernova {
                snrs.push(t.snr);
            }
        }
    }
    assert!(
        snrs.iter().all(|&s| (3.0..=40.0 + 1e-9).contains(&s)),
        "{snrs:?}"
    );
    let faint = snrs.iter().filter(|&&s| s < 5.0).count();
    assert_eq!(faint * 4, snrs.len(), "a quarter below S/N 5: {snrs:?}");
}

#[test]
fn supernovae_sit_near_but_not_on_galaxies() {
    let config = small(21);
    let scene = draw_scene(&config, 0, 256, 256);
    for sn in &scene.supernovae {
        let near = scene.galaxies.iter().any(|g| {
            let d = ((g.x - sn.x).powi(2) + (g.y - sn.y).powi(2)).sqrt();
            d >= 2.0 - 1e-9 && d <= 3.0 * g.shape.half_light + 1e-9
        });
        assert!(near, "{sn:?}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A `size`-pixel square of A free of objects and cosmic rays.
fn clean_box(scene: &Scene, size: usize) -> Option<(usize, usize)> {
    let clear = star_clearances(scene, &small(0));
    let ok = |x0: usize, y0: usize| {
        let (cx, cy, half) = (
            x0 as f64 + size as f64 / 2.0,
            y0 as f64 + size as f64 / 2.0,
            size as f64 / 2.0,
        );
        let outside =
            |x: f64, y: f64, r: f64| (x - cx).abs() > half + r || (y - cy).abs() > half + r;
        scene
            .stars
            .iter()
            .zip(&clear)
            .all(|(s, c)| outside(s.x, s.y, *c))
            && scene
                .galaxies
                .iter()
                .all(|g| outside(g.x, g.y, 6.0 * g.shape.half_light + 10.0))
            && scene
                .cosmic_a
                .iter()
                .flatten()
                .all(|&(x, y, _)| outside(x as f64, y as f64, 2.0))
    };
    let steps = (0..=scene.width - size).step_by(8);
    steps
        .flat_map(|x| (0..=scene.height - size).step_by(8).map(move |y| (x, y)))
        .find(|&(x, y)| ok(x, y))
}

#[test]
fn sky_and_noise_match_the_model_and_supernovae_show_in_b() {
    let config = GenerateConfig {
        supernovae_per_pair: 6,
        ..small(17)
    };
    let scene = draw_scene(&config, 0, 256, 256);
    let a = render(&scene, Epoch::A, &config, 0);
    let b = render(&scene, Epoch::B, &config, 0);

    let (x0, y0) = clean_box(&scene, 24).expect("a clean 24 px box in a 256 px image");
    let cut = a.cut(x0, y0, 24, 24);
    let values: Vec<f64> = cut.pixels().iter().map(|&p| p as f64).collect();
    let med = median(values.clone());
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let std =
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt();
    let model_noise = sky_noise(&scene.a, &config);
    assert!(
        (med / scene.a.sky - 1.0).abs() < 0.1,
        "median {med} vs sky {}",
        scene.a.sky
    );
    assert!(
        (std / model_noise - 1.0).abs() < 0.1,
        "noise {std} vs {model_noise}"
    );

    // The brightest supernova: excess over sky in a 7x7 box, B (rescaled) vs A.
    let sn = scene
        .supernovae
        .iter()
        .max_by(|p, q| p.flux.total_cmp(&q.flux))
        .unwrap();
    let excess = |img: &Image, (x, y): (f64, f64), sky: f64| -> f64 {
        let (cx, cy) = (x.round() as usize, y.round() as usize);
        let mut sum = 0.0;
        for yy in cy - 3..=cy + 3 {
            for xx in cx - 3..=cx + 3 {
                sum += img.get(xx, yy) as f64 - sky;
            }
        }
        sum
    };
    let in_a = excess(&a, (sn.x, sn.y), scene.a.sky);
    let in_b = excess(&b, scene.to_epoch(Epoch::B, sn.x, sn.y), scene.b.sky) / scene.b.transparency;
    assert!(
        in_b - in_a > 0.3 * sn.flux,
        "B {in_b} vs A {in_a}, flux {}",
        sn.flux
    );
}

#[test]
fn saturated_stars_are_flat_topped() {
    let config = GenerateConfig {
        stars_per_megapixel: 3000.0,
        ..small(3)
    };
    let scene = draw_scene(&config, 0, 512, 512);
    let a = render(&scene, Epoch::A, &config, 0);
    let at_limit = a.pixels().iter().filter(|&&p| p == 60000.0).count();
    assert!(at_limit > 0 && a.pixels().iter().all(|&p| p <= 60000.0));
}

#[test]
fn bad_configurations_are_explained() {
    let dir = test_dir("gen-bad");
    let check = |c: GenerateConfig, words: &str| {
        let err = generate(&c, &dir, &mut |_, _| {}).unwrap_err();
        assert!(err.to_string().contains(words), "{err}");
    };
    check(
        GenerateConfig {
            min_size: 64,
            ..small(1)
        },
        "too small",
    );
    check(
        GenerateConfig {
            sites: vec!["a/b".into()],
            ..small(1)
        },
        "plain ASCII directory name",
    );
    check(
        GenerateConfig {
            sites: vec!["x".into(), "x".into()],
            ..small(1)
        },
        "listed twice",
    );
    check(
        GenerateConfig {
            gain: 0.0,
            ..small(1)
        },
        "gain",
    );
    check(
        GenerateConfig {
            saturate: 1000.0,
            ..small(1)
        },
        "saturation",
    );
}

#[test]
fn a_to_b_frame_rotates_about_the_centre() {
    let f = Frame {
        shift: (3.0, -2.0),
        angle: 90f64.to_radians(),
        centre: (10.0, 10.0),
    };
    let (x, y) = f.apply(11.0, 10.0);
    assert!(
        (x - 13.0).abs() < 1e-12 && (y - 9.0).abs() < 1e-12,
        "{x} {y}"
    );
}
