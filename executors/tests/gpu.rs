//! The CUDA executor and kernels.
//!
//! Tests that need a GPU print `skipped: <reason>` and return where there is
//! none (no driver, no device, or no NVRTC); the rest run everywhere.
//! `shipped_kernels_compile_with_nvrtc` needs only NVRTC, and fails instead
//! of skipping under `CONSTELLATION_REQUIRE_NVRTC=1`.
#![cfg(feature = "cuda")]

use std::sync::Arc;
use std::time::Duration;

use constellation::collect::SingleEventCollector;
use constellation::{Activity, Context, ExecutorContext, Payload, Pool};
use executors::gpu::{
    self, CudaActivity, CudaDevice, GpuError, GpuOutcome, GpuOutput, Kernel, OnGpu,
};
use serde::{Deserialize, Serialize};

/// How long a pool test waits for its one event before failing instead of
/// hanging.
const WAIT: Duration = Duration::from_secs(120);

/// The first GPU, or `None` after printing why the test is skipped.
fn gpu_or_skip() -> anyhow::Result<Option<Arc<CudaDevice>>> {
    if let Some(reason) = gpu::no_gpu_reason() {
        eprintln!("skipped: {reason}");
        return Ok(None);
    }
    Ok(Some(CudaDevice::open(0)?))
}

/// Whether a missing NVRTC must fail the tests that only compile instead
/// of skipping them (`CONSTELLATION_REQUIRE_NVRTC=1`): a CI that installed
/// NVRTC must not pass by skipping. Tests that need a driver still skip.
fn nvrtc_required() -> bool {
    std::env::var_os("CONSTELLATION_REQUIRE_NVRTC").is_some_and(|value| value == "1")
}

/// Deterministic values in `[lo, hi)`: an xorshift generator, so runs are
/// reproducible without a `rand` dependency.
fn values(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut state = seed.max(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            lo + (hi - lo) * unit
        })
        .collect()
}

/// Asserts `gpu` and `cpu` agree element by element within `tolerance`,
/// relative to the value's size (and absolute near 0). The GPU may fuse
/// multiply and add, so exact equality is not expected.
fn assert_close(gpu: &[f32], cpu: &[f32], tolerance: f32) {
    assert_eq!(gpu.len(), cpu.len());
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        let allowed = tolerance * c.abs().max(1.0);
        assert!((g - c).abs() <= allowed, "element {i}: GPU {g} vs CPU {c}");
    }
}

#[test]
fn probe_never_panics() {
    match gpu::probe() {
        Ok(gpus) if gpus.is_empty() => eprintln!("no GPU: the driver reports no devices"),
        Ok(gpus) => {
            for (ordinal, info) in gpus.iter().enumerate() {
                eprintln!("GPU {ordinal}: {info:?} ({})", info.model_label());
                assert_eq!(info.ordinal, ordinal);
                assert!(!info.name.is_empty() && info.memory_bytes > 0);
                assert!(info.compute_capability.0 >= 3, "{info:?}");
            }
        }
        Err(error) => {
            eprintln!("no GPU: {error}");
            assert!(
                matches!(error, GpuError::NoDriver | GpuError::Driver(_)),
                "{error:?}"
            );
            assert!(gpu::no_gpu_reason().is_some());
        }
    }
}

#[test]
fn cuda_executors_exist_only_where_there_are_gpus() -> anyhow::Result<()> {
    let gpus = gpu::probe().unwrap_or_default();
    match gpu::cuda_executors() {
        Err(error) => assert!(gpus.is_empty(), "GPUs {gpus:?} but {error}"),
        Ok(executors) => {
            assert_eq!(executors.len(), gpus.len());
            for ((context, resources), info) in executors.iter().zip(&gpus) {
                let offered: Vec<String> = context.contexts.iter().map(|c| c.to_string()).collect();
                assert_eq!(offered, [info.model_label(), "gpu".to_string()]);
                let device = resources
                    .handle::<Arc<CudaDevice>>()
                    .expect("a GPU executor holds its device");
                assert_eq!(device.info(), info);
                let env: Vec<_> = resources.env().collect();
                assert_eq!(env.len(), 1);
                assert_eq!(env[0].0, "CUDA_VISIBLE_DEVICES");
            }
        }
    }
    if gpus.is_empty() {
        eprintln!(
            "skipped: GPU executor labels ({})",
            gpu::no_gpu_reason().unwrap_or_default()
        );
    }
    Ok(())
}

