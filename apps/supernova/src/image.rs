//! A two-dimensional image of `f32` pixels.
//!
//! Pixel `(x, y)` has its centre at coordinates `(x as f64, y as f64)`:
//! `x` counts columns from 0 and `y` counts rows from 0, so the first pixel
//! of a FITS file (FITS pixel `(1, 1)`) is `(0, 0)` here. Pixels outside an
//! image's footprint (after resampling, say) are `NaN`.

/// Pixels in row-major order: row `y` is `pixels[y * width..(y + 1) * width]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    width: usize,
    height: usize,
    pixels: Vec<f32>,
}

impl Image {
    /// An image of `width × height` zeros.
    pub fn new(width: usize, height: usize) -> Image {
        Image::filled(width, height, 0.0)
    }

    /// An image of `width × height` pixels, all `value`.
    pub fn filled(width: usize, height: usize, value: f32) -> Image {
        Image {
            width,
            height,
            pixels: vec![value; width * height],
        }
    }

    /// An image over `pixels`, or `None` if there are not `width × height` of them.
    pub fn from_pixels(width: usize, height: usize, pixels: Vec<f32>) -> Option<Image> {
        (pixels.len() == width * height).then_some(Image {
            width,
            height,
            pixels,
        })
    }

    /// Columns.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Rows.
    pub fn height(&self) -> usize {
        self.height
    }

    /// All pixels, row-major.
    pub fn pixels(&self) -> &[f32] {
        &self.pixels
    }

    /// All pixels, row-major, for writing.
    pub fn pixels_mut(&mut self) -> &mut [f32] {
        &mut self.pixels
    }

    /// The pixels, giving up the image.
    pub fn into_pixels(self) -> Vec<f32> {
        self.pixels
    }

    /// Pixel `(x, y)`. Panics outside the image, like slice indexing.
    #[inline]
    pub fn get(&self, x: usize, y: usize) -> f32 {
        self.pixels[y * self.width + x]
    }

    /// Sets pixel `(x, y)`. Panics outside the image.
    #[inline]
    pub fn set(&mut self, x: usize, y: usize, value: f32) {
        self.pixels[y * self.width + x] = value;
    }

    /// Row `y`.
    pub fn row(&self, y: usize) -> &[f32] {
        &self.pixels[y * self.width..(y + 1) * self.width]
    }

    /// The `width × height` part whose first pixel is `(x0, y0)`, as a new
    /// image; pixels beyond this image's edges are `NaN`.
    pub fn cut(&self, x0: usize, y0: usize, width: usize, height: usize) -> Image {
        let mut out = Image::filled(width, height, f32::NAN);
        for y in 0..height.min(self.height.saturating_sub(y0)) {
            let n = width.min(self.width.saturating_sub(x0));
            let src = &self.row(y0 + y)[x0..x0 + n];
            out.pixels[y * width..y * width + n].copy_from_slice(src);
        }
        out
    }
}
