//! A tiny [`Host`]: a queue of fake activities, executors that run them for
//! a set stretch of virtual time, and records of everything the node asked
//! of it, so that tests can say what happened to each activity.
//!
//! The host never reads a clock: the harness tells it the time when it
//! starts work ([`FakeHost::start_ready`]) and when work ends
//! ([`FakeHost::finish`]).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::context::{ContextList, ExecutorContext};
use crate::core::Place;
use crate::id::ActivityId;
use crate::protocol::{Delivery, Export, Host, Routed, Travelling};

/// A fake activity as it travels: what the exporter packs and the thief
/// unpacks.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Job {
    /// The activity it is.
    pub(super) id: ActivityId,
    /// Something to carry; [`REFUSED`] makes a thief refuse it.
    pub(super) payload: u32,
    /// How long it runs once an executor starts it.
    pub(super) run_for: Duration,
    /// Whether it may run again if the node it went to dies.
    pub(super) restartable: bool,
    /// Events that reached it before it started; they travel with it.
    pub(super) early: Vec<FakeEvent>,
}

/// A payload no host takes in, as if its type were unknown to the thief.
pub(super) const REFUSED: u32 = u32::MAX;

/// A fake event: its two ends and a value to recognise it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FakeEvent {
    pub(super) source: ActivityId,
    pub(super) target: ActivityId,
    pub(super) value: u32,
}

impl Routed for FakeEvent {
    fn source(&self) -> ActivityId {
        self.source
    }
    fn target(&self) -> ActivityId {
        self.target
    }
}

/// A job waiting in the queue.
#[derive(Debug, Clone)]
struct Waiting {
    job: Job,
    contexts: ContextList,
    attempt: u32,
    stealable: bool,
}

/// A job an executor runs, until `until` (virtual time since the start).
#[derive(Debug, Clone)]
struct Running {
    job: Job,
    attempt: u32,
    until: Duration,
}

#[derive(Debug, Clone)]
struct Executor {
    context: ExecutorContext,
    /// An executor that is off takes no new work and is not idle; what it
    /// runs, it finishes.
    on: bool,
    running: Option<Running>,
}

/// Where an activity this host has seen is now, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Whereabouts {
    Queued,
    Running,
    /// It finished on this node.
    Finished,
    /// It was exported and its end elsewhere is not settled yet.
    Left,
    /// It was exported and ended elsewhere; this host forgot it.
    Settled,
}

/// A [`Host::reclaim`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reclaim {
    pub(super) id: ActivityId,
    pub(super) attempt: u32,
    pub(super) stealable: bool,
}

/// The fake executors of one node. See the [module docs](self).
#[derive(Debug, Clone)]
pub(super) struct FakeHost {
    executors: Vec<Executor>,
    /// Whether idle executors leave queued work alone: a hungry node that
    /// keeps what it steals queued, so that others can steal it on.
    pub(super) hold_queued: bool,
    queue: VecDeque<Waiting>,
    whereabouts: HashMap<ActivityId, Whereabouts>,
    /// The trails handed out with each export of an activity, to check
    /// that the node passes them back unchanged.
    trails: HashMap<ActivityId, Vec<Vec<Place>>>,
    next_place: u64,
    /// Activities taken in, with their attempt.
    pub(super) imports: Vec<(ActivityId, u32)>,
    /// Activities handed to a thief.
    pub(super) exports: Vec<ActivityId>,
    /// Activities queued again after they left.
    pub(super) reclaims: Vec<Reclaim>,
    /// Exported activities whose end elsewhere was settled.
    pub(super) settles: Vec<ActivityId>,
    /// Activities that ran to their end here, with their attempt.
    pub(super) finished: Vec<(ActivityId, u32)>,
    /// Events that reached their activity here.
    pub(super) delivered: Vec<FakeEvent>,
    /// Calls the node should not have made, in words.
    pub(super) complaints: Vec<String>,
}

