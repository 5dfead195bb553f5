//! Splitting the aligned image pair into overlapping tiles (step 7.1).
//!
//! The image is cut into a grid of nearly equal owned blocks of about
//! `size` px (equal blocks, so there is no thin sliver at the right or
//! bottom edge that would give the per-tile statistics too few pixels).
//! Each tile extends its owned block by `overlap` px on every side,
//! clipped at the image edges, so that objects near an owned edge are
//! filtered with their full neighbourhood; ownership then decides which
//! tile reports them.

use crate::catalog::Tile;

/// Tunables of the tiling.
#[derive(Debug, Clone, PartialEq)]
pub struct TileParams {
    /// Owned block side, px (default 256): large enough for robust per-tile
    /// noise statistics (65 000 px), small enough to spread the work.
    pub size: usize,
    /// Margin added on each side, px (default 24): must exceed the
    /// residual search's blind border (filter radius ≤ 6 px for FWHM
    /// 4.5 px, + 2) plus its dipole search radius (2 FWHM ≈ 9 px).
    pub overlap: usize,
    /// Tiles with fewer candidates in their owned block are dropped
    /// (default 1: a tile without any detection in B cannot hold a new
    /// source).
    pub min_candidates: usize,
}

impl Default for TileParams {
    fn default() -> Self {
        TileParams {
            size: 256,
            overlap: 24,
            min_candidates: 1,
        }
    }
}

/// The tiles of a `width × height` image that own at least
/// `min_candidates` of `candidates` (B's sources mapped into A's frame;
/// a candidate belongs to the tile owning its rounded position, and ones
/// off the image are ignored). Indices count all tiles, kept or not, in
/// row-major order.
pub fn split(
    width: usize,
    height: usize,
    candidates: &[(f64, f64)],
    params: &TileParams,
) -> Vec<Tile> {
    if width == 0 || height == 0 {
        return Vec::new();
    }
    let xs = edges(width, params.size);
    let ys = edges(height, params.size);
    let nx = xs.len() - 1;
    let mut counts = vec![0usize; nx * (ys.len() - 1)];
    for &(x, y) in candidates {
        let (xr, yr) = (x.round(), y.round());
        if !(xr >= 0.0 && yr >= 0.0 && xr < width as f64 && yr < height as f64) {
            continue;
        }
        let i = xs.partition_point(|&e| e <= xr as usize) - 1;
        let j = ys.partition_point(|&e| e <= yr as usize) - 1;
        counts[j * nx + i] += 1;
    }
    let mut tiles = Vec::new();
    for (j, yw) in ys.windows(2).enumerate() {
        for (i, xw) in xs.windows(2).enumerate() {
            let index = j * nx + i;
            if counts[index] < params.min_candidates {
                continue;
            }
            let (x0, x1) = (
                xw[0].saturating_sub(params.overlap),
                (xw[1] + params.overlap).min(width),
            );
            let (y0, y1) = (
                yw[0].saturating_sub(params.overlap),
                (yw[1] + params.overlap).min(height),
            );
            tiles.push(Tile {
                index,
                x0,
                y0,
                width: x1 - x0,
                height: y1 - y0,
                own_x: (xw[0], xw[1]),
                own_y: (yw[0], yw[1]),
                candidates: counts[index],
            });
        }
    }
    tiles
}

/// Boundaries of `ceil(len / size)` nearly equal blocks covering `0..len`.
/// How many tiles a `width × height` image has, kept or not: the range of
/// [`Tile::index`], known before any candidate is (a graph file lists one
/// compare step per tile).
pub fn count(width: usize, height: usize, params: &TileParams) -> usize {
    if width == 0 || height == 0 {
        return 0;
    }
    (edges(width, params.size).len() - 1) * (edges(height, params.size).len() - 1)
}

fn edges(len: usize, size: usize) -> Vec<usize> {
    let n = len.div_ceil(size.max(1)).max(1);
    (0..=n).map(|i| i * len / n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pixel_is_owned_exactly_once() {
        for &(w, h) in &[(1000, 700), (512, 512), (2048, 1536), (300, 13), (1, 1)] {
            let params = TileParams {
                min_candidates: 0,
                ..TileParams::default()
            };
            let tiles = split(w, h, &[], &params);
            let mut owned = vec![0u8; w * h];
            for t in &tiles {
                assert!(t.x0 + t.width <= w && t.y0 + t.height <= h);
                assert!(t.x0 <= t.own_x.0 && t.own_x.1 <= t.x0 + t.width);
                assert!(t.y0 <= t.own_y.0 && t.own_y.1 <= t.y0 + t.height);
                for y in t.own_y.0..t.own_y.1 {
                    for x in t.own_x.0..t.own_x.1 {
                        owned[y * w + x] += 1;
                    }
                }
            }
            assert!(owned.iter().all(|&c| c == 1), "{w}x{h}");
            for (k, t) in tiles.iter().enumerate() {
                assert_eq!(t.index, k);
            }
        }
    }

    #[test]
    fn keeps_only_tiles_with_candidates_and_counts_them() {
        let c = [
            (10.0, 10.0),
            (20.0, 30.0),
            (700.0, 10.0),
            (-5.0, 3.0),
            (999.6, 699.6),
        ];
        let tiles = split(1000, 700, &c, &TileParams::default());
        assert_eq!(tiles.len(), 2);
        assert_eq!((tiles[0].index, tiles[0].candidates), (0, 2));
        assert_eq!(tiles[1].index, 2);
        assert_eq!(tiles[1].x0, 500 - 24);
        assert!(split(0, 5, &c, &TileParams::default()).is_empty());
    }
}
