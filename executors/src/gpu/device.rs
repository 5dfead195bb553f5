//! One opened GPU and its compiled kernels.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::{device_count, driver, guarded, nvrtc_present, query_info, GpuError, GpuInfo};

/// A CUDA kernel as source: compiled by NVRTC on first use on each device.
///
/// `name` is the `extern "C" __global__` function in `source`, and also the
/// key of the device's kernel cache, so two different kernels must not share
/// a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// The kernel function's name, as declared with `extern "C"`.
    pub name: &'static str,
    /// CUDA C source defining the kernel.
    pub source: &'static str,
}

impl Kernel {
    /// Checks what NVRTC and the driver would otherwise reject with a panic
    /// inside cudarc: an empty name, or a NUL byte in name or source.
    pub fn validate(&self) -> Result<(), GpuError> {
        let invalid = |reason: &str| GpuError::InvalidKernel {
            kernel: self.name.to_string(),
            reason: reason.to_string(),
        };
        if self.name.is_empty() {
            return Err(invalid("the name is empty"));
        }
        if self.name.contains('\0') {
            return Err(invalid("the name contains a NUL byte"));
        }
        if self.source.contains('\0') {
            return Err(invalid("the source contains a NUL byte"));
        }
        Ok(())
    }

    /// Compiles the source to PTX with NVRTC, for any GPU: the driver
    /// finishes the job when it loads the PTX. Needs NVRTC but no driver or
    /// device, so CI can check kernel sources.
    pub fn compile(&self) -> Result<Ptx, GpuError> {
        self.validate()?;
        if !nvrtc_present() {
            return Err(GpuError::NoNvrtc);
        }
        let options = CompileOptions {
            name: Some(format!("{}.cu", self.name)),
            ..CompileOptions::default()
        };
        guarded("nvrtcCompileProgram", || {
            cudarc::nvrtc::compile_ptx_with_opts(self.source, options)
                .map_err(|error| nvrtc_error(self, error))
        })
    }

    /// Compiles the source with NVRTC to machine code (a CUBIN) for GPUs of
    /// compute capability `(major, minor)`. Needs NVRTC but no driver.
    ///
    /// [`CudaDevice::function`] prefers this to [`compile`](Self::compile):
    /// the driver can only load PTX from a CUDA version no newer than its
    /// own, while machine code from a newer NVRTC of the same major version
    /// still loads.
    pub fn compile_cubin(&self, compute_capability: (u32, u32)) -> Result<Vec<u8>, GpuError> {
        self.validate()?;
        if !nvrtc_present() {
            return Err(GpuError::NoNvrtc);
        }
        let (major, minor) = compute_capability;
        let arch = format!("--gpu-architecture=sm_{major}{minor}");
        guarded("nvrtcCompileProgram", || self.nvrtc_cubin(&arch))
    }

    fn nvrtc_cubin(&self, arch: &str) -> Result<Vec<u8>, GpuError> {
        use cudarc::nvrtc::{result, sys};

        /// Destroys the program however compilation ends.
        struct Program(sys::nvrtcProgram);
        impl Drop for Program {
            fn drop(&mut self) {
                // SAFETY: the program was created and is destroyed once, here.
                // A failure to free it leaves nothing to do.
                let _ = unsafe { result::destroy_program(self.0) };
            }
        }

        let failed = |call: &str, error: result::NvrtcError| GpuError::Nvrtc {
            kernel: self.name.to_string(),
            log: format!("{call}: {error:?}"),
        };
        // `validate` ruled out NUL bytes, so neither conversion can fail.
        let source = CString::new(self.source).map_err(|_| self.nul_error())?;
        let file = CString::new(format!("{}.cu", self.name)).map_err(|_| self.nul_error())?;
        let program = Program(
            result::create_program(&source, Some(&file))
                .map_err(|error| failed("nvrtcCreateProgram", error))?,
        );
        // SAFETY: `program` is live until the end of this function, and so
        // are `source` and `file`, which it may point into.
        if let Err(error) = unsafe { result::compile_program(program.0, &[arch]) } {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(program.0) }
                .map(|log| c_text(&log))
                .unwrap_or_default();
            return Err(GpuError::Nvrtc {
                kernel: self.name.to_string(),
                log: if log.trim().is_empty() {
                    format!("nvrtcCompileProgram ({arch}): {error:?}")
                } else {
                    log
                },
            });
        }
        let mut size = 0usize;
        // SAFETY: as above; `size` is a valid place for the result.
        unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }
            .result()
            .map_err(|error| failed("nvrtcGetCUBINSize", error))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: as above; `cubin` has the `size` bytes NVRTC asked for.
        unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) }
            .result()
            .map_err(|error| failed("nvrtcGetCUBIN", error))?;
        Ok(cubin)
    }

    fn nul_error(&self) -> GpuError {
        GpuError::InvalidKernel {
            kernel: self.name.to_string(),
            reason: "contains a NUL byte".to_string(),
        }
    }
}

