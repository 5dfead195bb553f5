//! GPU work as activities: [`CudaActivity`] is the work, [`OnGpu`] the
//! activity that runs it on a GPU executor and reports a [`GpuOutcome`].

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use constellation::PayloadValue;
use constellation::{
    Activity, ActivityCx, ActivityId, Context, ContextList, Event, Payload, PayloadError, Step,
};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{self, Serializer};
use serde::{Deserialize, Serialize};

use constellation::panic_message;

use super::{CudaDevice, GpuError, GPU_LABEL};

/// Work that runs kernels on one GPU, written as a plain serde struct.
///
/// Register each implementation with `#[typetag::serde]`, as for
/// [`Activity`], so that it can travel to the node whose GPU runs it, and
/// submit it wrapped in an [`OnGpu`]. `run` is ordinary blocking code on the
/// executor's thread: upload, launch, wait, download.
#[typetag::serde]
pub trait CudaActivity: Send + 'static {
    /// Does the work on `device` and returns its result, which [`OnGpu`]
    /// sends to its parent.
    fn run(&mut self, device: &CudaDevice) -> Result<GpuOutput, GpuError>;
}

/// The value a [`CudaActivity`] produced, of any event payload type.
///
/// The type is erased so that [`OnGpu`] is one activity type for all work.
/// Within a node the value is moved, never encoded; it becomes MessagePack
/// bytes only when the outcome crosses the network.
pub struct GpuOutput(Payload);

impl GpuOutput {
    /// Wraps a result value.
    pub fn new<T: PayloadValue>(value: T) -> Self {
        GpuOutput(Payload::new(value))
    }

    /// Takes the value out as a `T`; fails if it is a different type.
    pub fn take<T: PayloadValue>(self) -> Result<T, PayloadError> {
        self.0.take()
    }
}

impl fmt::Debug for GpuOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GpuOutput").field(&self.0).finish()
    }
}

impl Serialize for GpuOutput {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.0.encode().map_err(ser::Error::custom)?;
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for GpuOutput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;

        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the MessagePack bytes of a GPU result")
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
                Ok(bytes.to_vec())
            }

            fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(bytes)
            }

            // Formats without a byte type (JSON) write bytes as a sequence.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(byte) = seq.next_element()? {
                    bytes.push(byte);
                }
                Ok(bytes)
            }
        }

        let bytes = deserializer.deserialize_byte_buf(Bytes)?;
        Ok(GpuOutput(Payload::from_encoded(bytes)))
    }
}

/// What an [`OnGpu`] activity sends to its parent: the work's value, or why
/// there is none.
#[derive(Debug, Serialize, Deserialize)]
pub enum GpuOutcome {
    /// The work ran and returned this value.
    Done(GpuOutput),
    /// The work failed, panicked, or ran on an executor without a GPU.
    Failed(GpuError),
}

impl GpuOutcome {
    /// The value as a `T`, or the error that took its place. A value of
    /// another type is [`GpuError::Output`].
    pub fn take<T: PayloadValue>(self) -> Result<T, GpuError> {
        match self {
            GpuOutcome::Done(output) => output
                .take()
                .map_err(|error| GpuError::Output(error.to_string())),
            GpuOutcome::Failed(error) => Err(error),
        }
    }
}

/// An activity that runs a [`CudaActivity`] on a GPU executor and sends the
/// [`GpuOutcome`] to `parent` as an event.
///
/// It asks for the `gpu` label unless given another context, and may be
/// stolen: until it runs it holds nothing on any device, so any GPU
/// executor can take it. Whatever happens, the parent gets exactly one
/// event: on an executor without a [`CudaDevice`] handle, or if the work
/// panics, the outcome is [`GpuOutcome::Failed`], so a waiting collector
/// never hangs.
#[derive(Serialize, Deserialize)]
pub struct OnGpu {
    parent: ActivityId,
    context: ContextList,
    work: Box<dyn CudaActivity>,
}

impl OnGpu {
    /// Runs `work` on some GPU and reports to `parent`.
    pub fn new(parent: ActivityId, work: impl CudaActivity) -> Self {
        Self::boxed(parent, Box::new(work))
    }

    /// [`new`](Self::new) for work that is already boxed.
    pub fn boxed(parent: ActivityId, work: Box<dyn CudaActivity>) -> Self {
        OnGpu {
            parent,
            context: ContextList::single(Context::new(GPU_LABEL)),
            work,
        }
    }

    /// Runs only on executors matching `context` instead of any GPU, e.g.
    /// one model: `"gpu:nvidia-h100-80gb-hbm3".parse()?`.
    pub fn with_context(mut self, context: ContextList) -> Self {
        self.context = context;
        self
    }

    fn outcome(&mut self, cx: &ActivityCx<'_>) -> GpuOutcome {
        let Some(device) = cx.resource::<Arc<CudaDevice>>() else {
            return GpuOutcome::Failed(GpuError::NotOnGpu {
                executor: cx.executor_context().to_string(),
            });
        };
        let work = &mut self.work;
        match catch_unwind(AssertUnwindSafe(|| work.run(device))) {
            Ok(Ok(output)) => GpuOutcome::Done(output),
            Ok(Err(error)) => GpuOutcome::Failed(error),
            Err(panic) => GpuOutcome::Failed(GpuError::Panicked(panic_message(&*panic))),
        }
    }
}

#[typetag::serde]
impl Activity for OnGpu {
    fn context(&self) -> ContextList {
        self.context.clone()
    }

    fn initialize(&mut self, cx: &mut ActivityCx<'_>) -> Step {
        let outcome = self.outcome(cx);
        if let GpuOutcome::Failed(error) = &outcome {
            tracing::warn!(parent = ?self.parent, %error, "GPU work failed");
        }
        cx.send(self.parent, outcome);
        Step::Finish
    }

    /// Never called in practice: the activity finishes in `initialize`.
    fn process(&mut self, _cx: &mut ActivityCx<'_>, _event: Event) -> Step {
        Step::Finish
    }
}
