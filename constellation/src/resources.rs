//! What an executor was given besides its context: environment variables for
//! the programs it starts, and typed handles such as a GPU context.
//!
//! Batch systems tell a job what it got through the environment
//! (`CUDA_VISIBLE_DEVICES`, `SLURM_CPUS_ON_NODE`); executors do the same for
//! the activities they run. Handles that cannot be expressed as text — an
//! open device, a channel to an MPI communicator — are kept by type, one
//! value per type, and activities look them up with
//! [`ActivityCx::resource`](crate::ActivityCx::resource).

use std::any::{type_name, Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;

use rustc_hash::FxHashMap;

/// The resources of one executor. Built once when the pool starts, then only read.
#[derive(Default)]
pub struct Resources {
    env: BTreeMap<String, String>,
    handles: FxHashMap<TypeId, (&'static str, Box<dyn Any + Send + Sync>)>,
}

impl Resources {
    /// No environment and no handles: what a plain CPU executor has.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an environment variable that child processes of this executor see.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Adds a handle, replacing an earlier one of the same type.
    pub fn with_handle<T: Any + Send + Sync>(mut self, handle: T) -> Self {
        self.handles
            .insert(TypeId::of::<T>(), (type_name::<T>(), Box::new(handle)));
        self
    }

    /// The environment variables, sorted by name.
    pub fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The handle of type `T`, if this executor has one.
    pub fn handle<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.handles
            .get(&TypeId::of::<T>())
            .and_then(|(_, handle)| handle.downcast_ref())
    }

    /// Whether the executor has neither environment nor handles.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.handles.is_empty()
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut handles: Vec<&str> = self.handles.values().map(|(name, _)| *name).collect();
        handles.sort_unstable();
        f.debug_struct("Resources")
            .field("env", &self.env)
            .field("handles", &handles)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_found_by_type() {
        struct Device(u32);
        let resources = Resources::new()
            .with_env("CUDA_VISIBLE_DEVICES", "1")
            .with_handle(Device(1))
            .with_handle(7_u64);
        assert_eq!(resources.handle::<Device>().map(|d| d.0), Some(1));
        assert_eq!(resources.handle::<u64>(), Some(&7));
        assert!(resources.handle::<String>().is_none());
        assert_eq!(
            resources.env().collect::<Vec<_>>(),
            [("CUDA_VISIBLE_DEVICES", "1")]
        );
        assert!(format!("{resources:?}").contains("Device"));
    }
}
