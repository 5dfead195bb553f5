//! What the simulated application does: activities with contexts, work
//! measured in seconds, input data held at some sites, and stages of
//! children that an activity waits for.
//!
//! An [`ActivitySpec`] is a template: each root, and each child an activity
//! submits, is a new activity of that template with its own id. A spec's
//! [`stages`](ActivitySpec::stages) make DAG-like work with the core's own
//! mechanisms: after its own work the activity submits the first stage's
//! children and suspends; each child sends it an event when it finishes;
//! when all of a stage's children have reported, it submits the next stage,
//! and after the last one it finishes. A pair of images in the paper's
//! many-task pipeline is such an activity, whose stages are the pipeline's
//! steps, some of them fanned out into tiles.

use serde::{Deserialize, Serialize};

use super::model::non_negative;
use super::SimError;
use crate::context::{ContextList, ExecutorContext, Label};

/// A kind of activity: what all activities of one step have in common.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kind {
    /// Its name, e.g. `detect`; journals show it as the activity's kind.
    pub name: String,
    /// The share (0 to 1) of its work that uses all of an executor's cores;
    /// the rest runs on one core (Amdahl's law).
    pub parallel: f64,
    /// Speedups on executors that offer a label: an executor offering
    /// `GPU` runs a kind with `(GPU, 10.0)` ten times faster. The largest
    /// that applies counts.
    pub speedups: Vec<(Label, f64)>,
    /// Bytes of the activity's own state when it is stolen.
    pub state_bytes: u64,
    /// Seconds each event the activity processes takes.
    pub event_seconds: f64,
}

impl Kind {
    /// A sequential kind with no speedups, 256 bytes of state and free events.
    pub fn new(name: impl Into<String>) -> Self {
        Kind {
            name: name.into(),
            parallel: 0.0,
            speedups: Vec::new(),
            state_bytes: 256,
            event_seconds: 0.0,
        }
    }

    /// This kind with a parallel share.
    pub fn with_parallel(mut self, share: f64) -> Self {
        self.parallel = share;
        self
    }

    /// This kind running `factor` times faster on executors offering `label`.
    pub fn with_speedup(mut self, label: &str, factor: f64) -> Self {
        self.speedups.push((Label::new(label), factor));
        self
    }

    /// This kind with events that take `seconds` each.
    pub fn with_event_seconds(mut self, seconds: f64) -> Self {
        self.event_seconds = seconds;
        self
    }

    /// How long `seconds` of reference work of this kind takes on an
    /// executor with `cores` cores and `speed`, offering `context`.
    pub fn seconds_on(
        &self,
        seconds: f64,
        context: &ExecutorContext,
        cores: u32,
        speed: f64,
    ) -> f64 {
        let cores = f64::from(cores.max(1));
        let amdahl = (1.0 - self.parallel) + self.parallel / cores;
        let speedup = (self.speedups.iter())
            .filter(|(label, _)| context.contexts.iter().any(|c| c.label == *label))
            .map(|(_, factor)| *factor)
            .fold(1.0_f64, f64::max);
        seconds * amdahl / speed / speedup
    }
}

/// A file or data set that some activities read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Data {
    /// Its size in bytes.
    pub bytes: u64,
    /// The sites that hold a replica; an activity that starts elsewhere
    /// first fetches it from the nearest one.
    pub replicas: Vec<usize>,
}

/// Where an activity's children may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Placement {
    /// Anywhere in the pool: it may be stolen by other nodes.
    #[default]
    Anywhere,
    /// On the node that submitted it, by any of its executors (the paper's
    /// tiles, whose temporary files stay on the machine).
    Node,
    /// Only on the executor that submitted it.
    Executor,
}

