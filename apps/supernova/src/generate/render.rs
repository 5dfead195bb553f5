//! Rendering a scene into one epoch's image, and the truth entries it
//! yields.

use super::scene::{sky_noise, Scene};
use super::{stream, GenerateConfig, Purpose};
use crate::image::Image;
use crate::layout::Epoch;
use crate::noise;
use crate::psf::{add_galaxy, Canvas, GalaxyShape};
use crate::truth::{difference_snr, Transient, TransientKind};

/// Renders one epoch: sky, objects, noise, cosmic rays, saturation.
pub(crate) fn render(scene: &Scene, epoch: Epoch, config: &GenerateConfig, index: usize) -> Image {
    let cond = scene.conditions(epoch);
    let mut canvas = Canvas::new(scene.width, scene.height, cond.sky);
    let t = cond.transparency;
    for star in &scene.stars {
        let (x, y) = scene.to_epoch(epoch, star.x, star.y);
        let flux = match epoch {
            Epoch::A => star.flux_a,
            Epoch::B => star.flux_b,
        };
        cond.psf.add_point(&mut canvas, x, y, flux * t);
    }
    let turn = match epoch {
        Epoch::A => 0.0,
        Epoch::B => scene.a_to_b.angle,
    };
    for g in &scene.galaxies {
        let (x, y) = scene.to_epoch(epoch, g.x, g.y);
        let shape = GalaxyShape {
            angle: g.shape.angle + turn,
            ..g.shape
        };
        add_galaxy(&mut canvas, x, y, g.flux * t, shape, cond.psf.sigma());
    }
    if epoch == Epoch::B {
        for sn in &scene.supernovae {
            let (x, y) = scene.to_epoch(epoch, sn.x, sn.y);
            cond.psf.add_point(&mut canvas, x, y, sn.flux * t);
        }
    }
    let purpose = match epoch {
        Epoch::A => Purpose::NoiseA,
        Epoch::B => Purpose::NoiseB,
    };
    let mut rng = stream(config.seed, purpose, index as u64, 0);
    let mut pixels = noise::observe(&canvas.data, config.gain, config.read_noise, &mut rng);
    let rays = match epoch {
        Epoch::A => &scene.cosmic_a,
        Epoch::B => &scene.cosmic_b,
    };
    for &(x, y, adu) in rays.iter().flatten() {
        pixels[y * scene.width + x] += adu as f32;
    }
    let saturate = config.saturate as f32;
    for p in &mut pixels {
        *p = p.min(saturate);
    }
    Image::from_pixels(scene.width, scene.height, pixels).expect("canvas has width × height pixels")
}

/// The truth entries of one pair: supernovae, then variables.
pub(crate) fn pair_truth(scene: &Scene, pair: &str, config: &GenerateConfig) -> Vec<Transient> {
    let (area, na, nb) = (
        scene.noise_area(),
        sky_noise(&scene.a, config),
        sky_noise(&scene.b, config),
    );
    let snr = |delta: f64| difference_snr(delta, area, na, nb, config.gain);
    let sn = scene.supernovae.iter().map(|s| Transient {
        pair: pair.to_string(),
        kind: TransientKind::Supernova,
        x: s.x,
        y: s.y,
        flux_a: 0.0,
        flux_b: s.flux,
        snr: snr(s.flux),
    });
    let var = scene.variables.iter().map(|&i| {
        let s = &scene.stars[i];
        Transient {
            pair: pair.to_string(),
            kind: TransientKind::Variable,
            x: s.x,
            y: s.y,
            flux_a: s.flux_a,
            flux_b: s.flux_b,
            snr: snr(s.flux_b - s.flux_a),
        }
    });
    sn.chain(var).collect()
}