impl FakeHost {
    /// A host with `executors` executors offering `anywhere`, all off.
    pub(super) fn new(executors: usize) -> Self {
        FakeHost {
            executors: (0..executors)
                .map(|_| Executor {
                    context: ExecutorContext::anywhere(),
                    on: false,
                    running: None,
                })
                .collect(),
            hold_queued: false,
            queue: VecDeque::new(),
            whereabouts: HashMap::new(),
            trails: HashMap::new(),
            next_place: 1,
            imports: Vec::new(),
            exports: Vec::new(),
            reclaims: Vec::new(),
            settles: Vec::new(),
            finished: Vec::new(),
            delivered: Vec::new(),
            complaints: Vec::new(),
        }
    }

    /// Queues a job submitted on this node.
    pub(super) fn submit(&mut self, job: Job) {
        self.whereabouts.insert(job.id, Whereabouts::Queued);
        self.queue.push_back(Waiting {
            job,
            contexts: ContextList::anywhere(),
            attempt: 0,
            stealable: true,
        });
    }

    /// Turns every executor on or off.
    pub(super) fn set_executors_on(&mut self, on: bool) {
        for executor in &mut self.executors {
            executor.on = on;
        }
    }

    /// Which executors wait for work now. An executor with nothing to run
    /// but with a queued job it can run is about to start it, so it is not
    /// idle (unless the host holds queued work back).
    pub(super) fn idle_executors(&self) -> Vec<bool> {
        let mut claimed = vec![false; self.queue.len()];
        (self.executors.iter())
            .map(|executor| {
                if !executor.on || executor.running.is_some() {
                    return false;
                }
                if self.hold_queued {
                    return true;
                }
                let next = (self.queue.iter().enumerate()).position(|(index, waiting)| {
                    !claimed[index] && executor.context.priority_of(&waiting.contexts).is_some()
                });
                match next {
                    Some(index) => {
                        claimed[index] = true;
                        false
                    }
                    None => true,
                }
            })
            .collect()
    }

    /// Starts queued work on idle executors at `now`; returns the
    /// executors started, with the job and when it ends.
    pub(super) fn start_ready(&mut self, now: Duration) -> Vec<(usize, ActivityId, Duration)> {
        let mut started = Vec::new();
        if self.hold_queued {
            return started;
        }
        for (index, executor) in self.executors.iter_mut().enumerate() {
            if !executor.on || executor.running.is_some() {
                continue;
            }
            let Some(at) = (self.queue.iter())
                .position(|w| executor.context.priority_of(&w.contexts).is_some())
            else {
                continue;
            };
            let Waiting {
                mut job, attempt, ..
            } = self.queue.remove(at).expect("position found above");
            self.delivered.append(&mut job.early);
            self.whereabouts.insert(job.id, Whereabouts::Running);
            let until = now + job.run_for;
            started.push((index, job.id, until));
            executor.running = Some(Running {
                job,
                attempt,
                until,
            });
        }
        started
    }

    /// Ends the job executor `executor` runs if it is `id` and due at
    /// `now`; returns whether it did.
    pub(super) fn finish(&mut self, executor: usize, id: ActivityId, now: Duration) -> bool {
        let Some(slot) = self.executors.get_mut(executor) else {
            return false;
        };
        match &slot.running {
            Some(running) if running.job.id == id && running.until <= now => {}
            _ => return false,
        }
        let running = slot.running.take().expect("matched above");
        self.whereabouts.insert(id, Whereabouts::Finished);
        self.finished.push((id, running.attempt));
        true
    }

    /// Where `id` is, as far as this host knows.
    pub(super) fn whereabouts(&self, id: ActivityId) -> Option<Whereabouts> {
        self.whereabouts.get(&id).copied()
    }

    /// Jobs queued here, stealable or not.
    pub(super) fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Jobs running here.
    pub(super) fn running(&self) -> Vec<ActivityId> {
        (self.executors.iter())
            .filter_map(|e| e.running.as_ref().map(|r| r.job.id))
            .collect()
    }

    /// How many times `id` finished here.
    pub(super) fn finished_count(&self, id: ActivityId) -> usize {
        self.finished.iter().filter(|(f, _)| *f == id).count()
    }

    fn check_trail(&mut self, id: ActivityId, trail: &[Place], call: &str) {
        let given = self.trails.get(&id).cloned().unwrap_or_default();
        if !given.iter().any(|t| t.as_slice() == trail) {
            self.complaints.push(format!(
                "{call}({id}) with trail {trail:?}, but its exports carried {given:?}"
            ));
        }
    }
}

