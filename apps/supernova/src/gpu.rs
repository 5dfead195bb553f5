//! Step 7.2's numeric part as CUDA kernels, compiled by NVRTC on the GPU
//! executor that runs them (through `executors::gpu`).
//!
//! The kernels compute what [`compare::significance`] computes on the CPU,
//! in the same order: the difference `D = b − a` and its variance model
//! `V`, then the separable matched filter over `D` (weights `w`, giving
//! `N`) and over `V` (weights `w²`, giving `W`). The rest — `N / sqrt(W)`
//! and its robust scale, which needs the whole map, then the thresholding
//! and the residual search — is post-processing on the CPU
//! ([`compare::significance_from_filtered`], [`compare::find_residuals`]),
//! like the step's file reading and set-up. Float results differ from the
//! CPU's only by rounding (the GPU may fuse multiply-adds); [`TOLERANCE`]
//! bounds the difference.

use executors::gpu::cudarc::driver::{CudaSlice, PushKernelArg};
use executors::gpu::{self, CudaActivity, CudaDevice, GpuError, GpuOutput, Kernel};
use serde::{Deserialize, Serialize};

use crate::compare::{self, Significance};
use crate::image::Image;
use crate::steps::TileInputs;

/// Largest relative difference between the GPU's and the CPU's filtered
/// maps that rounding explains (f32 sums of up to a few hundred terms).
pub const TOLERANCE: f32 = 1e-4;

/// `D = b − a` and `V = v0 + (max(a, 0) + max(b, 0)) · inv_gain`, both
/// NaN where either input is not finite.
const DIFFERENCE_VARIANCE: Kernel = Kernel {
    name: "supernova_difference_variance",
    source: r#"
extern "C" __global__ void supernova_difference_variance(
    const float *a, const float *b, float *d, float *v,
    float v0, float inv_gain, unsigned long long n)
{
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        float av = a[i], bv = b[i];
        if (!isfinite(av) || !isfinite(bv)) {
            d[i] = __int_as_float(0x7fc00000);
            v[i] = __int_as_float(0x7fc00000);
        } else {
            d[i] = bv - av;
            v[i] = v0 + ((av > 0.0f ? av : 0.0f) + (bv > 0.0f ? bv : 0.0f)) * inv_gain;
        }
    }
}
"#,
};

/// One pass of the matched filter along rows (`step` 1) or columns (`step`
/// = width) for both maps; a pixel whose window leaves the tile is NaN.
const FILTER_PASS: Kernel = Kernel {
    name: "supernova_filter_pass",
    source: r#"
extern "C" __global__ void supernova_filter_pass(
    const float *d, const float *v, float *dn, float *vn,
    const float *w, const float *w2, long long radius,
    unsigned long long width, unsigned long long height, int along_columns)
{
    unsigned long long n = width * height;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        long long x = (long long)(i % width), y = (long long)(i / width);
        long long at = along_columns ? y : x;
        long long extent = along_columns ? (long long)height : (long long)width;
        if (at - radius < 0 || at + radius >= extent) {
            dn[i] = __int_as_float(0x7fc00000);
            vn[i] = __int_as_float(0x7fc00000);
            continue;
        }
        long long step = along_columns ? (long long)width : 1;
        float sd = 0.0f, sv = 0.0f;
        for (long long j = -radius; j <= radius; ++j) {
            long long k = (long long)i + j * step;
            sd += w[j + radius] * d[k];
            sv += w2[j + radius] * v[k];
        }
        dn[i] = sd;
        vn[i] = sv;
    }
}
"#,
};

/// The numeric part of step 7.2 for one tile, as GPU work.
#[derive(Serialize, Deserialize)]
pub struct SignificanceWork {
    a: Vec<f32>,
    b: Vec<f32>,
    width: usize,
    height: usize,
    v0: f32,
    gain: f32,
    weights: Vec<f32>,
}

impl SignificanceWork {
    /// The work for a tile that step 7.2's set-up has read.
    pub fn new(inputs: &TileInputs) -> Self {
        SignificanceWork {
            a: inputs.a.pixels().to_vec(),
            b: inputs.b.pixels().to_vec(),
            width: inputs.a.width(),
            height: inputs.a.height(),
            v0: compare::noise_floor(&inputs.a, &inputs.b),
            gain: inputs.plan.gain,
            weights: compare::matched_filter_weights(inputs.plan.psf_sigma),
        }
    }
}

