//! Events: typed messages from one activity (or the main program) to another.
//!
//! Inside one node a payload is kept as the sender's value and handed over by
//! moving a box; it is encoded with MessagePack (rmp-serde) only when it has
//! to cross the network.

use std::any::{type_name, Any};
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::id::ActivityId;

/// A message for one activity.
pub struct Event {
    /// The sending activity, or the id the main program used as its address.
    pub source: ActivityId,
    /// The activity that receives the event.
    pub target: ActivityId,
    /// The message itself.
    pub payload: Payload,
}

impl Event {
    /// An event carrying `value` from `source` to `target`.
    pub fn new<T: PayloadValue>(source: ActivityId, target: ActivityId, value: T) -> Self {
        Event {
            source,
            target,
            payload: Payload::new(value),
        }
    }

    /// Takes the payload out as a `T`; see [`Payload::take`].
    pub fn take<T: PayloadValue>(self) -> Result<T, PayloadError> {
        self.payload.take()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("source", &self.source)
            .field("target", &self.target)
            .field("payload", &self.payload)
            .finish()
    }
}

/// What an event payload must be: serde-encodable for the network, and
/// sendable between threads.
pub trait PayloadValue: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> PayloadValue for T {}

/// A type-erased payload that still knows how to encode itself.
trait LocalValue: Send {
    fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error>;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    fn type_name(&self) -> &'static str;
}

impl<T: PayloadValue> LocalValue for T {
    fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec(self)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
    fn type_name(&self) -> &'static str {
        type_name::<T>()
    }
}

/// The body of an event: either a live value (same node) or MessagePack
/// bytes (received from another node).
pub struct Payload(Repr);

enum Repr {
    Local(Box<dyn LocalValue>),
    Encoded(Vec<u8>),
}

/// Why a payload could not be read as the asked-for type.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The sender put a different type in the event.
    #[error("event payload is a {found}, not the expected {expected}")]
    WrongType {
        /// The type the receiver asked for.
        expected: &'static str,
        /// The type the sender used.
        found: &'static str,
    },
    /// The bytes from the network do not decode as the asked-for type.
    #[error("event payload does not decode as {expected}: {source}")]
    Decode {
        /// The type the receiver asked for.
        expected: &'static str,
        /// The decoder's complaint.
        source: rmp_serde::decode::Error,
    },
    /// The payload could not be encoded for the network.
    #[error("event payload of type {type_name} cannot be encoded: {source}")]
    Encode {
        /// The payload's type.
        type_name: &'static str,
        /// The encoder's complaint.
        source: rmp_serde::encode::Error,
    },
}

impl Payload {
    /// Wraps a value.
    pub fn new<T: PayloadValue>(value: T) -> Self {
        Payload(Repr::Local(Box::new(value)))
    }

    /// Wraps MessagePack bytes received from the network.
    pub fn from_encoded(bytes: Vec<u8>) -> Self {
        Payload(Repr::Encoded(bytes))
    }

    /// Takes the value out as a `T`: a move for local payloads, a decode for
    /// ones that came over the network.
    pub fn take<T: PayloadValue>(self) -> Result<T, PayloadError> {
        match self.0 {
            Repr::Local(value) => {
                let found = value.type_name();
                value
                    .into_any()
                    .downcast::<T>()
                    .map(|boxed| *boxed)
                    .map_err(|_| PayloadError::WrongType {
                        expected: type_name::<T>(),
                        found,
                    })
            }
            Repr::Encoded(bytes) => {
                rmp_serde::from_slice(&bytes).map_err(|source| PayloadError::Decode {
                    expected: type_name::<T>(),
                    source,
                })
            }
        }
    }

    /// The MessagePack encoding, for sending to another node.
    pub fn encode(&self) -> Result<Vec<u8>, PayloadError> {
        match &self.0 {
            Repr::Local(value) => value.encode().map_err(|source| PayloadError::Encode {
                type_name: value.type_name(),
                source,
            }),
            Repr::Encoded(bytes) => Ok(bytes.clone()),
        }
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Local(value) => write!(f, "Payload({})", value.type_name()),
            Repr::Encoded(bytes) => write!(f, "Payload({} encoded bytes)", bytes.len()),
        }
    }
}

/// An event as it travels between nodes: the payload is already encoded,
/// and `serde_bytes` keeps it a binary blob rather than an array of integers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEvent {
    /// The sender.
    pub source: ActivityId,
    /// The receiver.
    pub target: ActivityId,
    /// MessagePack bytes of the payload.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

impl TryFrom<&Event> for WireEvent {
    type Error = PayloadError;

    fn try_from(event: &Event) -> Result<Self, Self::Error> {
        Ok(WireEvent {
            source: event.source,
            target: event.target,
            payload: event.payload.encode()?,
        })
    }
}

impl From<WireEvent> for Event {
    fn from(wire: WireEvent) -> Self {
        Event {
            source: wire.source,
            target: wire.target,
            payload: Payload::from_encoded(wire.payload),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{IdIssuer, NodeId};

    fn ids() -> (ActivityId, ActivityId) {
        let mut issuer = IdIssuer::new(NodeId::random(), 0);
        (issuer.issue(), issuer.issue())
    }

    #[test]
    fn local_payloads_move_without_encoding() {
        let (a, b) = ids();
        let event = Event::new(a, b, vec![1u32, 2, 3]);
        assert_eq!(event.take::<Vec<u32>>().unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn wrong_type_is_an_error_that_names_both_types() {
        let (a, b) = ids();
        let err = Event::new(a, b, 7u64).take::<String>().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("u64") && text.contains("String"), "{text}");
    }

    #[test]
    fn events_survive_the_wire_format() {
        let (a, b) = ids();
        let event = Event::new(a, b, (String::from("pair-7"), 812u64));
        let wire = WireEvent::try_from(&event).unwrap();
        let bytes = rmp_serde::to_vec(&wire).unwrap();
        let back: Event = rmp_serde::from_slice::<WireEvent>(&bytes).unwrap().into();
        assert_eq!(back.target, b);
        assert_eq!(
            back.take::<(String, u64)>().unwrap(),
            ("pair-7".into(), 812)
        );
    }

    #[test]
    fn garbage_from_the_network_is_a_decode_error() {
        let err = Payload::from_encoded(vec![0xc1]).take::<u64>().unwrap_err();
        assert!(matches!(err, PayloadError::Decode { .. }));
    }
}
