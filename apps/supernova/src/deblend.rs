//! Splitting blended detections at significant peaks.
//!
//! A component of the thresholded mask may hold several objects (crowded
//! stars, a star on a galaxy). Its local maxima in the smoothed image are
//! taken brightest first; a maximum becomes a separate object only if the
//! smoothed image dips between it and every object already accepted by
//! both `min_dip` (absolute, a multiple of the smoothed noise, so noise
//! bumps on a galaxy do not split it) and `contrast` × its height (so the
//! flat top of a saturated star does not split). Pixels then go to the
//! object their steepest-ascent path leads to.

/// The parts of component `pix` (pixel indices into a `width`-wide image
/// whose smoothed values are `smooth`). `min_dip(p)` is the least dip, in
/// image units, for a peak at pixel `p`. Returns one pixel list per object,
/// or the component whole if it has a single peak.
pub(crate) fn split(
    pix: &[usize],
    smooth: &[f32],
    width: usize,
    min_dip: &dyn Fn(usize) -> f32,
    contrast: f32,
) -> Vec<Vec<usize>> {
    if pix.len() < 3 {
        return vec![pix.to_vec()];
    }
    // Pixels highest first (ties by index, so the order is reproducible).
    let mut order: Vec<usize> = pix.to_vec();
    order.sort_by(|&a, &b| smooth[b].total_cmp(&smooth[a]).then(a.cmp(&b)));
    let rank = RankGrid::new(&order, width);
    // Steepest ascent: each pixel's parent is its highest neighbour in the
    // component if that is higher, else it is a peak.
    let mut root = vec![usize::MAX; order.len()];
    let mut peaks = Vec::new();
    for (i, &p) in order.iter().enumerate() {
        let (x, y) = (p % width, p / width);
        let mut best: Option<usize> = None;
        for ny in y.saturating_sub(1)..=y + 1 {
            for nx in x.saturating_sub(1)..=x + 1 {
                if let Some(j) = rank.get(nx, ny) {
                    if j < i && best.is_none_or(|b| j < b) {
                        best = Some(j);
                    }
                }
            }
        }
        root[i] = match best {
            Some(j) => root[j],
            None => {
                peaks.push(i);
                i
            }
        };
    }
    if peaks.len() == 1 {
        return vec![pix.to_vec()];
    }
    // Accept peaks (in rank order, so brightest first) separated by a real dip.
    let mut owner: Vec<usize> = Vec::with_capacity(peaks.len());
    let mut accepted: Vec<usize> = Vec::new();
    for &pk in &peaks {
        let p = order[pk];
        let mut merge_into: Option<(usize, f32)> = None;
        for (a, &acc) in accepted.iter().enumerate() {
            let low = line_minimum(smooth, width, p, order[acc]);
            let dip = smooth[p] - low;
            if dip < min_dip(p) || dip < contrast * smooth[p] {
                // Joined to this object; keep the one with the highest saddle.
                if merge_into.is_none_or(|(_, l)| low > l) {
                    merge_into = Some((a, low));
                }
            }
        }
        match merge_into {
            Some((a, _)) => owner.push(a),
            None => {
                owner.push(accepted.len());
                accepted.push(pk);
            }
        }
    }
    if accepted.len() == 1 {
        return vec![pix.to_vec()];
    }
    let mut parts = vec![Vec::new(); accepted.len()];
    for (i, &p) in order.iter().enumerate() {
        let peak_index = peaks.binary_search(&root[i]).expect("root is a peak");
        parts[owner[peak_index]].push(p);
    }
    // Each part in image order, like an undivided component.
    for part in &mut parts {
        part.sort_unstable();
    }
    parts
}

/// Rank (position in `order`) of each component pixel, on the component's
/// bounding box.
struct RankGrid {
    x0: usize,
    y0: usize,
    w: usize,
    h: usize,
    /// Rank + 1, or 0 outside the component.
    cells: Vec<u32>,
}

impl RankGrid {
    fn new(order: &[usize], width: usize) -> RankGrid {
        let xs = order.iter().map(|p| p % width);
        let ys = order.iter().map(|p| p / width);
        let (x0, x1) = (xs.clone().min().unwrap_or(0), xs.max().unwrap_or(0));
        let (y0, y1) = (ys.clone().min().unwrap_or(0), ys.max().unwrap_or(0));
        let (w, h) = (x1 - x0 + 1, y1 - y0 + 1);
        let mut cells = vec![0u32; w * h];
        for (i, &p) in order.iter().enumerate() {
            cells[(p / width - y0) * w + (p % width - x0)] = i as u32 + 1;
        }
        RankGrid {
            x0,
            y0,
            w,
            h,
            cells,
        }
    }

    fn get(&self, x: usize, y: usize) -> Option<usize> {
        if x < self.x0 || y < self.y0 || x >= self.x0 + self.w || y >= self.y0 + self.h {
            return None;
        }
        let r = self.cells[(y - self.y0) * self.w + (x - self.x0)];
        (r > 0).then(|| r as usize - 1)
    }
}

/// Lowest smoothed value on the straight line between pixels `p` and `q`
/// (sampled at every half pixel, nearest pixel).
fn line_minimum(smooth: &[f32], width: usize, p: usize, q: usize) -> f32 {
    let (x0, y0) = ((p % width) as f32, (p / width) as f32);
    let (x1, y1) = ((q % width) as f32, (q / width) as f32);
    let steps = (2.0 * (x1 - x0).abs().max((y1 - y0).abs())).ceil().max(1.0) as usize;
    (0..=steps)
        .map(|k| {
            let t = k as f32 / steps as f32;
            let x = (x0 + t * (x1 - x0)).round() as usize;
            let y = (y0 + t * (y1 - y0)).round() as usize;
            smooth[y * width + x]
        })
        .fold(f32::INFINITY, f32::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_two_peaks_but_not_a_plateau_or_a_bump() {
        let w = 12;
        // Two peaks (9 and 7) with a dip to 2 between them, and a row that
        // is a flat plateau.
        let two = [1.0, 5.0, 9.0, 5.0, 2.0, 4.0, 7.0, 3.0, 1.0, 0.5, 0.2, 0.1];
        let pix: Vec<usize> = (0..w).collect();
        let parts = split(&pix, &two, w, &|_| 1.0, 0.1);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], vec![0, 1, 2, 3, 4]);
        let bump = [1.0, 5.0, 9.0, 5.0, 4.8, 5.0, 3.0, 1.0, 0.5, 0.3, 0.2, 0.1];
        assert_eq!(split(&pix, &bump, w, &|_| 1.0, 0.1).len(), 1);
        let flat = [1.0, 5.0, 9.0, 9.0, 9.0, 9.0, 3.0, 1.0, 0.5, 0.3, 0.2, 0.1];
        assert_eq!(split(&pix, &flat, w, &|_| 1.0, 0.1).len(), 1);
    }
}