/// NUL-terminated text from NVRTC, as a `String`.
fn c_text(bytes: &[c_char]) -> String {
    let bytes: Vec<u8> = bytes
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One GPU, opened: its CUDA context, the stream its work runs on, and the
/// kernels compiled for it so far.
///
/// Executors hold it as an `Arc<CudaDevice>` handle (see
/// [`cuda_executor`](super::cuda_executor)); activities get it through
/// [`CudaActivity::run`](super::CudaActivity::run). [`open`](Self::open)
/// returns the same handle for an ordinal as long as one is alive, so each
/// kernel is compiled once per device, not once per caller.
pub struct CudaDevice {
    info: GpuInfo,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Locked across a compilation, so that callers racing to a kernel's
    /// first use wait for one compilation instead of each running NVRTC.
    kernels: Mutex<KernelCache>,
}

#[derive(Default)]
struct KernelCache {
    loaded: HashMap<&'static str, (Kernel, CudaFunction)>,
    compilations: HashMap<&'static str, u32>,
}

/// The open devices by ordinal. Weak, so a device is released once nothing
/// uses it.
fn open_devices() -> MutexGuard<'static, HashMap<usize, Weak<CudaDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Weak<CudaDevice>>>> = OnceLock::new();
    lock(DEVICES.get_or_init(Default::default))
}