#[test]
fn saxpy_matches_cpu_reference() -> anyhow::Result<()> {
    let Some(device) = gpu_or_skip()? else {
        return Ok(());
    };
    let n = 1 << 20;
    let (x, y) = (values(1, n, -1.0, 1.0), values(2, n, -1.0, 1.0));
    let on_gpu = gpu::saxpy(&device, 2.5, &x, &y)?;
    assert_close(&on_gpu, &gpu::saxpy_cpu(2.5, &x, &y)?, 1e-5);
    // Lengths that are not a multiple of the block size, and empty input.
    for n in [1, 255, 257, 100_003] {
        let got = gpu::saxpy(&device, -0.5, &x[..n], &y[..n])?;
        assert_close(&got, &gpu::saxpy_cpu(-0.5, &x[..n], &y[..n])?, 1e-5);
    }
    assert_eq!(gpu::saxpy(&device, 1.0, &[], &[])?, Vec::<f32>::new());
    assert!(matches!(
        gpu::saxpy(&device, 1.0, &x[..3], &y[..2]),
        Err(GpuError::LengthMismatch { .. })
    ));
    Ok(())
}

#[test]
fn difference_image_matches_cpu_reference() -> anyhow::Result<()> {
    let Some(device) = gpu_or_skip()? else {
        return Ok(());
    };
    let n = 1 << 20;
    let a = values(3, n, 0.0, 1000.0);
    let b = values(4, n, 0.0, 1000.0);
    let mut sigma_a = values(5, n, 0.1, 30.0);
    let mut sigma_b = values(6, n, 0.1, 30.0);
    // Some pixels without noise, where the significance is defined as 0.
    for i in (0..n).step_by(97) {
        sigma_a[i] = 0.0;
        sigma_b[i] = 0.0;
    }
    let on_gpu = gpu::difference_image(&device, &a, &b, &sigma_a, &sigma_b)?;
    let on_cpu = gpu::difference_image_cpu(&a, &b, &sigma_a, &sigma_b)?;
    assert_close(&on_gpu, &on_cpu, 1e-5);
    assert!((0..n).step_by(97).all(|i| on_gpu[i] == 0.0));
    assert!(matches!(
        gpu::difference_image(&device, &a, &b, &sigma_a, &sigma_b[1..]),
        Err(GpuError::LengthMismatch { .. })
    ));
    Ok(())
}

#[test]
fn gaussian_blur_matches_cpu_reference() -> anyhow::Result<()> {
    let Some(device) = gpu_or_skip()? else {
        return Ok(());
    };
    let (width, height) = (1024, 768);
    let image = values(9, width * height, 0.0, 1000.0);
    let on_gpu = gpu::gaussian_blur(&device, &image, width, height, 2.5)?;
    assert_close(
        &on_gpu,
        &gpu::gaussian_blur_cpu(&image, width, height, 2.5)?,
        1e-5,
    );
    // Single rows and columns exercise the edge clamping; sigma 0 copies.
    for (width, height, sigma) in [(1, 300, 4.0), (300, 1, 4.0), (7, 5, 0.0), (3, 2, 10.0)] {
        let image = &image[..width * height];
        let got = gpu::gaussian_blur(&device, image, width, height, sigma)?;
        let expected = gpu::gaussian_blur_cpu(image, width, height, sigma)?;
        assert_close(&got, &expected, 1e-5);
    }
    assert!(matches!(
        gpu::gaussian_blur(&device, &image[..10], 4, 4, 1.0),
        Err(GpuError::LengthMismatch { .. })
    ));
    Ok(())
}

