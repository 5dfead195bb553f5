//! MessagePack (rmp-serde) encoding of activities for travel between nodes.
//!
//! An activity is encoded under its registered type name (`typetag`), so a
//! node decodes any type compiled into its binary, including ones it has not
//! seen in this run, and names the type when it cannot.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use crate::activity::Activity;

/// Why an activity could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The bytes name an activity type this binary does not contain.
    #[error("unknown activity type {name:?}: this binary has no `#[typetag::serde] impl Activity for {name}` (is the sending node running a different build?)")]
    UnknownActivityType {
        /// The type name found in the message.
        name: String,
    },
    /// The bytes are not a valid encoded activity.
    #[error("malformed activity{}: {reason}", name.as_ref().map(|n| format!(" of type {n:?}")).unwrap_or_default())]
    Malformed {
        /// The type name, if the message got that far.
        name: Option<String>,
        /// The decoder's complaint.
        reason: String,
    },
    /// The activity's state could not be encoded.
    #[error("activity cannot be encoded: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// Encodes an activity with its type name.
pub fn encode_activity(activity: &dyn Activity) -> Result<Vec<u8>, WireError> {
    Ok(rmp_serde::to_vec(activity)?)
}

/// Decodes an activity encoded by [`encode_activity`] on any node.
pub fn decode_activity(bytes: &[u8]) -> Result<Box<dyn Activity>, WireError> {
    rmp_serde::from_slice::<Box<dyn Activity>>(bytes).map_err(|error| {
        // The encoding is a one-entry map from type name to state; read the
        // name on its own to say which type failed.
        let name = rmp_serde::from_slice::<BTreeMap<String, IgnoredAny>>(bytes)
            .ok()
            .and_then(|map| map.into_keys().next());
        let reason = error.to_string();
        match name {
            Some(name) if reason.contains("unknown variant") => {
                WireError::UnknownActivityType { name }
            }
            name => WireError::Malformed { name, reason },
        }
    })
}
