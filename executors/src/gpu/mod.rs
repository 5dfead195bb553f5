//! CUDA GPUs as Constellation executors, and activities that run kernels on
//! them.
//!
//! Everything goes through the CUDA driver API and NVRTC, both loaded at run
//! time by [`cudarc`]. The crate therefore builds, and its tests run, on
//! machines with no CUDA toolkit and no driver; such a machine simply has no
//! GPU, and every entry point says so with [`GpuError::NoDriver`] instead of
//! panicking.
//!
//! - [`probe`] lists the GPUs, [`no_gpu_reason`] says why there are none.
//! - [`CudaDevice`] is one opened GPU: its context, one stream, and a cache
//!   of [`Kernel`]s compiled from CUDA C by NVRTC at first use.
//! - [`cuda_executor`] and [`cuda_executors`] turn GPUs into executors with
//!   the labels `gpu` and `gpu:<model>`, holding the device as a handle.
//! - [`CudaActivity`] is kernel-running work written as a plain struct;
//!   [`OnGpu`] runs it on a GPU executor and sends a [`GpuOutcome`] back.
//! - [`saxpy`], [`difference_image`] and [`gaussian_blur`] are shipped
//!   kernels, each with a CPU reference ([`saxpy_cpu`],
//!   [`difference_image_cpu`], [`gaussian_blur_cpu`]).
//!
//! ```
//! use constellation::collect::SingleEventCollector;
//! use constellation::Pool;
//! use executors::gpu::{self, CudaActivity, CudaDevice, GpuError, GpuOutcome, GpuOutput, OnGpu};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Axpy { a: f32, x: Vec<f32>, y: Vec<f32> }
//!
//! #[typetag::serde]
//! impl CudaActivity for Axpy {
//!     fn run(&mut self, device: &CudaDevice) -> Result<GpuOutput, GpuError> {
//!         Ok(GpuOutput::new(gpu::saxpy(device, self.a, &self.x, &self.y)?))
//!     }
//! }
//!
//! // Where there is no GPU (or no NVRTC) there is nothing to run.
//! if let Some(reason) = gpu::no_gpu_reason() {
//!     println!("no GPU: {reason}");
//!     return Ok(());
//! }
//! let (context, resources) = gpu::cuda_executor(0)?;
//! // A GPU executor runs only GPU work; the collector needs a plain one.
//! let pool = Pool::builder()
//!     .executors(1)
//!     .executor_with_resources(context, resources)
//!     .start()?;
//! let (collector, result) = SingleEventCollector::new();
//! let parent = pool.submit(collector)?;
//! pool.submit(OnGpu::new(parent, Axpy { a: 2.0, x: vec![1.0, 2.0], y: vec![10.0, 20.0] }))?;
//! let y: Vec<f32> = result.wait_one()?.take::<GpuOutcome>()?.take()?;
//! assert_eq!(y, [12.0, 24.0]);
//! pool.done()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod activity;
mod device;
mod kernels;

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use constellation::panic_message;
use constellation::{Context, ExecutorContext, Resources};
use cudarc::driver::{result, sys, DriverError};
use serde::{Deserialize, Serialize};

pub use crate::probe::GpuInfo;
pub use activity::{CudaActivity, GpuOutcome, GpuOutput, OnGpu};
/// The `cudarc` version this module is built on, for launching custom
/// kernels with [`CudaDevice::function`] without a second copy of the crate.
pub use cudarc;
pub use device::{CudaDevice, Kernel};
pub use kernels::{
    difference_image, difference_image_cpu, gaussian_blur, gaussian_blur_cpu, gaussian_weights,
    saxpy, saxpy_cpu, CONVOLVE_COLUMNS, CONVOLVE_ROWS, DIFFERENCE_IMAGE, MAX_BLUR_SIGMA, SAXPY,
};
/// Building blocks for applications' own kernels (see `apps/supernova`).
pub use kernels::{launch_config, launched};

/// The label every GPU executor offers; activities that need some GPU ask
/// for it.
pub const GPU_LABEL: &str = "gpu";