impl Host for FakeHost {
    type Body = Job;
    type Event = FakeEvent;

    fn executor_contexts(&self) -> Vec<ExecutorContext> {
        self.executors.iter().map(|e| e.context.clone()).collect()
    }

    fn idle_contexts(&self) -> Vec<(ExecutorContext, usize)> {
        let idle = self.executors.iter().zip(self.idle_executors());
        crate::protocol::count_contexts(idle.filter(|(_, idle)| *idle).map(|(e, _)| &e.context))
    }

    fn queued(&self) -> usize {
        self.queue.iter().filter(|w| w.stealable).count()
    }

    fn export(&mut self, thief: &ExecutorContext, max: usize) -> Vec<Export<Job>> {
        let mut taken = Vec::new();
        let mut index = 0;
        while index < self.queue.len() && taken.len() < max {
            let waiting = &self.queue[index];
            if !waiting.stealable || thief.priority_of(&waiting.contexts).is_none() {
                index += 1;
                continue;
            }
            let waiting = self.queue.remove(index).expect("index checked above");
            let id = waiting.job.id;
            let trail = vec![Place(self.next_place)];
            self.next_place += 1;
            self.trails.entry(id).or_default().push(trail.clone());
            self.whereabouts.insert(id, Whereabouts::Left);
            self.exports.push(id);
            taken.push(Export {
                id,
                restartable: waiting.job.restartable,
                body: waiting.job,
                contexts: waiting.contexts,
                trail,
            });
        }
        taken
    }

    fn import(&mut self, activity: Travelling<Job>) -> Result<(), String> {
        let Travelling {
            id,
            body,
            contexts,
            attempt,
        } = activity;
        self.imports.push((id, attempt));
        if body.id != id {
            self.complaints
                .push(format!("imported {id} whose body is {}", body.id));
        }
        if body.payload == REFUSED {
            return Err(format!("{id}: no such activity type in this binary"));
        }
        if matches!(
            self.whereabouts.get(&id),
            Some(Whereabouts::Queued | Whereabouts::Running)
        ) {
            self.complaints
                .push(format!("imported {id}, which is already here"));
        }
        self.whereabouts.insert(id, Whereabouts::Queued);
        self.queue.push_back(Waiting {
            job: body,
            contexts,
            attempt,
            stealable: true,
        });
        Ok(())
    }

    fn reclaim(
        &mut self,
        export: &Export<Job>,
        attempt: u32,
        stealable: bool,
    ) -> Result<(), String> {
        let id = export.id;
        self.check_trail(id, &export.trail, "reclaim");
        self.reclaims.push(Reclaim {
            id,
            attempt,
            stealable,
        });
        if self.whereabouts.get(&id) != Some(&Whereabouts::Left) {
            self.complaints.push(format!(
                "reclaim({id}), which is {:?} here, not exported",
                self.whereabouts.get(&id)
            ));
        }
        self.whereabouts.insert(id, Whereabouts::Queued);
        self.queue.push_back(Waiting {
            job: export.body.clone(),
            contexts: export.contexts.clone(),
            attempt,
            stealable,
        });
        Ok(())
    }

    fn settle(&mut self, id: ActivityId, trail: &[Place]) {
        self.check_trail(id, trail, "settle");
        self.settles.push(id);
        if self.whereabouts.get(&id) == Some(&Whereabouts::Left) {
            self.whereabouts.insert(id, Whereabouts::Settled);
        }
    }

    fn deliver(&mut self, event: FakeEvent) -> Delivery<FakeEvent> {
        match self.whereabouts.get(&event.target) {
            Some(Whereabouts::Queued) => {
                let waiting = (self.queue.iter_mut())
                    .find(|w| w.job.id == event.target)
                    .expect("a queued activity is in the queue");
                waiting.job.early.push(event);
                Delivery::Delivered
            }
            Some(Whereabouts::Running) => {
                self.delivered.push(event);
                Delivery::Delivered
            }
            Some(Whereabouts::Finished) => Delivery::Gone,
            Some(Whereabouts::Left) => Delivery::Away(event),
            Some(Whereabouts::Settled) | None => Delivery::Unknown(event),
        }
    }
}
