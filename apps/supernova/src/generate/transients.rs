//! What changes between A and B: variable stars, supernovae placed near
//! their hosts, and the cosmic rays kept clear of both.

use std::f64::consts::PI;

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::scene::*;
use super::*;
use crate::layout::Epoch;
use crate::truth::flux_for_snr;

/// The brightest a variable may get (A's flux scale) without saturating in
/// either epoch, with a factor 2 to spare for noise and pixel phase.
pub(super) fn variable_flux_limit(scene: &Scene, config: &GenerateConfig) -> f64 {
    let max_amp = 1.0 + VARIABLE_AMPLITUDE.1;
    let peak = scene
        .a
        .psf
        .peak(1.0)
        .max(scene.b.psf.peak(1.0) * scene.b.transparency);
    let headroom = config.saturate - scene.a.sky.max(scene.b.sky);
    0.5 * headroom / (peak * max_amp)
}

pub(super) fn far_from(positions: &[(f64, f64)], x: f64, y: f64, distance: f64) -> bool {
    positions
        .iter()
        .all(|&(px, py)| (px - x).powi(2) + (py - y).powi(2) >= distance * distance)
}

pub(super) fn place_variables(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &mut Scene,
    faint: f64,
) {
    let wanted = config.variables_per_pair;
    let lo = VARIABLE_MIN_OVER_FAINT * faint;
    let hi = variable_flux_limit(scene, config);
    if wanted == 0 || hi <= lo {
        return;
    }
    let mut candidates: Vec<usize> = (0..scene.stars.len())
        .filter(|&i| {
            let s = &scene.stars[i];
            scene.inside_margin(s.x, s.y) && (lo..=hi).contains(&s.flux_a)
        })
        .collect();
    candidates.shuffle(rng);
    for i in candidates {
        if scene.variables.len() == wanted {
            break;
        }
        let (x, y) = (scene.stars[i].x, scene.stars[i].y);
        if far_from(&scene.transient_positions(), x, y, TRANSIENT_SEPARATION) {
            scene.variables.push(i);
        }
    }
    // Too few suitable stars (a small image): add new ones.
    for _ in 0..PLACEMENT_TRIES {
        if scene.variables.len() == wanted {
            break;
        }
        let (x, y) = interior_position(rng, scene);
        let flux = log_uniform(rng, (lo, hi));
        if far_from(&scene.transient_positions(), x, y, TRANSIENT_SEPARATION) {
            scene.stars.push(Star {
                x,
                y,
                flux_a: flux,
                flux_b: flux,
            });
            scene.variables.push(scene.stars.len() - 1);
        }
    }
    for k in 0..scene.variables.len() {
        let star = &mut scene.stars[scene.variables[k]];
        let factor = 1.0 + uniform(rng, VARIABLE_AMPLITUDE);
        star.flux_b = if rng.gen_bool(VARIABLE_BRIGHTENING) {
            star.flux_a * factor
        } else {
            star.flux_a / factor
        };
    }
}

/// Target S/N values: stratified over the quantiles so that every pair gets
/// the intended spread, a quarter in 3–5 and the rest log-uniform in 5–40.
pub(super) fn supernova_snrs(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    let mut snrs: Vec<f64> = (0..n)
        .map(|i| {
            let u = (i as f64 + rng.gen::<f64>()) / n as f64;
            if u < SN_FAINT_SHARE {
                SN_SNR_RANGE.0 + (SN_FAINT_SNR - SN_SNR_RANGE.0) * u / SN_FAINT_SHARE
            } else {
                let t = (u - SN_FAINT_SHARE) / (1.0 - SN_FAINT_SHARE);
                SN_FAINT_SNR * (SN_SNR_RANGE.1 / SN_FAINT_SNR).powf(t)
            }
        })
        .collect();
    // Otherwise the faint ones would always be placed first, in the best spots.
    snrs.shuffle(rng);
    snrs
}

/// How far a supernova must stay from a star: a few FWHM, or further where
/// the star's light is still above the sky noise.
pub(super) fn star_clearances(scene: &Scene, config: &GenerateConfig) -> Vec<f64> {
    let fwhm = scene.a.psf.fwhm.max(scene.b.psf.fwhm);
    let noise = sky_noise(&scene.a, config);
    scene
        .stars
        .iter()
        .map(|s| {
            let flux = s.flux_a.max(s.flux_b * scene.b.transparency);
            let reach = scene
                .a
                .psf
                .radius_above(flux, noise)
                .max(scene.b.psf.radius_above(flux, noise));
            (3.0 * fwhm).max(reach + 2.0 * fwhm)
        })
        .collect()
}

