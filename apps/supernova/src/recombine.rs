//! Merging the tiles' residual lists into one (step 7.3).
//!
//! Tiles overlap, so an object near a tile edge is found by up to four
//! tiles. Each tile reports only what lies in the block it owns (the rounded
//! position decides), which removes exact duplicates; residuals still
//! closer than `merge_radius` (one object split into two components, or
//! straddling an ownership edge with slightly different centroids) are then
//! merged, keeping the most significant.

use crate::catalog::{Residual, Tile};

/// Tunables of the merge.
#[derive(Debug, Clone, PartialEq)]
pub struct RecombineParams {
    /// Residuals closer than this (px) are one object (default 2.0): below
    /// the FWHM of the sharpest PSF, so two real objects are never merged,
    /// above the centroid scatter of one object seen by two tiles.
    pub merge_radius: f64,
}

impl Default for RecombineParams {
    fn default() -> Self {
        RecombineParams { merge_radius: 2.0 }
    }
}

/// Whether `tile` owns the pixel nearest `(x, y)`.
pub fn owns(tile: &Tile, x: f64, y: f64) -> bool {
    let (xr, yr) = (x.round(), y.round());
    xr >= tile.own_x.0 as f64
        && xr < tile.own_x.1 as f64
        && yr >= tile.own_y.0 as f64
        && yr < tile.own_y.1 as f64
}

/// One list from the per-tile lists: owned residuals only, near-duplicates
/// merged (highest S/N kept; ties by position), sorted by (y, x).
pub fn recombine(per_tile: &[(Tile, Vec<Residual>)], params: &RecombineParams) -> Vec<Residual> {
    let mut all: Vec<Residual> = per_tile
        .iter()
        .flat_map(|(t, list)| list.iter().filter(|r| owns(t, r.x, r.y)).cloned())
        .collect();
    all.sort_by(|a, b| {
        b.snr
            .total_cmp(&a.snr)
            .then(a.y.total_cmp(&b.y))
            .then(a.x.total_cmp(&b.x))
    });
    // Residual lists are short (tens per image), so a quadratic pass is fine.
    let mut kept: Vec<Residual> = Vec::new();
    for r in all {
        if kept
            .iter()
            .all(|k| (k.x - r.x).hypot(k.y - r.y) >= params.merge_radius)
        {
            kept.push(r);
        }
    }
    kept.sort_by(|a, b| a.y.total_cmp(&b.y).then(a.x.total_cmp(&b.x)));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiles::{split, TileParams};

    fn res(x: f64, y: f64, snr: f64) -> Residual {
        Residual {
            x,
            y,
            flux: 100.0,
            snr,
            pixels: 3,
        }
    }

    #[test]
    fn overlap_duplicates_count_once() {
        let params = TileParams {
            min_candidates: 0,
            ..TileParams::default()
        };
        let tiles = split(512, 512, &[], &params);
        assert_eq!(tiles.len(), 4);
        // An object at x = 255.2 is seen by tiles 0 and 1 (owner: 0), one at
        // (300, 300) by all four (owner: 3), with slightly different centroids.
        let per_tile = vec![
            (
                tiles[0].clone(),
                vec![res(255.2, 40.0, 9.0), res(300.1, 300.0, 7.0)],
            ),
            (tiles[1].clone(), vec![res(255.3, 40.1, 9.5)]),
            (tiles[2].clone(), vec![res(300.0, 299.9, 7.2)]),
            (
                tiles[3].clone(),
                vec![
                    res(300.0, 300.0, 7.1),
                    res(301.0, 300.5, 6.0),
                    res(400.0, 260.0, 5.5),
                ],
            ),
        ];
        let out = recombine(&per_tile, &RecombineParams::default());
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!((out[0].x, out[0].snr), (255.2, 9.0));
        assert_eq!((out[1].x, out[1].snr), (400.0, 5.5));
        assert_eq!((out[2].x, out[2].snr), (300.0, 7.1));
    }
}