#[test]
fn shipped_kernels_compile_with_nvrtc() -> anyhow::Result<()> {
    // NVRTC needs no driver or device, so this runs wherever libnvrtc is.
    let shipped = [
        gpu::SAXPY,
        gpu::DIFFERENCE_IMAGE,
        gpu::CONVOLVE_ROWS,
        gpu::CONVOLVE_COLUMNS,
    ];
    for kernel in shipped {
        match kernel.compile() {
            Err(GpuError::NoNvrtc) if nvrtc_required() => {
                anyhow::bail!(
                    "CONSTELLATION_REQUIRE_NVRTC=1, but {}; put NVRTC's lib folder on \
                     LD_LIBRARY_PATH (scripts/test.sh installs it)",
                    GpuError::NoNvrtc
                )
            }
            Err(GpuError::NoNvrtc) => {
                eprintln!("skipped: {}", GpuError::NoNvrtc);
                return Ok(());
            }
            result => {
                let ptx = result?.to_src();
                assert!(ptx.contains(kernel.name), "{ptx}");
            }
        }
    }
    // Machine code for an H100 (compute capability 9.0) is an ELF file.
    for kernel in shipped {
        let cubin = kernel.compile_cubin((9, 0))?;
        assert!(cubin.starts_with(b"\x7fELF"), "{}", kernel.name);
        // A CI log that shows this line compiled for real.
        eprintln!("compiled {}: PTX and sm_90 CUBIN", kernel.name);
    }
    assert!(matches!(
        gpu::SAXPY.compile_cubin((1, 0)),
        Err(GpuError::Nvrtc { .. })
    ));
    let broken = Kernel {
        name: "constellation_test_broken",
        source: r#"extern "C" __global__ void constellation_test_broken() { not_cuda; }"#,
    };
    assert!(matches!(
        broken.compile_cubin((9, 0)),
        Err(GpuError::Nvrtc { .. })
    ));
    match broken.compile() {
        Err(GpuError::Nvrtc { kernel, log }) => {
            assert_eq!(kernel, broken.name);
            assert!(log.contains("not_cuda"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    Ok(())
}

/// A kernel only this test uses, so other tests running at the same time on
/// the same device cannot have compiled it already.
const ONCE: Kernel = Kernel {
    name: "constellation_test_compiled_once",
    source: r#"extern "C" __global__ void constellation_test_compiled_once(float *out) { out[0] = 1.0f; }"#,
};

#[test]
fn kernel_is_compiled_once_per_device() -> anyhow::Result<()> {
    let Some(device) = gpu_or_skip()? else {
        return Ok(());
    };
    assert_eq!(device.compilations(ONCE.name), 0);
    // Racing first uses wait for one compilation.
    let functions = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| device.function(&ONCE).map(|f| f.cu_function() as usize)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    assert!(functions.windows(2).all(|w| w[0] == w[1]), "{functions:?}");
    device.function(&ONCE)?;
    assert_eq!(device.compilations(ONCE.name), 1);
    // The same ordinal opens the same device, with the same cache.
    assert!(Arc::ptr_eq(&device, &CudaDevice::open(0)?));

    let clash = Kernel {
        source: r#"extern "C" __global__ void constellation_test_compiled_once(float *out) { }"#,
        ..ONCE
    };
    assert!(matches!(
        device.function(&clash),
        Err(GpuError::InvalidKernel { .. })
    ));
    let broken = Kernel {
        name: "constellation_test_broken",
        source: r#"extern "C" __global__ void constellation_test_broken() { not_cuda; }"#,
    };
    match device.function(&broken) {
        Err(GpuError::Nvrtc { kernel, log }) => {
            assert_eq!(kernel, broken.name);
            assert!(log.contains("not_cuda"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert_eq!(device.compilations(broken.name), 0);
    Ok(())
}

/// GPU work as users write it: a plain struct.
#[derive(Serialize, Deserialize)]
struct Axpy {
    a: f32,
    x: Vec<f32>,
    y: Vec<f32>,
}

#[typetag::serde]
impl CudaActivity for Axpy {
    fn run(&mut self, device: &CudaDevice) -> Result<GpuOutput, GpuError> {
        Ok(GpuOutput::new(gpu::saxpy(
            device, self.a, &self.x, &self.y,
        )?))
    }
}

/// GPU work with a bug.
#[derive(Serialize, Deserialize)]
struct Panics;

#[typetag::serde]
impl CudaActivity for Panics {
    fn run(&mut self, _device: &CudaDevice) -> Result<GpuOutput, GpuError> {
        panic!("bug in GPU work")
    }
}

/// Runs `work` as an [`OnGpu`] in a pool of the given executor, plus one
/// plain executor for the collector, and returns the outcome its parent
/// received.
fn run_in_pool(
    executor: (ExecutorContext, constellation::Resources),
    work: impl CudaActivity,
) -> anyhow::Result<GpuOutcome> {
    let (context, resources) = executor;
    let pool = Pool::builder()
        .executors(1)
        .executor_with_resources(context, resources)
        .start()?;
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector)?;
    pool.submit(OnGpu::new(parent, work))?;
    let outcome = results.wait_timeout(WAIT)?.remove(0).take::<GpuOutcome>()?;
    pool.done()?;
    Ok(outcome)
}

#[test]
fn cuda_activity_runs_on_a_gpu_executor_in_a_pool() -> anyhow::Result<()> {
    if let Some(reason) = gpu::no_gpu_reason() {
        eprintln!("skipped: {reason}");
        return Ok(());
    }
    let (x, y) = (values(7, 10_000, -1.0, 1.0), values(8, 10_000, -1.0, 1.0));
    let work = Axpy {
        a: 3.0,
        x: x.clone(),
        y: y.clone(),
    };
    let on_gpu: Vec<f32> = run_in_pool(gpu::cuda_executor(0)?, work)?.take()?;
    assert_close(&on_gpu, &gpu::saxpy_cpu(3.0, &x, &y)?, 1e-5);

    let outcome = run_in_pool(gpu::cuda_executor(0)?, Panics)?;
    assert!(
        matches!(&outcome, GpuOutcome::Failed(GpuError::Panicked(m)) if m.contains("bug in GPU work")),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn gpu_work_on_an_executor_without_a_device_fails_with_an_event() -> anyhow::Result<()> {
    // Labelled `gpu` but holding no device: a misconfiguration to report,
    // not a reason to hang or panic.
    let executor = (
        ExecutorContext::new([Context::new("gpu")]),
        constellation::Resources::new(),
    );
    let outcome = run_in_pool(
        executor,
        Axpy {
            a: 1.0,
            x: vec![1.0],
            y: vec![1.0],
        },
    )?;
    match outcome {
        GpuOutcome::Failed(GpuError::NotOnGpu { executor }) => assert_eq!(executor, "gpu"),
        other => panic!("expected NotOnGpu, got {other:?}"),
    }
    Ok(())
}

#[test]
fn gpu_work_is_refused_where_no_executor_has_a_gpu() -> anyhow::Result<()> {
    let pool = Pool::builder().executors(1).start()?;
    let (collector, _results) = SingleEventCollector::new();
    let parent = pool.submit(collector)?;
    let work = Axpy {
        a: 1.0,
        x: vec![],
        y: vec![],
    };
    assert!(pool.submit(OnGpu::new(parent, work)).is_err());
    drop(pool);
    Ok(())
}

#[test]
fn gpu_work_and_outcomes_survive_the_wire() -> anyhow::Result<()> {
    let activity: Box<dyn Activity> = Box::new(
        OnGpu::new(
            constellation::ActivityId::in_slot(constellation::NodeId::random(), 0, 0),
            Axpy {
                a: 1.0,
                x: vec![1.0],
                y: vec![2.0],
            },
        )
        .with_context("gpu:nvidia-h100-80gb-hbm3".parse()?),
    );
    let bytes = Payload::new(activity).encode()?;
    let back = Payload::from_encoded(bytes).take::<Box<dyn Activity>>()?;
    assert_eq!(back.context().to_string(), "gpu:nvidia-h100-80gb-hbm3");

    let done = GpuOutcome::Done(GpuOutput::new(vec![1.5_f32, -2.0]));
    let bytes = Payload::new(done).encode()?;
    let back = Payload::from_encoded(bytes).take::<GpuOutcome>()?;
    assert_eq!(back.take::<Vec<f32>>()?, [1.5, -2.0]);

    let failed = GpuOutcome::Failed(GpuError::NoDriver);
    let bytes = Payload::new(failed).encode()?;
    let back = Payload::from_encoded(bytes).take::<GpuOutcome>()?;
    assert_eq!(back.take::<Vec<f32>>(), Err(GpuError::NoDriver));

    let wrong = GpuOutcome::Done(GpuOutput::new(7_u64)).take::<String>();
    assert!(matches!(wrong, Err(GpuError::Output(_))), "{wrong:?}");
    Ok(())
}