/// What the GPU sends back: the filtered difference `N` and the filtered
/// variance `W`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignificanceMaps {
    width: usize,
    height: usize,
    v0: f32,
    filtered: Vec<f32>,
    filtered_variance: Vec<f32>,
}

impl SignificanceMaps {
    /// Finishes on the CPU what the kernels began: the difference image
    /// (cheap, and needed for the cosmic-ray test) and `S`.
    pub fn into_significance(self, inputs: &TileInputs) -> Significance {
        let image = |pixels| Image::from_pixels(self.width, self.height, pixels).unwrap();
        let (difference, _) =
            compare::difference_and_variance(&inputs.a, &inputs.b, self.v0, inputs.plan.gain);
        compare::significance_from_filtered(
            difference,
            image(self.filtered),
            &image(self.filtered_variance),
            self.v0,
            inputs.plan.psf_sigma,
        )
    }
}

#[typetag::serde]
impl CudaActivity for SignificanceWork {
    fn run(&mut self, device: &CudaDevice) -> Result<GpuOutput, GpuError> {
        let maps = significance_on(device, self)?;
        Ok(GpuOutput::new(maps))
    }
}

/// The gain term as the CPU applies it: none for a gain that is not a
/// positive number.
fn inverse_gain(gain: f32) -> f32 {
    if gain > 0.0 && gain.is_finite() {
        1.0 / gain
    } else {
        0.0
    }
}

