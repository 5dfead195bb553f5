//! The node protocol, written once: a sans-IO state machine, [`Node`],
//! that the network driver and the simulator both drive.
//!
//! A node makes every decision between nodes: whom to ask for work and
//! when, what to hand over, custody of exported work and its re-queueing
//! when a thief dies, where an event goes next, events that come before
//! their activity, and membership (SWIM, through [`foca`]). It does no I/O
//! and keeps no clock: like quinn-proto's `Connection`, it is fed messages,
//! local happenings and the time, and it is polled, one [`Output`] at a time
//! ([`Node::poll_output`]), for what to send, what its driver must know,
//! and when to wake it.
//!
//! The node's own executors are reached through [`Host`]: the local pool
//! in production, a simulated node in the simulator.

pub mod custody;
mod host;
mod membership;
mod message;
mod node;
pub mod steal;
#[cfg(test)]
mod tests;

pub(crate) use host::count_contexts;
pub use host::{Delivery, Export, Host, Routed};
pub use message::{Envelope, MemberId, MemberInfo, Message, Notice, Travelling};
pub use node::{Node, NodeEvent, Output, SendToken, Settings, Stats, Transmit};
