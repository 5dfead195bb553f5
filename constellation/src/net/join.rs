//! Why a node cannot reach the pool it was told to join.
//!
//! A node that dials its bootstrap addresses and gets no connection would
//! otherwise wait in silence: a wrong key, a dead port and a stale pool
//! file all look the same from outside. The driver keeps the last failed
//! dial to each bootstrap address, sorted into a [`JoinFailure`], so that
//! whoever waits for the pool can say why it is not there.

use std::fmt;

use libp2p::swarm::DialError;
use libp2p::Multiaddr;

/// Why the last dial to one bootstrap address failed, ordered by how far
/// the dial got: a refused connection got nowhere, a wrong key reached the
/// pool's door.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JoinFailure {
    /// Nothing listens at the address: the connection was refused.
    Refused,
    /// The address cannot be reached: no route to its host or network.
    Unreachable,
    /// Any other failure; the detail says what libp2p said.
    Other,
    /// The connection or its handshake did not complete in time.
    TimedOut,
    /// The connection was closed or reset during the handshake. Not a
    /// different key: both ends send their key check before they read the
    /// other's, so a pool node with another key is always
    /// [`JoinFailure::WrongKey`]. The node stopped or dropped the
    /// connection, or what listens there is no pool node with a key (a
    /// keyless one, another program).
    Handshake,
    /// Another node answers at the address than the one it names: the
    /// address is stale.
    OtherPeer,
    /// The peer answered with a different pool key.
    WrongKey,
}

/// The last failed dial to a bootstrap address, and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinProblem {
    /// The bootstrap address dialled.
    pub address: Multiaddr,
    /// What kind of failure it was.
    pub failure: JoinFailure,
    /// libp2p's own words for it.
    pub detail: String,
}

impl JoinProblem {
    /// Sorts a failed dial to `address` into a [`JoinProblem`].
    pub(crate) fn from_dial_error(address: Multiaddr, error: &DialError) -> JoinProblem {
        let (failure, detail) = dial_failure(error);
        JoinProblem {
            address,
            failure,
            detail,
        }
    }
}

/// Which kind of failure a failed dial was, and libp2p's words for it.
pub(crate) fn dial_failure(error: &DialError) -> (JoinFailure, String) {
    match error {
        DialError::WrongPeerId { obtained, .. } => (
            JoinFailure::OtherPeer,
            format!("the node there is {obtained}"),
        ),
        DialError::Transport(errors) => {
            let detail = (errors.iter())
                .map(|(_, error)| with_causes(error))
                .collect::<Vec<_>>()
                .join("; ");
            let debug = format!("{errors:?}");
            (classify(&detail, &debug), detail)
        }
        other => (JoinFailure::Other, with_causes(other)),
    }
}

/// An error and its causes on one line, outermost first: libp2p's listen,
/// transport and dial errors often say little themselves ("" for a port in
/// use) and keep the operating system's reason as their source.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !said.is_empty() && !text.contains(&said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&said);
        }
        cause = inner.source();
    }
    if text.is_empty() {
        text = format!("{error:?}");
    }
    text
}

/// Which failure a transport error's text (`detail`, from `Display`, and
/// `debug`, which names the `io::ErrorKind`s) shows. The layers between
/// TCP and libp2p box their errors, so the words are all there is to go by.
pub(crate) fn classify(detail: &str, debug: &str) -> JoinFailure {
    let text = format!("{detail} {debug}").to_lowercase();
    let has = |words: &[&str]| words.iter().any(|word| text.contains(word));
    if has(&["different pool key"]) {
        JoinFailure::WrongKey
    } else if has(&["connection refused", "connectionrefused"]) {
        JoinFailure::Refused
    } else if has(&["unreachable", "no route to host"]) {
        JoinFailure::Unreachable
    } else if has(&["timeout", "timed out", "timedout"]) {
        JoinFailure::TimedOut
    } else if has(&[
        "unexpectedeof",
        "unexpected end of file",
        "early eof",
        "connection reset",
        "connectionreset",
        "broken pipe",
        "brokenpipe",
        "noise",
        "handshake",
        "decrypt",
    ]) {
        JoinFailure::Handshake
    } else {
        JoinFailure::Other
    }
}