/// Locks a mutex, ignoring poisoning: the maps it guards are consistent
/// after every statement, so a panic elsewhere leaves nothing half done.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CudaDevice {
    /// Opens GPU `ordinal`, or returns the handle already open for it.
    ///
    /// Retains the device's primary context, which the driver shares with
    /// any other user of the GPU in this process, and creates one stream.
    pub fn open(ordinal: usize) -> Result<Arc<CudaDevice>, GpuError> {
        let mut devices = open_devices();
        if let Some(device) = devices.get(&ordinal).and_then(Weak::upgrade) {
            return Ok(device);
        }
        let count = device_count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        let info = query_info(ordinal)?;
        let (context, stream) = guarded("cuDevicePrimaryCtxRetain", || {
            let context = CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))?;
            let stream = context.new_stream().map_err(driver("cuStreamCreate"))?;
            Ok((context, stream))
        })?;
        let device = Arc::new(CudaDevice {
            info,
            context,
            stream,
            kernels: Mutex::default(),
        });
        devices.retain(|_, device| device.strong_count() > 0);
        devices.insert(ordinal, Arc::downgrade(&device));
        Ok(device)
    }

    /// The driver's ordinal for this GPU.
    pub fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// What the driver said about this GPU when it was opened.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The CUDA context, for allocations and modules of your own.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The stream this device's work is queued on. The shipped kernels use
    /// it and wait for it before returning.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The loaded function for `kernel`, compiling it with NVRTC and loading
    /// it into this device's context on first use.
    ///
    /// Fails with [`GpuError::NoNvrtc`] where NVRTC is not installed,
    /// [`GpuError::Nvrtc`] with the compiler log for bad source, and
    /// [`GpuError::InvalidKernel`] for a name already loaded with a
    /// different source.
    pub fn function(&self, kernel: &Kernel) -> Result<CudaFunction, GpuError> {
        kernel.validate()?;
        let mut cache = lock(&self.kernels);
        if let Some((loaded, function)) = cache.loaded.get(kernel.name) {
            if loaded.source != kernel.source {
                return Err(GpuError::InvalidKernel {
                    kernel: kernel.name.to_string(),
                    reason: "another kernel with this name but a different source is \
                             already loaded on this device"
                        .to_string(),
                });
            }
            return Ok(function.clone());
        }
        let function = self.load(kernel)?;
        *cache.compilations.entry(kernel.name).or_default() += 1;
        cache
            .loaded
            .insert(kernel.name, (*kernel, function.clone()));
        Ok(function)
    }

    /// How many times a kernel of this name was compiled for this device:
    /// 0 before its first use and 1 after, however many callers used it.
    pub fn compilations(&self, kernel_name: &str) -> u32 {
        lock(&self.kernels)
            .compilations
            .get(kernel_name)
            .copied()
            .unwrap_or(0)
    }

    /// Compiles `kernel` and loads it into this device's context: machine
    /// code for this GPU if NVRTC knows its architecture and the driver
    /// takes it, else PTX for the driver to compile.
    fn load(&self, kernel: &Kernel) -> Result<CudaFunction, GpuError> {
        tracing::debug!(
            kernel = kernel.name,
            device = self.ordinal(),
            "compiling CUDA kernel"
        );
        let cubin = kernel
            .compile_cubin(self.info.compute_capability)
            .and_then(|cubin| self.load_module(kernel, Ptx::from_binary(cubin)));
        match cubin {
            Ok(function) => Ok(function),
            Err(GpuError::NoNvrtc) => Err(GpuError::NoNvrtc),
            Err(cubin_error) => {
                tracing::debug!(kernel = kernel.name, %cubin_error, "falling back to PTX");
                let ptx = kernel.compile()?;
                self.load_module(kernel, ptx).map_err(|error| match error {
                    GpuError::Driver(text) => GpuError::Driver(format!(
                        "{text}; machine code for this GPU failed too: {cubin_error}"
                    )),
                    other => other,
                })
            }
        }
    }

    fn load_module(&self, kernel: &Kernel, code: Ptx) -> Result<CudaFunction, GpuError> {
        guarded("cuModuleLoadData", || {
            let module = self
                .context
                .load_module(code)
                .map_err(driver("cuModuleLoadData"))?;
            module
                .load_function(kernel.name)
                .map_err(driver("cuModuleGetFunction"))
        })
    }
}

fn nvrtc_error(kernel: &Kernel, error: CompileError) -> GpuError {
    let log = match error {
        CompileError::CompileError { log, nvrtc, .. } => {
            let log = log.to_string_lossy().into_owned();
            if log.trim().is_empty() {
                format!("nvrtcCompileProgram: {nvrtc:?}")
            } else {
                log
            }
        }
        other => format!("{other:?}"),
    };
    GpuError::Nvrtc {
        kernel: kernel.name.to_string(),
        log,
    }
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kernels: Vec<&str> = lock(&self.kernels).loaded.keys().copied().collect();
        kernels.sort_unstable();
        f.debug_struct("CudaDevice")
            .field("info", &self.info)
            .field("kernels", &kernels)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_with_nul_bytes_or_no_name_are_rejected() {
        let ok = Kernel {
            name: "k",
            source: "extern \"C\" __global__ void k() {}",
        };
        assert_eq!(ok.validate(), Ok(()));
        for bad in [
            Kernel { name: "", ..ok },
            Kernel { name: "k\0", ..ok },
            Kernel {
                source: "extern \"C\" __global__ void k() {}\0",
                ..ok
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(GpuError::InvalidKernel { .. })),
                "{bad:?}"
            );
        }
    }
}
