//! The node protocol, written once: a sans-IO state machine, [`StateMachine`],
//! that the network driver and the simulator both drive.
//!
//! A node makes every decision between nodes: whom to ask for work and
//! when, what to hand over, custody of exported work and its re-queueing
//! when a thief dies, where an event goes next, events that come before
//! their activity, and membership (SWIM, through [`foca`]). It does no I/O
//! and keeps no clock: like quinn-proto's `Connection`, it is fed messages,
//! local happenings and the time, and it is polled, one [`Output`] at a time
//! ([`StateMachine::poll_output`]), for what to send, what its driver must know,
//! and when to wake it.
//!
//! The node's own executors are reached through [`Host`]: the local pool
//! in production, a simulated node in the simulator.
//!
//! The state machine is named [`StateMachine`], not `Node`: `net::Node` is
//! the user's handle on a running node (a pool, a driver thread, this
//! state machine inside it), and one name for both read as one thing.

pub mod custody;
mod host;
mod membership;
mod message;
mod node;
pub mod strategy;
#[cfg(test)]
mod tests;

pub(crate) use host::count_contexts;
pub use host::{Delivery, Export, Host, Routed};
pub use message::{Envelope, MemberId, MemberInfo, Travelling};
pub(crate) use message::{Message, Notice};
pub use node::{NodeEvent, Output, SendToken, Settings, StateMachine, Stats, Transmit};
