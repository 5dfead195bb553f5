//! Kernels shipped with the crate, each with a CPU reference that computes
//! the same result, for tests and for machines without a GPU.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{driver, guarded, CudaDevice, GpuError, Kernel};

/// `y = a * x + y` over `n` floats, with a grid-stride loop so that any
/// length works with a bounded grid.
pub const SAXPY: Kernel = Kernel {
    name: "constellation_saxpy",
    source: r#"
extern "C" __global__ void constellation_saxpy(
    float a, const float *x, float *y, unsigned long long n)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}
"#,
};

/// The significance of the change between two images, pixel by pixel:
/// `(b - a) / sqrt(sa^2 + sb^2)`, and 0 where that denominator is 0 (or not
/// a number, which the `> 0` test also rejects).
pub const DIFFERENCE_IMAGE: Kernel = Kernel {
    name: "constellation_difference_image",
    source: r#"
extern "C" __global__ void constellation_difference_image(
    const float *a, const float *b, const float *sa, const float *sb,
    float *out, unsigned long long n)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        float variance = sa[i] * sa[i] + sb[i] * sb[i];
        out[i] = variance > 0.0f ? (b[i] - a[i]) / sqrtf(variance) : 0.0f;
    }
}
"#,
};

/// One pass of a separable blur: each pixel becomes the weighted sum of the
/// `2 * radius + 1` pixels around it in its row, with the image's edge
/// pixels repeated beyond the edge.
pub const CONVOLVE_ROWS: Kernel = Kernel {
    name: "constellation_convolve_rows",
    source: r#"
extern "C" __global__ void constellation_convolve_rows(
    const float *in, float *out, unsigned long long width, unsigned long long height,
    const float *weights, long long radius)
{
    unsigned long long n = width * height;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        long long x = (long long)(i % width);
        unsigned long long row = i - (unsigned long long)x;
        float sum = 0.0f;
        for (long long k = -radius; k <= radius; ++k) {
            long long at = x + k;
            at = at < 0 ? 0 : (at >= (long long)width ? (long long)width - 1 : at);
            sum += weights[k + radius] * in[row + (unsigned long long)at];
        }
        out[i] = sum;
    }
}
"#,
};

/// The other pass of a separable blur: [`CONVOLVE_ROWS`] along columns.
pub const CONVOLVE_COLUMNS: Kernel = Kernel {
    name: "constellation_convolve_columns",
    source: r#"
extern "C" __global__ void constellation_convolve_columns(
    const float *in, float *out, unsigned long long width, unsigned long long height,
    const float *weights, long long radius)
{
    unsigned long long n = width * height;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        long long y = (long long)(i / width);
        unsigned long long x = i % width;
        float sum = 0.0f;
        for (long long k = -radius; k <= radius; ++k) {
            long long at = y + k;
            at = at < 0 ? 0 : (at >= (long long)height ? (long long)height - 1 : at);
            sum += weights[k + radius] * in[(unsigned long long)at * width + x];
        }
        out[i] = sum;
    }
}
"#,
};

/// The widest blur [`gaussian_blur`] accepts, in pixels. The weights reach
/// out three sigmas, so this bounds the work per pixel.
pub const MAX_BLUR_SIGMA: f32 = 1000.0;

/// Threads per block for the element-wise kernels.
const BLOCK: u32 = 256;
/// The most blocks launched; the grid-stride loops cover longer inputs.
/// Large enough to fill any current GPU many times over.
const MAX_BLOCKS: usize = 1 << 16;