/// Why GPU work could not be done.
///
/// Serializable so that an [`OnGpu`] activity can send it to a parent on
/// another node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum GpuError {
    /// The CUDA driver library is not installed: this machine has no usable GPU.
    #[error("no CUDA driver: libcuda could not be loaded")]
    NoDriver,
    /// NVRTC is not installed, so CUDA C kernels cannot be compiled here.
    #[error("no NVRTC: libnvrtc could not be loaded, so kernels cannot be compiled")]
    NoNvrtc,
    /// A CUDA driver call failed; the text names the call and the CUDA error.
    #[error("CUDA driver error in {0}")]
    Driver(String),
    /// The asked-for device does not exist.
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoDevice {
        /// The ordinal that was asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// NVRTC rejected a kernel's source.
    #[error("NVRTC could not compile kernel `{kernel}`:\n{log}")]
    Nvrtc {
        /// The kernel's name.
        kernel: String,
        /// The compiler's log.
        log: String,
    },
    /// A kernel could not be launched, or failed while running.
    #[error("kernel launch failed: {0}")]
    Launch(String),
    /// A [`Kernel`] that cannot be loaded: a bad name, or a different source
    /// under a name already loaded on the device.
    #[error("invalid kernel `{kernel}`: {reason}")]
    InvalidKernel {
        /// The kernel's name.
        kernel: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Input slices that must have the same length do not.
    #[error("{kernel}: `{argument}` has {found} elements, but {expected} were expected")]
    LengthMismatch {
        /// The kernel or function that was called.
        kernel: String,
        /// The argument with the wrong length.
        argument: String,
        /// The length it should have had.
        expected: usize,
        /// The length it had.
        found: usize,
    },
    /// GPU work landed on an executor that holds no [`CudaDevice`].
    #[error("executor `{executor}` has no CUDA device; GPU work must run on a `cuda_executor`")]
    NotOnGpu {
        /// The executor's context, as text.
        executor: String,
    },
    /// The GPU work panicked; the message is the panic's.
    #[error("GPU work panicked: {0}")]
    Panicked(String),
    /// A [`GpuOutcome`]'s value is not of the type the receiver asked for.
    #[error("unexpected GPU result: {0}")]
    Output(String),
    /// An argument outside what a shipped kernel accepts, e.g. a negative
    /// blur width.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// The GPUs this process can use, in ordinal order.
///
/// Returns [`GpuError::NoDriver`] where the CUDA driver library is missing,
/// and an empty list where the driver is present but reports no device.
/// Only queries the driver: no context is created and no memory is used.
pub fn probe() -> Result<Vec<GpuInfo>, GpuError> {
    let count = device_count()?;
    (0..count).map(query_info).collect()
}

/// Why this process cannot run this module's kernels, or `None` if it can:
/// no driver, no device, no NVRTC, or a driver error. Tests print it when
/// they skip.
pub fn no_gpu_reason() -> Option<String> {
    match probe() {
        Err(error) => Some(error.to_string()),
        Ok(gpus) if gpus.is_empty() => {
            Some("the CUDA driver is installed but reports no devices".to_string())
        }
        Ok(_) if !nvrtc_present() => Some(GpuError::NoNvrtc.to_string()),
        Ok(_) => None,
    }
}

/// The executor label for a GPU model: `gpu:` and the device name in lower
/// case, with each run of characters other than letters, digits, `.` and `_`
/// turned into one `-`.
///
/// Names are cleaned rather than only lower-cased because context text
/// treats `,`, `|`, `>` and `=` as syntax, and a name holding one could not
/// be asked for.
///
/// ```
/// assert_eq!(executors::gpu::model_label("NVIDIA H100 80GB HBM3"), "gpu:nvidia-h100-80gb-hbm3");
/// ```
pub fn model_label(device_name: &str) -> String {
    format!("{GPU_LABEL}:{}", crate::probe::label_name(device_name))
}

/// An executor for GPU `ordinal`: its context and resources, for
/// [`PoolBuilder::executor_with_resources`](constellation::PoolBuilder::executor_with_resources).
///
/// The context serves `gpu:<model>` first and then `gpu`, so that work that
/// can only run on this model is not starved by work any GPU could take. It
/// serves nothing else, so the GPU's thread is never busy with CPU work when
/// GPU work arrives: give the pool plain executors for the rest (collectors
/// included), or push [`Context::anywhere`] onto `contexts` to let the GPU
/// executor take it when idle. The resources hold the device as an `Arc<CudaDevice>` handle, and
/// `CUDA_VISIBLE_DEVICES` naming this GPU for programs the executor starts.
pub fn cuda_executor(ordinal: usize) -> Result<(ExecutorContext, Resources), GpuError> {
    Ok(executor_for(CudaDevice::open(ordinal)?))
}

/// [`cuda_executor`] for every GPU, in ordinal order.
///
/// Returns [`GpuError::NoDriver`] without a driver and an empty list when
/// there are no devices, so no `gpu` label appears where there is no GPU.
pub fn cuda_executors() -> Result<Vec<(ExecutorContext, Resources)>, GpuError> {
    (0..device_count()?).map(cuda_executor).collect()
}

/// The executor context and resources for an already opened device; see
/// [`cuda_executor`].
pub fn executor_for(device: Arc<CudaDevice>) -> (ExecutorContext, Resources) {
    let context = ExecutorContext::new([
        Context::new(&device.info().model_label()),
        Context::new(GPU_LABEL),
    ]);
    let visible = visible_device(
        std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
        device.ordinal(),
    );
    let resources = Resources::new()
        .with_env("CUDA_VISIBLE_DEVICES", visible)
        .with_handle(device);
    (context, resources)
}

/// What child processes must see in `CUDA_VISIBLE_DEVICES` to get the GPU
/// that this process calls `ordinal`. If this process was itself limited to
/// some GPUs, its ordinals index that list, so the child gets the entry at
/// `ordinal` rather than the number.
fn visible_device(inherited: Option<&str>, ordinal: usize) -> String {
    inherited
        .and_then(|list| list.split(',').map(str::trim).nth(ordinal))
        .filter(|entry| !entry.is_empty())
        .map_or_else(|| ordinal.to_string(), str::to_string)
}

/// Whether the CUDA driver library can be loaded. Cached: the answer does
/// not change while the process runs, and each check opens the library.
fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: this only tries to dlopen libcuda under its usual names; the
    // library's initializers are the driver's own.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Whether NVRTC can be loaded; cached like [`driver_present`].
fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: as for the driver, this only tries to dlopen libnvrtc.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// Initializes the driver and counts devices. cudarc panics when it cannot
/// load libcuda, so its presence is checked first; a driver that finds no
/// device fails `cuInit`, which here means zero devices.
fn device_count() -> Result<usize, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    guarded("cuInit", || match result::init() {
        Ok(()) => {
            let count = result::device::get_count().map_err(driver("cuDeviceGetCount"))?;
            Ok(usize::try_from(count).unwrap_or(0))
        }
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        Err(error) => Err(driver("cuInit")(error)),
    })
}

/// Asks the driver about device `ordinal`; needs [`device_count`] first.
fn query_info(ordinal: usize) -> Result<GpuInfo, GpuError> {
    let no_device = || GpuError::NoDevice {
        ordinal,
        count: device_count().unwrap_or(0),
    };
    let index = i32::try_from(ordinal).map_err(|_| no_device())?;
    guarded("cuDeviceGet", || {
        let device = result::device::get(index).map_err(driver("cuDeviceGet"))?;
        let name = result::device::get_name(device).map_err(driver("cuDeviceGetName"))?;
        // SAFETY: `device` was just returned by cuDeviceGet.
        let memory =
            unsafe { result::device::total_mem(device) }.map_err(driver("cuDeviceTotalMem"))?;
        let attribute = |attribute| {
            // SAFETY: as above.
            unsafe { result::device::get_attribute(device, attribute) }
                .map_err(driver("cuDeviceGetAttribute"))
                .map(|value| u32::try_from(value).unwrap_or(0))
        };
        let major =
            attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor =
            attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok(GpuInfo {
            ordinal,
            name,
            memory_bytes: memory as u64,
            compute_capability: (major, minor),
        })
    })
}

/// Turns a driver error into [`GpuError::Driver`] naming `call`, with the
/// CUDA error's name and description.
pub fn driver(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |error| GpuError::Driver(format!("{call}: {}", describe(error)))
}

/// `CUDA_ERROR_X (description)`, or the numeric code if the driver cannot
/// name it.
fn describe(error: DriverError) -> String {
    let text = |s: Result<&CStr, DriverError>| s.ok().map(|s| s.to_string_lossy().into_owned());
    match (text(error.error_name()), text(error.error_string())) {
        (Some(name), Some(description)) => format!("{name} ({description})"),
        (Some(name), None) => name,
        _ => format!("CUresult {}", error.0 as u32),
    }
}

/// Runs cudarc code, turning a panic into a [`GpuError::Driver`] that names
/// `call`. cudarc panics instead of returning an error when, for example, an
/// older driver lacks a symbol it loads; a GPU problem must not take the
/// executor thread with it.
pub fn guarded<T>(
    call: &'static str,
    work: impl FnOnce() -> Result<T, GpuError>,
) -> Result<T, GpuError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        Err(GpuError::Driver(format!(
            "{call}: cudarc panicked: {}",
            panic_message(&*panic)
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reports_no_driver_or_a_list_without_panicking() {
        match probe() {
            Ok(gpus) => {
                for (ordinal, gpu) in gpus.iter().enumerate() {
                    assert_eq!(gpu.ordinal, ordinal);
                    assert!(gpu.memory_bytes > 0, "{gpu:?}");
                }
            }
            Err(error) => {
                assert!(!driver_present() || matches!(error, GpuError::Driver(_)));
                assert_eq!(no_gpu_reason(), Some(error.to_string()));
            }
        }
    }

    #[test]
    fn no_driver_is_an_error_everywhere() {
        if driver_present() {
            return;
        }
        assert_eq!(probe(), Err(GpuError::NoDriver));
        assert_eq!(cuda_executors().err(), Some(GpuError::NoDriver));
        assert_eq!(cuda_executor(0).err(), Some(GpuError::NoDriver));
        assert_eq!(CudaDevice::open(0).err(), Some(GpuError::NoDriver));
        assert_eq!(
            GpuError::NoDriver.to_string(),
            "no CUDA driver: libcuda could not be loaded"
        );
    }

    #[test]
    fn model_labels_are_lower_case_and_parse_as_one_context() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", "gpu:nvidia-h100-80gb-hbm3"),
            ("Tesla V100-SXM2-16GB", "gpu:tesla-v100-sxm2-16gb"),
            ("NVIDIA GeForce RTX 4090", "gpu:nvidia-geforce-rtx-4090"),
            ("  Odd, name=1 | x > y  ", "gpu:odd-name-1-x-y"),
            ("", "gpu:unknown"),
        ];
        for (name, label) in cases {
            assert_eq!(model_label(name), label);
            let parsed: Context = label.parse().expect("a model label parses");
            assert_eq!(parsed, Context::new(label));
        }
    }

    #[test]
    fn child_processes_see_the_same_gpu() {
        assert_eq!(visible_device(None, 1), "1");
        assert_eq!(visible_device(Some("2,3"), 1), "3");
        assert_eq!(visible_device(Some("GPU-abc, GPU-def"), 0), "GPU-abc");
        assert_eq!(visible_device(Some("2"), 4), "4");
        assert_eq!(visible_device(Some(""), 0), "0");
    }

    #[test]
    fn panics_inside_cudarc_become_errors() {
        let result: Result<(), GpuError> = guarded("cuTest", || panic!("Missing symbol cuTest"));
        assert_eq!(
            result,
            Err(GpuError::Driver(
                "cuTest: cudarc panicked: Missing symbol cuTest".into()
            ))
        );
    }
}
