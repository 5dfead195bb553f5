//! The libp2p transport of a node: TCP, then the pool's pre-shared key
//! (pnet), then noise, then yamux.
//!
//! The pnet layer comes first so that a peer without the pool key cannot get
//! as far as a noise handshake: everything after the nonce exchange is
//! encrypted with the key. Both ends then send a fixed text through it, so
//! a wrong key is refused at once, with a message that says so.
//!
//! QUIC is deliberately not offered: QUIC brings its own TLS handshake
//! directly on UDP, with no byte stream beneath it into which a pnet layer
//! could be put, so a QUIC listener would admit anyone, key or not.

use std::net::IpAddr;
use std::time::Duration;

use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::Boxed;
use libp2p::core::upgrade::Version;
use libp2p::futures::{AsyncRead, AsyncWrite};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::{noise, tcp, yamux, Multiaddr, PeerId, Transport};

/// How long dialing and upgrading one connection (TCP connect, pnet, noise
/// and yamux negotiation) may take before it is given up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the transport could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The noise configuration could not be made from the node's keypair.
    #[error("cannot set up noise encryption with this identity: {0}")]
    Noise(#[from] noise::Error),
}

/// Builds the node's transport for `keypair`'s identity: TCP with
/// `TCP_NODELAY`, the pnet layer when `psk` is given, then noise and yamux,
/// each connection limited to [`CONNECT_TIMEOUT`] to come up.
///
/// Without a key the pool is open to anyone who can reach it; callers
/// allow that only on loopback addresses (see [`is_loopback`]).
pub fn build_transport(
    keypair: &Keypair,
    psk: Option<PreSharedKey>,
) -> Result<Boxed<(PeerId, StreamMuxerBox)>, TransportError> {
    let tcp = tcp::tokio::Transport::new(tcp::Config::new().nodelay(true));
    match psk {
        Some(psk) => secure(
            tcp.and_then(move |socket, _| async move {
                let mut private = PnetConfig::new(psk)
                    .handshake(socket)
                    .await
                    .map_err(std::io::Error::other)?;
                confirm_key(&mut private).await?;
                Ok::<_, std::io::Error>(private)
            }),
            keypair,
        ),
        None => secure(tcp, keypair),
    }
}

/// What both ends write first through the pnet layer. pnet itself cannot
/// tell a wrong key: the stream just decrypts to garbage, and the protocol
/// negotiation that follows may wait for bytes that never come until
/// [`CONNECT_TIMEOUT`]. A known text read back fails at once, and says why.
const KEY_CHECK: &[u8; 16] = b"constellation/k1";

/// Exchanges [`KEY_CHECK`] over a fresh pnet stream.
async fn confirm_key<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> std::io::Result<()> {
    use libp2p::futures::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(KEY_CHECK).await?;
    stream.flush().await?;
    let mut echo = [0u8; KEY_CHECK.len()];
    stream.read_exact(&mut echo).await?;
    if &echo != KEY_CHECK {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the peer uses a different pool key",
        ));
    }
    Ok(())
}

/// Adds noise, yamux and the timeout on top of a byte-stream transport.
fn secure<T>(base: T, keypair: &Keypair) -> Result<Boxed<(PeerId, StreamMuxerBox)>, TransportError>
where
    T: Transport + Send + Unpin + 'static,
    T::Output: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T::Error: Send + Sync + 'static,
    T::Dial: Send + 'static,
    T::ListenerUpgrade: Send + 'static,
{
    Ok(base
        .upgrade(Version::V1)
        .authenticate(noise::Config::new(keypair)?)
        .multiplex(yamux::Config::default())
        .timeout(CONNECT_TIMEOUT)
        .boxed())
}

