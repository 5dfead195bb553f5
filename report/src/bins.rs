//! Spreading intervals over equal time bins, and small statistics.

/// Equal bins over `[0, span)`, accumulating how much of each interval, or
/// of a quantity spread evenly over it, falls into each bin.
pub(crate) struct Bins {
    width: f64,
    values: Vec<f64>,
}

impl Bins {
    /// `count` bins (at least one) covering `[0, span)`; a span that is not
    /// positive gets one second so that every division stays finite.
    pub(crate) fn new(span: f64, count: usize) -> Bins {
        let count = count.max(1);
        let span = if span > 0.0 { span } else { 1.0 };
        Bins {
            width: span / count as f64,
            values: vec![0.0; count],
        }
    }

    /// The width of one bin, in seconds.
    pub(crate) fn width(&self) -> f64 {
        self.width
    }

    fn index(&self, t: f64) -> usize {
        // Times at or past the end belong to the last bin, so the attempt
        // that ends the run is not lost to rounding.
        let i = (t / self.width).floor();
        if i <= 0.0 {
            0
        } else {
            (i as usize).min(self.values.len() - 1)
        }
    }

    /// Adds `amount` spread evenly over `[start, end]`: each bin gets the
    /// share that overlaps it. An empty interval puts it all in one bin.
    pub(crate) fn spread(&mut self, start: f64, end: f64, amount: f64) {
        let length = end - start;
        if length <= 0.0 {
            let i = self.index(start);
            self.values[i] += amount;
            return;
        }
        let density = amount / length;
        let last = self.values.len() - 1;
        for i in self.index(start)..=self.index(end) {
            let low = if i == 0 {
                f64::NEG_INFINITY
            } else {
                i as f64 * self.width
            };
            let high = if i == last {
                f64::INFINITY
            } else {
                (i + 1) as f64 * self.width
            };
            let overlap = end.min(high) - start.max(low);
            if overlap > 0.0 {
                self.values[i] += density * overlap;
            }
        }
    }

    /// Adds the time `[start, end]` covers in each bin (one busy executor).
    pub(crate) fn cover(&mut self, start: f64, end: f64) {
        self.spread(start, end, (end - start).max(0.0));
    }

    /// Each bin's total divided by `capacity` per second of bin: the
    /// fraction of `capacity` in use. Zero capacity gives zeros.
    pub(crate) fn fractions(&self, capacity: f64) -> Vec<f64> {
        let per_bin = capacity * self.width;
        self.values
            .iter()
            .map(|v| if per_bin > 0.0 { v / per_bin } else { 0.0 })
            .collect()
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` for no values.
pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The mean of `values`, or zero for none.
pub(crate) fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Averages `values` down to at most `width` buckets of (nearly) equal
/// size, for a sparkline narrower than the bins.
pub(crate) fn resample(values: &[f64], width: usize) -> Vec<f64> {
    if values.len() <= width || width == 0 {
        return values.to_vec();
    }
    (0..width)
        .map(|i| {
            let from = i * values.len() / width;
            let to = ((i + 1) * values.len() / width).max(from + 1);
            mean(&values[from..to])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn an_interval_is_shared_between_the_bins_it_overlaps() {
        let mut bins = Bins::new(10.0, 10);
        bins.cover(1.5, 3.25);
        let f = bins.fractions(1.0);
        assert!(close(f[0], 0.0));
        assert!(close(f[1], 0.5));
        assert!(close(f[2], 1.0));
        assert!(close(f[3], 0.25));
        assert!(close(f.iter().sum::<f64>(), 1.75));
    }

    #[test]
    fn a_quantity_is_spread_evenly_and_an_empty_interval_lands_in_one_bin() {
        let mut bins = Bins::new(4.0, 4);
        bins.spread(0.0, 2.0, 3.0);
        bins.spread(3.0, 3.0, 1.0);
        let f = bins.fractions(1.0);
        assert!(close(f[0], 1.5) && close(f[1], 1.5) && close(f[2], 0.0) && close(f[3], 1.0));
    }

    #[test]
    fn times_past_the_end_stay_in_the_last_bin() {
        let mut bins = Bins::new(2.0, 2);
        bins.cover(1.0, 2.0);
        bins.cover(-0.5, 0.0);
        let f = bins.fractions(1.0);
        assert!(close(f[0], 0.5) && close(f[1], 1.0));
    }

    #[test]
    fn medians_and_resampling() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(resample(&[1.0, 3.0, 0.0, 0.0], 2), vec![2.0, 0.0]);
        assert_eq!(resample(&[1.0, 3.0], 5), vec![1.0, 3.0]);
    }
}