/// Runs the kernels for `work` on `device`.
pub fn significance_on(
    device: &CudaDevice,
    work: &SignificanceWork,
) -> Result<SignificanceMaps, GpuError> {
    let n = work.width * work.height;
    if work.a.len() != n || work.b.len() != n {
        return Err(GpuError::InvalidArgument(format!(
            "tile of {}x{} pixels with {} and {} values",
            work.width,
            work.height,
            work.a.len(),
            work.b.len()
        )));
    }
    let difference_variance = device.function(&DIFFERENCE_VARIANCE)?;
    let filter_pass = device.function(&FILTER_PASS)?;
    let squared = compare::squared_weights(&work.weights);
    let radius = (work.weights.len() / 2) as i64;
    let inv_gain = inverse_gain(work.gain);
    gpu::guarded("supernova significance", || {
        let stream = device.stream();
        let upload = |values: &[f32]| {
            stream
                .clone_htod(values)
                .map_err(gpu::driver("cuMemcpyHtoD (significance)"))
        };
        let zeros = || {
            stream
                .alloc_zeros::<f32>(n)
                .map_err(gpu::driver("cuMemAlloc (significance)"))
        };
        let (a, b) = (upload(&work.a)?, upload(&work.b)?);
        let (w, w2) = (upload(&work.weights)?, upload(&squared)?);
        let (mut d, mut v) = (zeros()?, zeros()?);
        let (mut dh, mut vh) = (zeros()?, zeros()?);
        let (mut dn, mut vn) = (zeros()?, zeros()?);
        let count = n as u64;
        let (width, height) = (work.width as u64, work.height as u64);
        let config = gpu::launch_config(n);
        let mut launch = stream.launch_builder(&difference_variance);
        launch
            .arg(&a)
            .arg(&b)
            .arg(&mut d)
            .arg(&mut v)
            .arg(&work.v0)
            .arg(&inv_gain)
            .arg(&count);
        // SAFETY: the arguments match DIFFERENCE_VARIANCE's parameters, and
        // every buffer holds `n` floats.
        unsafe { launch.launch(config) }.map_err(|e| gpu::launched("difference_variance", e))?;
        let pass = |d_in: &CudaSlice<f32>,
                    v_in: &CudaSlice<f32>,
                    d_out: &mut CudaSlice<f32>,
                    v_out: &mut CudaSlice<f32>,
                    along_columns: i32| {
            let mut launch = stream.launch_builder(&filter_pass);
            launch
                .arg(d_in)
                .arg(v_in)
                .arg(d_out)
                .arg(v_out)
                .arg(&w)
                .arg(&w2)
                .arg(&radius)
                .arg(&width)
                .arg(&height)
                .arg(&along_columns);
            // SAFETY: as FILTER_PASS declares; the maps hold `n` floats and
            // the weights 2·radius + 1.
            unsafe { launch.launch(config) }.map_err(|e| gpu::launched("filter_pass", e))
        };
        pass(&d, &v, &mut dh, &mut vh, 0)?;
        pass(&dh, &vh, &mut dn, &mut vn, 1)?;
        stream
            .synchronize()
            .map_err(|e| gpu::launched("significance", e))?;
        let download = |buffer| {
            stream
                .clone_dtoh(buffer)
                .map_err(gpu::driver("cuMemcpyDtoH (significance)"))
        };
        Ok(SignificanceMaps {
            width: work.width,
            height: work.height,
            v0: work.v0,
            filtered: download(&dn)?,
            filtered_variance: download(&vn)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel step 7.2 launches.
    const KERNELS: [Kernel; 2] = [DIFFERENCE_VARIANCE, FILTER_PASS];

    /// Volta, Ampere and Hopper: the oldest architecture CUDA 12 builds for
    /// and the GPUs the evaluation ran on.
    const ARCHITECTURES: [(u32, u32); 3] = [(7, 0), (8, 0), (9, 0)];

    /// `EM_CUDA`, the ELF machine of NVIDIA GPU code.
    const ELF_MACHINE_CUDA: u16 = 190;

    /// Whether a missing NVRTC must fail the test instead of skipping it
    /// (`CONSTELLATION_REQUIRE_NVRTC=1`): a CI that installed NVRTC for this
    /// must not pass by skipping.
    fn nvrtc_required() -> bool {
        std::env::var_os("CONSTELLATION_REQUIRE_NVRTC").is_some_and(|value| value == "1")
    }

    /// The ELF header's `e_flags` of a CUBIN, which names its target
    /// architecture in the low byte (`0x5a` for sm_90) in the layout CUDA
    /// 12's tools use (`EI_ABIVERSION` 7); `None` in other layouts.
    fn cubin_sm(cubin: &[u8]) -> Option<u32> {
        const EI_ABIVERSION: usize = 8;
        const E_FLAGS: usize = 48; // in a 64-bit ELF header
        (cubin.get(EI_ABIVERSION) == Some(&7)).then(|| u32::from(cubin[E_FLAGS]))
    }

    #[test]
    fn step_7_2_kernels_compile_to_ptx_and_to_cubin_for_sm_70_80_90() {
        // NVRTC needs no driver or device, so this runs wherever libnvrtc is.
        for kernel in KERNELS {
            let ptx = match kernel.compile() {
                Err(GpuError::NoNvrtc) if nvrtc_required() => panic!(
                    "CONSTELLATION_REQUIRE_NVRTC=1, but {}; put NVRTC's lib folder on \
                     LD_LIBRARY_PATH (scripts/test.sh installs it)",
                    GpuError::NoNvrtc
                ),
                Err(GpuError::NoNvrtc) => {
                    eprintln!("skipped: {}", GpuError::NoNvrtc);
                    return;
                }
                result => result
                    .unwrap_or_else(|error| panic!("{}: {error}", kernel.name))
                    .to_src(),
            };
            assert!(
                ptx.contains(&format!(".entry {}", kernel.name)),
                "{}: no entry point in the PTX:\n{ptx}",
                kernel.name
            );
            let mut sizes = Vec::new();
            for (major, minor) in ARCHITECTURES {
                let sm = major * 10 + minor;
                let cubin = kernel
                    .compile_cubin((major, minor))
                    .unwrap_or_else(|error| panic!("{} for sm_{sm}: {error}", kernel.name));
                assert!(
                    cubin.len() > 64 && cubin.starts_with(b"\x7fELF"),
                    "{} for sm_{sm}: {} bytes, not an ELF file",
                    kernel.name,
                    cubin.len()
                );
                let machine = u16::from_le_bytes([cubin[18], cubin[19]]);
                assert_eq!(machine, ELF_MACHINE_CUDA, "{} for sm_{sm}", kernel.name);
                if let Some(built_for) = cubin_sm(&cubin) {
                    assert_eq!(
                        built_for, sm,
                        "{}: machine code for the wrong GPU",
                        kernel.name
                    );
                }
                let name = kernel.name.as_bytes();
                assert!(
                    cubin.windows(name.len()).any(|window| window == name),
                    "{} for sm_{sm}: the symbol is missing",
                    kernel.name
                );
                sizes.push(format!("sm_{sm} {} bytes", cubin.len()));
            }
            eprintln!(
                "compiled {}: PTX {} bytes; CUBIN {}",
                kernel.name,
                ptx.len(),
                sizes.join(", ")
            );
        }
    }
}