/// Whether `addr` can only be reached from this machine: its host is in
/// 127.0.0.0/8, is `::1` (or `::ffff:127.x.x.x`), or is the DNS name
/// `localhost`.
///
/// The unspecified addresses `0.0.0.0` and `::` are *not* loopback: they
/// listen on every interface.
pub fn is_loopback(addr: &Multiaddr) -> bool {
    // The host is the first component; what follows (tcp, p2p) does not
    // change who can reach it.
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Protocol::Ip6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Some(Protocol::Dns(name) | Protocol::Dns4(name) | Protocol::Dns6(name)) => {
            let name = name.strip_suffix('.').unwrap_or(&name);
            name.eq_ignore_ascii_case("localhost")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use futures::StreamExt;
    use libp2p::swarm::{Swarm, SwarmEvent};
    use libp2p::{ping, SwarmBuilder};

    use super::*;

    fn swarm(psk: Option<PreSharedKey>) -> Swarm<ping::Behaviour> {
        SwarmBuilder::with_existing_identity(Keypair::generate_ed25519())
            .with_tokio()
            .with_other_transport(|kp| {
                build_transport(kp, psk).map_err(|e| Box::new(e) as Box<dyn Error + Send + Sync>)
            })
            .unwrap()
            .with_behaviour(|_| ping::Behaviour::default())
            .unwrap()
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(30)))
            .build()
    }

    fn key(byte: u8) -> PreSharedKey {
        PreSharedKey::new([byte; 32])
    }

    async fn listening(swarm: &mut Swarm<ping::Behaviour>) -> Multiaddr {
        swarm
            .listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
            .unwrap();
        loop {
            if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
                return address;
            }
        }
    }

    /// Whether the two swarms get a connection up (and a ping through)
    /// within `wait`.
    async fn connects(
        listener_key: Option<PreSharedKey>,
        dialer_key: Option<PreSharedKey>,
        wait: Duration,
    ) -> bool {
        let mut listener = swarm(listener_key);
        let mut dialer = swarm(dialer_key);
        let addr = listening(&mut listener).await;
        dialer.dial(addr).unwrap();
        let outcome = async {
            let mut listener_up = false;
            let mut dialer_up = false;
            loop {
                tokio::select! {
                    event = listener.select_next_some() => match event {
                        SwarmEvent::ConnectionEstablished { .. } => listener_up = true,
                        SwarmEvent::IncomingConnectionError { .. } => return false,
                        _ => {}
                    },
                    event = dialer.select_next_some() => match event {
                        SwarmEvent::ConnectionEstablished { .. } => dialer_up = true,
                        SwarmEvent::OutgoingConnectionError { .. } => return false,
                        SwarmEvent::Behaviour(ping::Event { result: Ok(_), .. }) => {
                            return listener_up && dialer_up;
                        }
                        _ => {}
                    },
                }
            }
        };
        tokio::time::timeout(wait, outcome).await.unwrap_or(false)
    }

    /// Long enough for a loaded test machine to connect.
    const CONNECT: Duration = Duration::from_secs(10);

    /// How long a failing pair is watched. Mismatched keys usually fail in
    /// about a millisecond, but a keyless dialer facing a keyed listener can
    /// stall (each side waits for bytes the other will not send) until
    /// `CONNECT_TIMEOUT`; a connection can never come up either way.
    const REFUSE: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn same_key_connects() {
        assert!(connects(Some(key(1)), Some(key(1)), CONNECT).await);
    }

    #[tokio::test]
    async fn no_key_on_either_side_connects() {
        assert!(connects(None, None, CONNECT).await);
    }

    #[tokio::test]
    async fn different_keys_do_not_connect() {
        assert!(!connects(Some(key(1)), Some(key(2)), REFUSE).await);
    }

    #[tokio::test]
    async fn key_on_one_side_only_does_not_connect() {
        assert!(!connects(Some(key(1)), None, REFUSE).await);
        assert!(!connects(None, Some(key(1)), REFUSE).await);
    }

    #[test]
    fn loopback_addresses() {
        for text in [
            "/ip4/127.0.0.1/tcp/4001",
            "/ip4/127.1.2.3/tcp/0",
            "/ip6/::1/tcp/4001",
            "/ip6/::ffff:127.0.0.1/tcp/4001",
            "/dns/localhost/tcp/4001",
            "/dns4/localhost/tcp/4001",
            "/dns6/LOCALHOST./tcp/4001",
            "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA",
        ] {
            assert!(is_loopback(&text.parse().unwrap()), "{text}");
        }
    }

    #[test]
    fn non_loopback_addresses() {
        for text in [
            "/ip4/0.0.0.0/tcp/4001",
            "/ip6/::/tcp/4001",
            "/ip4/192.168.1.10/tcp/4001",
            "/ip4/128.0.0.1/tcp/4001",
            "/ip6/fe80::1/tcp/4001",
            "/dns/example.org/tcp/4001",
            "/dns/localhost.example.org/tcp/4001",
            "/tcp/4001",
        ] {
            assert!(!is_loopback(&text.parse().unwrap()), "{text}");
        }
        assert!(!is_loopback(&Multiaddr::empty()));
    }
}