/// A template for activities: each root, and each child an activity
/// submits, is a new activity of its template with its own id; see
/// [`ActivitySpec::stages`] for how parents wait for children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivitySpec {
    /// Its kind, an index into [`Workload::kinds`].
    pub kind: u32,
    /// Where it may run.
    pub contexts: ContextList,
    /// Its own work in seconds on a reference executor, done in its first call.
    pub seconds: f64,
    /// The data it reads first, an index into [`Workload::data`].
    pub input: Option<u32>,
    /// Whether it may leave the node (or executor) that submitted it.
    pub placement: Placement,
    /// Stages of children (indices into [`Workload::activities`]), run one
    /// after the other after its own work; it finishes after the last.
    ///
    /// After its own work the activity submits the first stage's children
    /// through the core and suspends; each child sends it an event when
    /// it finishes, and when all of a stage have reported it submits the
    /// next stage. A suspended parent holds no executor.
    pub stages: Vec<Vec<u32>>,
}

impl ActivitySpec {
    /// An activity of `kind` with `seconds` of work that may run anywhere.
    pub fn new(kind: u32, seconds: f64) -> Self {
        ActivitySpec {
            kind,
            contexts: ContextList::anywhere(),
            seconds,
            input: None,
            placement: Placement::Anywhere,
            stages: Vec::new(),
        }
    }

    /// This activity with contexts.
    pub fn with_contexts(mut self, contexts: ContextList) -> Self {
        self.contexts = contexts;
        self
    }

    /// This activity reading `data` first.
    pub fn with_input(mut self, data: u32) -> Self {
        self.input = Some(data);
        self
    }

    /// This activity with a placement.
    pub fn with_placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// This activity with one more stage of children.
    pub fn with_stage(mut self, children: Vec<u32>) -> Self {
        self.stages.push(children);
        self
    }
}

/// The whole application: templates, and the roots submitted at the master.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Kinds of activity.
    pub kinds: Vec<Kind>,
    /// Input data.
    pub data: Vec<Data>,
    /// Activity templates.
    pub activities: Vec<ActivitySpec>,
    /// Templates submitted from outside, in this order, when the master
    /// joins; the run ends when all of them have finished.
    pub roots: Vec<u32>,
}

impl Workload {
    /// An empty workload.
    pub fn new() -> Self {
        Self::default()
    }

    /// `count` independent activities of one kind, each `seconds` long,
    /// that run where `contexts` says.
    pub fn bag(count: usize, seconds: f64, contexts: ContextList) -> Self {
        let mut workload = Workload::new();
        let kind = workload.add_kind(Kind::new("task"));
        let spec = workload.add(ActivitySpec::new(kind, seconds).with_contexts(contexts));
        workload.roots = vec![spec; count];
        workload
    }

    /// Adds a kind, returning its index.
    pub fn add_kind(&mut self, kind: Kind) -> u32 {
        self.kinds.push(kind);
        (self.kinds.len() - 1) as u32
    }

    /// Adds input data, returning its index.
    pub fn add_data(&mut self, data: Data) -> u32 {
        self.data.push(data);
        (self.data.len() - 1) as u32
    }

    /// Adds a template, returning its index.
    pub fn add(&mut self, spec: ActivitySpec) -> u32 {
        self.activities.push(spec);
        (self.activities.len() - 1) as u32
    }

    /// Adds a template and submits one activity of it as a root.
    pub fn add_root(&mut self, spec: ActivitySpec) -> u32 {
        let index = self.add(spec);
        self.roots.push(index);
        index
    }

    /// The work in seconds of one activity of template `spec` and all its
    /// descendants, on a reference executor (events excluded).
    pub fn reference_seconds(&self, spec: u32) -> f64 {
        let mut total = 0.0;
        let mut stack = vec![spec];
        while let Some(spec) = stack.pop() {
            let Some(activity) = self.activities.get(spec as usize) else {
                continue;
            };
            total += activity.seconds;
            stack.extend(activity.stages.iter().flatten().copied());
        }
        total
    }