impl fmt::Display for JoinProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let JoinProblem {
            address,
            failure,
            detail,
        } = self;
        match failure {
            JoinFailure::WrongKey => write!(
                f,
                "the node at {address} has a different pool key: this key is not the pool's \
                 (a key file of another pool, or one made anew since)"
            ),
            JoinFailure::Handshake => write!(
                f,
                "the connection to {address} was closed during the handshake ({detail}): the \
                 node there stopped or dropped the connection, or it is not a pool node with a \
                 key (a node with another pool key is named as such)"
            ),
            JoinFailure::OtherPeer => write!(
                f,
                "another node answers at {address} than the one named there ({detail}): the \
                 pool file or address is stale"
            ),
            JoinFailure::TimedOut => write!(
                f,
                "no answer from {address} in time ({detail}): a firewall, a host that is down, \
                 or a node that does not speak the pool's protocol"
            ),
            JoinFailure::Unreachable => write!(
                f,
                "{address} is unreachable ({detail}): check the address and the network"
            ),
            JoinFailure::Refused => write!(
                f,
                "nothing listens at {address} (connection refused): the pool node is not \
                 running there, or the pool file is stale"
            ),
            JoinFailure::Other => write!(f, "could not connect to {address}: {detail}"),
        }
    }
}

/// Where a node stands with its pool's master (the pool node), as far as
/// it can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MasterState {
    /// No master has been a member yet: the node is still joining, or
    /// cannot reach the pool ([`Node::join_problem`](super::Node::join_problem)
    /// says why).
    NotYetSeen,
    /// A master is a member now.
    Known,
    /// The master said it leaves (it was stopped on purpose) and none is a
    /// member now.
    Left,
    /// The master was a member and is no more, without having said it
    /// leaves: it died or is cut off. It may come back; a node with
    /// bootstrap addresses keeps dialling them meanwhile.
    Lost,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_errors_are_sorted_by_their_words() {
        let cases = [
            (
                "Upgrade error: the peer uses a different pool key",
                JoinFailure::WrongKey,
            ),
            ("Connection refused (os error 111)", JoinFailure::Refused),
            ("No route to host (os error 113)", JoinFailure::Unreachable),
            (
                "Network is unreachable (os error 101)",
                JoinFailure::Unreachable,
            ),
            ("Timeout has been reached", JoinFailure::TimedOut),
            (
                "Upgrade error: unexpected end of file",
                JoinFailure::Handshake,
            ),
            (
                "Connection reset by peer (os error 104)",
                JoinFailure::Handshake,
            ),
            ("something new", JoinFailure::Other),
        ];
        for (text, failure) in cases {
            assert_eq!(classify(text, ""), failure, "{text}");
        }
    }

    #[test]
    fn the_failure_that_got_furthest_sorts_last() {
        let mut failures = [
            JoinFailure::WrongKey,
            JoinFailure::Refused,
            JoinFailure::TimedOut,
            JoinFailure::Unreachable,
        ];
        failures.sort();
        assert_eq!(failures.last(), Some(&JoinFailure::WrongKey));
        assert_eq!(failures.first(), Some(&JoinFailure::Refused));
    }

    #[test]
    fn a_wrong_peer_names_the_node_found() {
        let address: Multiaddr = "/ip4/127.0.0.1/tcp/4001".parse().unwrap();
        let obtained = libp2p::PeerId::random();
        let error = DialError::WrongPeerId {
            obtained,
            address: address.clone(),
        };
        let problem = JoinProblem::from_dial_error(address, &error);
        assert_eq!(problem.failure, JoinFailure::OtherPeer);
        assert!(problem.to_string().contains(&obtained.to_string()));
        assert!(problem.to_string().contains("stale"));
    }
}
