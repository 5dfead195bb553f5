//! 8-connected components of a pixel mask, shared by detection and the
//! residual search.
//!
//! Components are found in row-major order of their first pixel, and each
//! one's pixels are listed in flood-fill order, so results are deterministic.

/// All components, their pixel indices stored back to back.
pub(crate) struct Components {
    /// Pixel indices (`y * width + x`) of every component, concatenated.
    pixels: Vec<usize>,
    /// Component `k` is `pixels[starts[k]..starts[k + 1]]`.
    starts: Vec<usize>,
}

impl Components {
    /// Number of components.
    pub(crate) fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// The pixel indices of component `k`.
    pub(crate) fn get(&self, k: usize) -> &[usize] {
        &self.pixels[self.starts[k]..self.starts[k + 1]]
    }

    /// Iterates over the components' pixel lists.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[usize]> {
        (0..self.len()).map(move |k| self.get(k))
    }
}

/// Labels the 8-connected components of `mask` (`width × height`,
/// row-major), keeping those with at least `min_pixels` pixels.
pub(crate) fn label(mask: &[bool], width: usize, height: usize, min_pixels: usize) -> Components {
    let mut seen = vec![false; mask.len()];
    let mut pixels = Vec::new();
    let mut starts = vec![0];
    let mut stack = Vec::new();
    for start in 0..mask.len().min(width * height) {
        if !mask[start] || seen[start] {
            continue;
        }
        let first = pixels.len();
        seen[start] = true;
        stack.push(start);
        while let Some(p) = stack.pop() {
            pixels.push(p);
            let (x, y) = (p % width, p / width);
            for ny in y.saturating_sub(1)..(y + 2).min(height) {
                for nx in x.saturating_sub(1)..(x + 2).min(width) {
                    let q = ny * width + nx;
                    if mask[q] && !seen[q] {
                        seen[q] = true;
                        stack.push(q);
                    }
                }
            }
        }
        if pixels.len() - first >= min_pixels.max(1) {
            starts.push(pixels.len());
        } else {
            pixels.truncate(first);
        }
    }
    Components { pixels, starts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagonal_pixels_connect_and_small_ones_drop() {
        #[rustfmt::skip]
        let m = [
            true, false, false, false,
            false, true, false, true,
            false, false, false, false,
        ];
        let c = label(&m, 4, 3, 1);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(0).len(), 2);
        assert_eq!(label(&m, 4, 3, 2).len(), 1);
        assert_eq!(label(&[], 0, 0, 1).len(), 0);
    }
}
