//! Activities that wrap real work, so users run their existing codes without
//! writing Rust for each one.
//!
//! - [`shell`]: a command or script as an activity, with captured output,
//!   timeouts that kill the whole process group, and retries.
//! - [`probe`]: what the machine has (cores, memory, GPUs, host, site) and the
//!   default executor labels derived from it.
//! - `gpu` (feature `cuda`, on by default): CUDA devices through the driver
//!   API, loaded at run time, and activities that run NVRTC-compiled kernels.
//! - `mpi` (feature `mpi`): an executor that spans an MPI communicator, and
//!   activities that launch external MPI programs.

#![warn(unreachable_pub)]

#[cfg(feature = "cuda")]
pub mod gpu;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod probe;
pub mod shell;