    /// Checks indices, numbers and that no template contains itself, so
    /// that the run itself cannot meet nonsense or recurse forever.
    pub fn validate(&self, sites: usize) -> Result<(), SimError> {
        let bad = |text: String| Err(SimError::Workload(text));
        if self.activities.len() >= u32::MAX as usize {
            return bad("too many activity templates".into());
        }
        for (index, kind) in self.kinds.iter().enumerate() {
            let what = format!("kind {index} ({})", kind.name);
            if !(0.0..=1.0).contains(&kind.parallel) {
                return bad(format!(
                    "{what}: the parallel share must be between 0 and 1, not {}",
                    kind.parallel
                ));
            }
            for (label, factor) in &kind.speedups {
                if !(factor.is_finite() && *factor > 0.0) {
                    return bad(format!(
                        "{what}: the speedup on {label} must be positive, not {factor}"
                    ));
                }
            }
            non_negative(kind.event_seconds, &format!("{what}: event time"))
                .map_err(|error| SimError::Workload(error.to_string()))?;
        }
        for (index, data) in self.data.iter().enumerate() {
            if data.replicas.is_empty() {
                return bad(format!("data {index} has no replica anywhere"));
            }
            if let Some(site) = data.replicas.iter().find(|&&site| site >= sites) {
                return bad(format!(
                    "data {index} has a replica on site {site}, but there are {sites} sites"
                ));
            }
        }
        let count = self.activities.len() as u32;
        for (index, spec) in self.activities.iter().enumerate() {
            let what = format!("activity template {index}");
            if spec.kind as usize >= self.kinds.len() {
                return bad(format!(
                    "{what} has kind {}, but there are {} kinds",
                    spec.kind,
                    self.kinds.len()
                ));
            }
            non_negative(spec.seconds, &format!("{what}: work"))
                .map_err(|error| SimError::Workload(error.to_string()))?;
            if let Some(data) = spec.input {
                if data as usize >= self.data.len() {
                    return bad(format!(
                        "{what} reads data {data}, but there are {} data sets",
                        self.data.len()
                    ));
                }
            }
            if let Some(child) = spec.stages.iter().flatten().find(|&&child| child >= count) {
                return bad(format!(
                    "{what} has child template {child}, but there are {count} templates"
                ));
            }
            if spec
                .stages
                .iter()
                .any(|stage| stage.len() >= u32::MAX as usize)
            {
                return bad(format!("{what} has a stage with too many children"));
            }
        }
        if let Some(root) = self.roots.iter().find(|&&root| root >= count) {
            return bad(format!(
                "root template {root} does not exist ({count} templates)"
            ));
        }
        if let Some(spec) = self.find_cycle() {
            return bad(format!(
                "activity template {spec} is among its own descendants: it would submit children forever"
            ));
        }
        Ok(())
    }

    /// A template that is its own descendant, if any (depth-first search
    /// without recursion, so deep chains cannot overflow the stack).
    fn find_cycle(&self) -> Option<u32> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut marks = vec![Mark::New; self.activities.len()];
        let children = |spec: u32| -> Vec<u32> {
            let mut all: Vec<u32> = self.activities[spec as usize]
                .stages
                .iter()
                .flatten()
                .copied()
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        for start in 0..self.activities.len() as u32 {
            if marks[start as usize] != Mark::New {
                continue;
            }
            marks[start as usize] = Mark::Open;
            let mut stack = vec![(start, children(start), 0usize)];
            while let Some((spec, kids, next)) = stack.last_mut() {
                if *next == kids.len() {
                    marks[*spec as usize] = Mark::Done;
                    stack.pop();
                    continue;
                }
                let child = kids[*next];
                *next += 1;
                match marks[child as usize] {
                    Mark::Open => return Some(child),
                    Mark::Done => {}
                    Mark::New => {
                        marks[child as usize] = Mark::Open;
                        let grandchildren = children(child);
                        stack.push((child, grandchildren, 0));
                    }
                }
            }
        }
        None
    }
}