/// A launch over `n` elements for a grid-stride kernel: 256 threads per
/// block, at most 65,536 blocks.
pub fn launch_config(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Fails unless every argument has `expected` elements.
fn same_lengths(
    kernel: &str,
    expected: usize,
    arguments: &[(&str, &[f32])],
) -> Result<(), GpuError> {
    match arguments
        .iter()
        .find(|(_, values)| values.len() != expected)
    {
        None => Ok(()),
        Some((argument, values)) => Err(GpuError::LengthMismatch {
            kernel: kernel.to_string(),
            argument: argument.to_string(),
            expected,
            found: values.len(),
        }),
    }
}

/// `a * x + y` on the GPU; `x` and `y` must have the same length.
pub fn saxpy(device: &CudaDevice, a: f32, x: &[f32], y: &[f32]) -> Result<Vec<f32>, GpuError> {
    same_lengths("saxpy", x.len(), &[("y", y)])?;
    if x.is_empty() {
        return Ok(Vec::new());
    }
    let function = device.function(&SAXPY)?;
    guarded("saxpy", || {
        let stream = device.stream();
        let x_gpu = stream
            .clone_htod(x)
            .map_err(driver("cuMemcpyHtoD (saxpy x)"))?;
        let mut y_gpu = stream
            .clone_htod(y)
            .map_err(driver("cuMemcpyHtoD (saxpy y)"))?;
        let n = x.len() as u64;
        let mut launch = stream.launch_builder(&function);
        launch.arg(&a).arg(&x_gpu).arg(&mut y_gpu).arg(&n);
        // SAFETY: the arguments match the kernel's parameters in SAXPY
        // (float, const float *, float *, unsigned long long), and both
        // buffers hold `n` floats, which is all the kernel touches.
        unsafe { launch.launch(launch_config(x.len())) }
            .map_err(|error| launched("saxpy", error))?;
        stream
            .synchronize()
            .map_err(|error| launched("saxpy", error))?;
        stream
            .clone_dtoh(&y_gpu)
            .map_err(driver("cuMemcpyDtoH (saxpy y)"))
    })
}

/// The CPU reference for [`saxpy`].
pub fn saxpy_cpu(a: f32, x: &[f32], y: &[f32]) -> Result<Vec<f32>, GpuError> {
    same_lengths("saxpy_cpu", x.len(), &[("y", y)])?;
    Ok(x.iter().zip(y).map(|(x, y)| a * x + y).collect())
}

/// The significance image of the change from image `a` to image `b` on the
/// GPU, given their per-pixel noise `sigma_a` and `sigma_b`:
/// `(b - a) / sqrt(sigma_a^2 + sigma_b^2)`, and 0 where that denominator is 0.
/// All four slices must have the same length.
pub fn difference_image(
    device: &CudaDevice,
    a: &[f32],
    b: &[f32],
    sigma_a: &[f32],
    sigma_b: &[f32],
) -> Result<Vec<f32>, GpuError> {
    same_lengths(
        "difference_image",
        a.len(),
        &[("b", b), ("sigma_a", sigma_a), ("sigma_b", sigma_b)],
    )?;
    if a.is_empty() {
        return Ok(Vec::new());
    }
    let function = device.function(&DIFFERENCE_IMAGE)?;
    guarded("difference_image", || {
        let stream = device.stream();
        let upload = |values: &[f32]| {
            stream
                .clone_htod(values)
                .map_err(driver("cuMemcpyHtoD (difference_image)"))
        };
        let (a_gpu, b_gpu) = (upload(a)?, upload(b)?);
        let (sa_gpu, sb_gpu) = (upload(sigma_a)?, upload(sigma_b)?);
        let mut out = stream
            .alloc_zeros::<f32>(a.len())
            .map_err(driver("cuMemAlloc (difference_image)"))?;
        let n = a.len() as u64;
        let mut launch = stream.launch_builder(&function);
        launch
            .arg(&a_gpu)
            .arg(&b_gpu)
            .arg(&sa_gpu)
            .arg(&sb_gpu)
            .arg(&mut out)
            .arg(&n);
        // SAFETY: the arguments match the kernel's parameters in
        // DIFFERENCE_IMAGE (four const float *, float *, unsigned long long),
        // and all five buffers hold `n` floats.
        unsafe { launch.launch(launch_config(a.len())) }
            .map_err(|error| launched("difference_image", error))?;
        stream
            .synchronize()
            .map_err(|error| launched("difference_image", error))?;
        stream
            .clone_dtoh(&out)
            .map_err(driver("cuMemcpyDtoH (difference_image)"))
    })
}

/// The CPU reference for [`difference_image`].
pub fn difference_image_cpu(
    a: &[f32],
    b: &[f32],
    sigma_a: &[f32],
    sigma_b: &[f32],
) -> Result<Vec<f32>, GpuError> {
    same_lengths(
        "difference_image_cpu",
        a.len(),
        &[("b", b), ("sigma_a", sigma_a), ("sigma_b", sigma_b)],
    )?;
    let pixels = a.iter().zip(b).zip(sigma_a.iter().zip(sigma_b));
    Ok(pixels
        .map(|((a, b), (sa, sb))| {
            let variance = sa * sa + sb * sb;
            if variance > 0.0 {
                (b - a) / variance.sqrt()
            } else {
                0.0
            }
        })
        .collect())
}

/// The weights of a Gaussian of width `sigma` pixels, sampled at whole
/// pixels out to three sigmas on each side and summing to 1; `[1.0]` for
/// `sigma == 0`. `sigma` must be finite, and from 0 to [`MAX_BLUR_SIGMA`].
pub fn gaussian_weights(sigma: f32) -> Result<Vec<f32>, GpuError> {
    if !(0.0..=MAX_BLUR_SIGMA).contains(&sigma) {
        return Err(GpuError::InvalidArgument(format!(
            "blur sigma {sigma} is not between 0 and {MAX_BLUR_SIGMA} pixels"
        )));
    }
    let radius = (3.0 * sigma).ceil() as i64;
    if radius == 0 {
        return Ok(vec![1.0]);
    }
    // Summed in f64 so that wide kernels still normalize to 1 in f32.
    let raw: Vec<f64> = (-radius..=radius)
        .map(|k| (-((k * k) as f64) / (2.0 * f64::from(sigma).powi(2))).exp())
        .collect();
    let total: f64 = raw.iter().sum();
    Ok(raw.iter().map(|w| (w / total) as f32).collect())
}

/// Checks a `width` x `height` image against its pixels.
fn image_size(kernel: &str, image: &[f32], width: usize, height: usize) -> Result<(), GpuError> {
    let pixels = width.checked_mul(height).ok_or_else(|| {
        GpuError::InvalidArgument(format!("{kernel}: a {width} x {height} image is too large"))
    })?;
    same_lengths(kernel, pixels, &[("image", image)])
}

/// `image` (`width` x `height` pixels, row by row) blurred with a Gaussian
/// of width `sigma` pixels on the GPU, as a row pass and a column pass;
/// edge pixels are repeated beyond the edges. See [`gaussian_weights`].
pub fn gaussian_blur(
    device: &CudaDevice,
    image: &[f32],
    width: usize,
    height: usize,
    sigma: f32,
) -> Result<Vec<f32>, GpuError> {
    image_size("gaussian_blur", image, width, height)?;
    let weights = gaussian_weights(sigma)?;
    if image.is_empty() {
        return Ok(Vec::new());
    }
    let rows = device.function(&CONVOLVE_ROWS)?;
    let columns = device.function(&CONVOLVE_COLUMNS)?;
    guarded("gaussian_blur", || {
        let stream = device.stream();
        let upload = |values: &[f32]| {
            stream
                .clone_htod(values)
                .map_err(driver("cuMemcpyHtoD (gaussian_blur)"))
        };
        let (input, weights_gpu) = (upload(image)?, upload(&weights)?);
        let alloc = || {
            stream
                .alloc_zeros::<f32>(image.len())
                .map_err(driver("cuMemAlloc (gaussian_blur)"))
        };
        let (mut between, mut output) = (alloc()?, alloc()?);
        let (w, h) = (width as u64, height as u64);
        let radius = (weights.len() / 2) as i64;
        let config = launch_config(image.len());
        let mut launch = stream.launch_builder(&rows);
        launch
            .arg(&input)
            .arg(&mut between)
            .arg(&w)
            .arg(&h)
            .arg(&weights_gpu)
            .arg(&radius);
        // SAFETY: the arguments match CONVOLVE_ROWS's parameters (const
        // float *, float *, two unsigned long long, const float *, long
        // long); both images hold width * height floats and the weights
        // 2 * radius + 1.
        unsafe { launch.launch(config) }.map_err(|error| launched("convolve_rows", error))?;
        let mut launch = stream.launch_builder(&columns);
        launch
            .arg(&between)
            .arg(&mut output)
            .arg(&w)
            .arg(&h)
            .arg(&weights_gpu)
            .arg(&radius);
        // SAFETY: as above, for CONVOLVE_COLUMNS, which has the same
        // parameters.
        unsafe { launch.launch(config) }.map_err(|error| launched("convolve_columns", error))?;
        stream
            .synchronize()
            .map_err(|error| launched("gaussian_blur", error))?;
        stream
            .clone_dtoh(&output)
            .map_err(driver("cuMemcpyDtoH (gaussian_blur)"))
    })
}

/// The CPU reference for [`gaussian_blur`], summing in the same order.
pub fn gaussian_blur_cpu(
    image: &[f32],
    width: usize,
    height: usize,
    sigma: f32,
) -> Result<Vec<f32>, GpuError> {
    image_size("gaussian_blur_cpu", image, width, height)?;
    let weights = gaussian_weights(sigma)?;
    if image.is_empty() {
        return Ok(Vec::new());
    }
    let radius = (weights.len() / 2) as isize;
    // The pixel `k` away from `at` along an axis of `len` pixels, with the
    // edge pixel repeated beyond the edge.
    let clamp = |at: usize, k: isize, len: usize| at.saturating_add_signed(k).min(len - 1);
    let mut between = vec![0.0; image.len()];
    for (i, pixel) in between.iter_mut().enumerate() {
        let (row, x) = (i - i % width, i % width);
        *pixel = (-radius..=radius)
            .zip(&weights)
            .map(|(k, w)| w * image[row + clamp(x, k, width)])
            .sum();
    }
    let mut output = vec![0.0; image.len()];
    for (i, pixel) in output.iter_mut().enumerate() {
        let (y, x) = (i / width, i % width);
        *pixel = (-radius..=radius)
            .zip(&weights)
            .map(|(k, w)| w * between[clamp(y, k, height) * width + x])
            .sum();
    }
    Ok(output)
}

/// A failed launch, or a kernel that failed while running (reported when
/// the stream is synchronized).
pub fn launched(kernel: &str, error: cudarc::driver::DriverError) -> GpuError {
    GpuError::Launch(format!("{kernel}: {}", super::describe(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saxpy_reference_gives_known_values() {
        assert_eq!(
            saxpy_cpu(2.0, &[1.0, 2.0, -3.0], &[10.0, 20.0, 30.0]),
            Ok(vec![12.0, 24.0, 24.0])
        );
        assert_eq!(saxpy_cpu(5.0, &[], &[]), Ok(vec![]));
    }

    #[test]
    fn difference_image_reference_gives_known_values() {
        let a = [1.0, 5.0, 2.0, 7.0];
        let b = [4.0, 1.0, 2.0, 9.0];
        let sa = [3.0, 0.0, 1.0, 0.0];
        let sb = [4.0, 2.0, 1.0, 0.0];
        // 3/5, -4/2, 0/sqrt(2), and a zero denominator.
        assert_eq!(
            difference_image_cpu(&a, &b, &sa, &sb),
            Ok(vec![0.6, -2.0, 0.0, 0.0])
        );
        let nan = [f32::NAN];
        assert_eq!(
            difference_image_cpu(&[1.0], &[2.0], &nan, &[1.0]),
            Ok(vec![0.0])
        );
    }

    #[test]
    fn mismatched_lengths_are_errors_that_name_the_argument() {
        assert_eq!(
            saxpy_cpu(1.0, &[1.0, 2.0], &[1.0]),
            Err(GpuError::LengthMismatch {
                kernel: "saxpy_cpu".into(),
                argument: "y".into(),
                expected: 2,
                found: 1,
            })
        );
        let error = difference_image_cpu(&[1.0], &[1.0], &[1.0], &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "difference_image_cpu: `sigma_b` has 0 elements, but 1 were expected"
        );
    }

    #[test]
    fn gaussian_weights_are_symmetric_and_sum_to_one() {
        assert_eq!(gaussian_weights(0.0), Ok(vec![1.0]));
        let weights = gaussian_weights(1.5).expect("a valid sigma");
        assert_eq!(weights.len(), 2 * 5 + 1);
        assert!(weights
            .iter()
            .zip(weights.iter().rev())
            .all(|(a, b)| a == b));
        assert!((weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(weights[5] > weights[4] && weights[4] > weights[0]);
        for bad in [-1.0, f32::NAN, f32::INFINITY, MAX_BLUR_SIGMA * 2.0] {
            assert!(
                matches!(gaussian_weights(bad), Err(GpuError::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn gaussian_blur_reference_keeps_flat_images_flat_and_spreads_points() {
        let flat = vec![3.0; 7 * 5];
        let blurred = gaussian_blur_cpu(&flat, 7, 5, 2.0).expect("valid input");
        assert!(
            blurred.iter().all(|v| (v - 3.0).abs() < 1e-5),
            "{blurred:?}"
        );

        let (width, height) = (9, 9);
        let mut point = vec![0.0; width * height];
        point[4 * width + 4] = 1.0;
        let blurred = gaussian_blur_cpu(&point, width, height, 1.0).expect("valid input");
        let weights = gaussian_weights(1.0).expect("valid sigma");
        // A point spreads into the outer product of the weights, out to
        // the radius (3 pixels) and no further.
        for y in 0..height {
            for x in 0..width {
                let inside = (1..8).contains(&y) && (1..8).contains(&x);
                let expected = if inside {
                    weights[y - 1] * weights[x - 1]
                } else {
                    0.0
                };
                let got = blurred[y * width + x];
                assert!(
                    (got - expected).abs() < 1e-6,
                    "({x}, {y}): {got} vs {expected}"
                );
            }
        }
        assert!((blurred.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(
            gaussian_blur_cpu(&point, width, height, 0.0),
            Ok(point.clone())
        );
    }

    #[test]
    fn gaussian_blur_reference_rejects_bad_sizes() {
        assert!(matches!(
            gaussian_blur_cpu(&[1.0; 6], 4, 2, 1.0),
            Err(GpuError::LengthMismatch {
                expected: 8,
                found: 6,
                ..
            })
        ));
        assert!(matches!(
            gaussian_blur_cpu(&[], usize::MAX, 2, 1.0),
            Err(GpuError::InvalidArgument(_))
        ));
        assert_eq!(gaussian_blur_cpu(&[], 0, 5, 1.0), Ok(vec![]));
    }

    #[test]
    fn launches_cover_every_element_with_a_bounded_grid() {
        for n in [1, 255, 256, 257, 1 << 20, usize::MAX] {
            let config = launch_config(n);
            let threads = config.grid_dim.0 as usize * config.block_dim.0 as usize;
            assert!(config.grid_dim.0 >= 1 && config.grid_dim.0 as usize <= MAX_BLOCKS);
            assert!(threads >= n.min(MAX_BLOCKS * BLOCK as usize), "{n}");
        }
    }
}