pub(super) fn place_supernovae(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &mut Scene,
    faint: f64,
) {
    let clearances = star_clearances(scene, config);
    let (area, na, nb) = (
        scene.noise_area(),
        sky_noise(&scene.a, config),
        sky_noise(&scene.b, config),
    );
    for snr in supernova_snrs(rng, config.supernovae_per_pair) {
        let flux = flux_for_snr(snr, area, na, nb, config.gain);
        if let Some((x, y, new_host)) = find_supernova_spot(rng, scene, &clearances, faint) {
            scene.galaxies.extend(new_host);
            scene.supernovae.push(Supernova { x, y, flux });
        }
    }
}

/// A position near a host galaxy that satisfies the placement rules, and
/// the new host galaxy if none of the existing ones served.
pub(super) fn find_supernova_spot(
    rng: &mut ChaCha8Rng,
    scene: &Scene,
    clearances: &[f64],
    faint: f64,
) -> Option<(f64, f64, Option<Galaxy>)> {
    let taken = scene.transient_positions();
    for attempt in 0..PLACEMENT_TRIES {
        // Existing galaxies first; later tries bring their own host.
        let (host, is_new) = if attempt < PLACEMENT_TRIES / 2 && !scene.galaxies.is_empty() {
            (*scene.galaxies.choose(rng).expect("not empty"), false)
        } else {
            let pos = interior_position(rng, scene);
            (draw_galaxy(rng, pos, faint), true)
        };
        let offset = (uniform(rng, SN_HOST_OFFSET) * host.shape.half_light).max(SN_MIN_HOST_OFFSET);
        let angle = uniform(rng, (0.0, 2.0 * PI));
        let (x, y) = (host.x + offset * angle.cos(), host.y + offset * angle.sin());
        let clear_of_stars = scene
            .stars
            .iter()
            .zip(clearances)
            .all(|(s, c)| (s.x - x).powi(2) + (s.y - y).powi(2) >= c * c);
        if scene.inside_margin(x, y)
            && clear_of_stars
            && far_from(&taken, x, y, TRANSIENT_SEPARATION)
        {
            return Some((x, y, is_new.then_some(host)));
        }
    }
    None
}

pub(super) fn draw_cosmic_rays(
    rng: &mut ChaCha8Rng,
    config: &GenerateConfig,
    scene: &Scene,
    epoch: Epoch,
) -> Vec<CosmicRay> {
    let n = config.cosmic_rays_per_image;
    if n == 0 {
        return Vec::new();
    }
    let count = rng.gen_range(n.div_ceil(2)..=n + n / 2);
    let avoid: Vec<(f64, f64)> = scene
        .transient_positions()
        .into_iter()
        .map(|(x, y)| scene.to_epoch(epoch, x, y))
        .collect();
    let mut rays = Vec::with_capacity(count);
    for _ in 0..PLACEMENT_TRIES {
        if rays.len() == count {
            break;
        }
        let (x, y) = (
            rng.gen_range(0..scene.width),
            rng.gen_range(0..scene.height),
        );
        if far_from(&avoid, x as f64, y as f64, COSMIC_CLEARANCE) {
            rays.push(cosmic_ray_track(rng, scene, x, y));
        }
    }
    rays
}

/// A hit of one to three touching pixels, the later ones weaker.
pub(super) fn cosmic_ray_track(
    rng: &mut ChaCha8Rng,
    scene: &Scene,
    x: usize,
    y: usize,
) -> CosmicRay {
    let mut amp = uniform(rng, COSMIC_AMPLITUDE);
    let mut hits = vec![(x, y, amp)];
    for _ in 0..rng.gen_range(0..=2) {
        let (px, py, _) = *hits.last().expect("one hit at least");
        let nx = (px as i64 + rng.gen_range(-1..=1)).clamp(0, scene.width as i64 - 1) as usize;
        let ny = (py as i64 + rng.gen_range(-1..=1)).clamp(0, scene.height as i64 - 1) as usize;
        amp *= uniform(rng, (0.3, 1.0));
        if hits.iter().all(|&(hx, hy, _)| (hx, hy) != (nx, ny)) {
            hits.push((nx, ny, amp));
        }
    }
    hits
}
