//! Length-prefixed MessagePack frames, and the request-response codec of the
//! `/constellation/1` protocol built on them.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of
//! compact MessagePack (`rmp_serde::to_vec`: structs as arrays, not maps).
//! The length is checked against a maximum before any of the body is read,
//! so a peer cannot make a node allocate or wait for more than that.

use std::io;

use async_trait::async_trait;
use futures::prelude::*;
use libp2p::request_response;
use libp2p::StreamProtocol;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::message::{Request, Response};

/// The largest frame a node accepts unless configured otherwise: 64 MiB,
/// enough for a batch of stolen activities with large state.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// The protocol name nodes negotiate; pass `StreamProtocol::new(PROTOCOL)`
/// to the request-response behaviour.
pub const PROTOCOL: &str = "/constellation/1";

/// Bytes taken by the length prefix.
const PREFIX: usize = 4;

/// How much of a body is allocated before its bytes arrive. A length prefix
/// is a promise, not data; growing the buffer as bytes come in keeps a peer
/// that announces a large frame and then stalls from pinning that memory.
const INITIAL_BODY_CAPACITY: usize = 64 * 1024;

/// Why a frame could not be encoded, read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame's length is above the allowed maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The announced (or, when encoding, actual) body length.
        len: usize,
        /// The maximum in force.
        max: usize,
    },
    /// The input ended before the frame did.
    #[error("truncated frame: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes the frame needs (prefix plus announced body).
        expected: usize,
        /// Bytes that were there.
        got: usize,
    },
    /// Bytes follow the frame's announced end.
    #[error("{extra} unexpected bytes after the end of the frame")]
    TrailingBytes {
        /// How many bytes follow.
        extra: usize,
    },
    /// The body is not valid MessagePack for the expected message type.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The message could not be serialised.
    #[error("cannot encode message: {0}")]
    Encode(String),
    /// Reading or writing the stream failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

impl From<FrameError> for io::Error {
    fn from(err: FrameError) -> io::Error {
        match err {
            FrameError::Io(inner) => inner,
            // A short read is the stream ending early, not bad data.
            FrameError::Truncated { .. } => io::Error::new(io::ErrorKind::UnexpectedEof, err),
            FrameError::TooLarge { .. }
            | FrameError::TrailingBytes { .. }
            | FrameError::Malformed(_) => io::Error::new(io::ErrorKind::InvalidData, err),
            FrameError::Encode(_) => io::Error::new(io::ErrorKind::InvalidInput, err),
        }
    }
}

/// Serialises `msg` into one whole frame, length prefix included.
///
/// Fails with [`FrameError::TooLarge`] when the body is over `max` bytes, so
/// a node never sends what its peers would refuse anyway.
pub fn encode_frame<T: Serialize>(msg: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    // Reserve the prefix up front so the body is written in place, not copied.
    let mut frame = vec![0u8; PREFIX];
    rmp_serde::encode::write(&mut frame, msg).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = frame.len() - PREFIX;
    check_len(len, max)?;
    let prefix = u32::try_from(len).map_err(|_| FrameError::TooLarge { len, max })?;
    frame[..PREFIX].copy_from_slice(&prefix.to_be_bytes());
    Ok(frame)
}

/// Decodes one whole frame, length prefix included.
///
/// The input must be exactly one frame: a short input is
/// [`FrameError::Truncated`], extra bytes are [`FrameError::TrailingBytes`].
pub fn decode_frame<T: DeserializeOwned>(frame: &[u8], max: usize) -> Result<T, FrameError> {
    let Some((prefix, body)) = frame.split_first_chunk::<PREFIX>() else {
        return Err(FrameError::Truncated {
            expected: PREFIX,
            got: frame.len(),
        });
    };
    let len = body_len(*prefix, max)?;
    if body.len() < len {
        return Err(FrameError::Truncated {
            expected: PREFIX + len,
            got: frame.len(),
        });
    }
    if body.len() > len {
        return Err(FrameError::TrailingBytes {
            extra: body.len() - len,
        });
    }
    decode_body(body)
}

/// Reads one frame from `io` and decodes it.
///
/// The body is read only after its length passed the check, and the buffer
/// grows with the bytes that actually arrive.
pub async fn read_frame<T, R>(io: &mut R, max: usize) -> Result<T, FrameError>
where
    T: DeserializeOwned,
    R: AsyncRead + Unpin + Send,
{
    let mut prefix = [0u8; PREFIX];
    io.read_exact(&mut prefix).await?;
    let len = body_len(prefix, max)?;
    let mut body = Vec::with_capacity(len.min(INITIAL_BODY_CAPACITY));
    // `len` fits in u64 on every platform Rust supports.
    let got = (&mut *io).take(len as u64).read_to_end(&mut body).await?;
    if got < len {
        return Err(FrameError::Truncated {
            expected: PREFIX + len,
            got: PREFIX + got,
        });
    }
    decode_body(&body)
}

/// Encodes `msg` as one frame and writes it to `io`.
///
/// Does not close the stream: request-response closes it after the write.
pub async fn write_frame<T, W>(io: &mut W, msg: &T, max: usize) -> Result<(), FrameError>
where
    T: Serialize,
    W: AsyncWrite + Unpin + Send,
{
    let frame = encode_frame(msg, max)?;
    io.write_all(&frame).await?;
    io.flush().await?;
    Ok(())
}

fn check_len(len: usize, max: usize) -> Result<(), FrameError> {
    if len > max {
        Err(FrameError::TooLarge { len, max })
    } else {
        Ok(())
    }
}

fn body_len(prefix: [u8; PREFIX], max: usize) -> Result<usize, FrameError> {
    let announced = u32::from_be_bytes(prefix);
    // On a 16-bit target a u32 may not fit; treat that as too large too.
    let len = usize::try_from(announced).map_err(|_| FrameError::TooLarge {
        len: usize::MAX,
        max,
    })?;
    check_len(len, max)?;
    Ok(len)
}

fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    // A cursor, not `from_slice`, because only it tells how much was used:
    // `from_slice` accepts junk after the message, and a frame holds exactly
    // one message, so leftovers mean sender and receiver disagree.
    let mut de = rmp_serde::Deserializer::new(io::Cursor::new(body));
    let msg = T::deserialize(&mut de).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let used = usize::try_from(de.position()).unwrap_or(usize::MAX);
    let rest = body.len().saturating_sub(used);
    if rest != 0 {
        return Err(FrameError::Malformed(format!(
            "{rest} bytes left after the message"
        )));
    }
    Ok(msg)
}

/// The request-response codec of `/constellation/1`: frames carrying
/// [`Request`]s and [`Response`]s, with a maximum frame size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCodec {
    max_frame: usize,
}

impl FrameCodec {
    /// A codec refusing frames whose body is over `max_frame` bytes, in
    /// either direction.
    pub fn new(max_frame: usize) -> Self {
        FrameCodec { max_frame }
    }

    /// The largest body this codec reads or writes.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME)
    }
}

#[async_trait]
impl request_response::Codec for FrameCodec {
    type Protocol = StreamProtocol;
    type Request = Request;
    type Response = Response;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Request>
    where
        T: AsyncRead + Unpin + Send,
    {
        match read_frame(io, self.max_frame).await {
            Ok(request) => Ok(request),
            // A frame the peer should never have sent: the driver hears of
            // it (libp2p would drop the error after a debug line).
            Err(
                error @ (FrameError::TooLarge { .. }
                | FrameError::Malformed(_)
                | FrameError::TrailingBytes { .. }),
            ) => Ok(Request::Malformed(error.to_string())),
            Err(error) => Err(error.into()),
        }
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Response>
    where
        T: AsyncRead + Unpin + Send,
    {
        Ok(read_frame(io, self.max_frame).await?)
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Request,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        Ok(write_frame(io, &req, self.max_frame).await?)
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Response,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        Ok(write_frame(io, &res, self.max_frame).await?)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context as TaskContext, Poll};

    use libp2p::request_response::Codec as _;

    use super::*;
    use crate::context::{Context, ContextList, ExecutorContext, Preference};
    use crate::id::{ActivityId, NodeId};
    use crate::net::message::{
        Envelope, Member, MemberStatus, NetPeer, PackedActivity, RelabelRequest, WireEvent,
    };
    use crate::protocol::{MemberId, MemberInfo, Message, Notice, Travelling};

    fn executors() -> Vec<ExecutorContext> {
        vec![
            ExecutorContext::anywhere(),
            ExecutorContext::new([Context::new("GPU").with_range(1, 8)])
                .with_preference(Preference::Biggest),
        ]
    }

    fn sender() -> MemberId<NetPeer> {
        MemberId {
            node: NodeId::random(),
            peer: NetPeer {
                id: "12D3KooWExamplePeer".to_string(),
                addrs: vec!["/ip4/127.0.0.1/tcp/4001".to_string()],
            },
            bump: 3,
        }
    }

    fn event(node: NodeId) -> WireEvent {
        WireEvent {
            source: ActivityId::new(node, 1),
            target: ActivityId::new(node, 2),
            payload: vec![0x91, 0x2a, 0xff, 0x80],
        }
    }

    fn activity(node: NodeId, state: Vec<u8>) -> Travelling<PackedActivity> {
        Travelling {
            id: ActivityId::new(node, 7),
            body: PackedActivity {
                state,
                pending: vec![event(node)],
            },
            contexts: ContextList::anywhere(),
            attempt: 2,
        }
    }

    fn envelope(message: Message<PackedActivity, WireEvent>) -> Request {
        Request::Protocol(Box::new(signed(message)))
    }

    fn signed(message: Message<PackedActivity, WireEvent>) -> Envelope {
        Envelope {
            from: sender(),
            message,
        }
    }

    fn requests() -> Vec<Request> {
        let node = NodeId::random();
        let mut ranked = activity(node, vec![1, 2, 3]);
        ranked.contexts =
            ContextList::priority([Context::new("site:vu"), Context::new("size").with_rank(812)]);
        vec![
            envelope(Message::Swim(vec![0, 1, 2, 0xff])),
            envelope(Message::Hello {
                info: MemberInfo {
                    site: Some("vu".to_string()),
                    steal_pool: "pool".to_string(),
                    master: true,
                    executors: executors(),
                },
                answer: true,
            }),
            envelope(Message::Steal {
                request: 17,
                thief: ExecutorContext::anywhere(),
                steal_from: "pool".to_string(),
                max: 4,
            }),
            envelope(Message::Loot {
                request: 17,
                activities: vec![activity(node, vec![0xde, 0xad]), ranked],
            }),
            envelope(Message::Loot {
                request: 18,
                activities: Vec::new(),
            }),
            envelope(Message::Notices(vec![
                Notice::Event(event(node)),
                Notice::Finished(ActivityId::new(node, 7)),
                Notice::Moved {
                    id: ActivityId::new(node, 8),
                    at: NodeId::random(),
                },
                Notice::GaveUp {
                    id: ActivityId::new(node, 10),
                    reason: "its nodes died".to_string(),
                },
                Notice::Relabelled(executors()),
                Notice::Declined(ActivityId::new(node, 11)),
                Notice::Returned {
                    id: ActivityId::new(node, 9),
                    reason: "unknown type".to_string(),
                },
                Notice::LootTaken { request: 17 },
            ])),
            envelope(Message::Notices(Vec::new())),
            envelope(Message::Leaving),
            Request::Status,
            Request::Relabel(RelabelRequest {
                executors: Some(vec![0, 2]),
                context: ExecutorContext::new([Context::new("GPU")]),
            }),
            Request::App(br#"{"request":"jobs","all":true}"#.to_vec()),
        ]
    }

    fn responses() -> Vec<Response> {
        let status = MemberStatus {
            member: Member {
                node: NodeId::random(),
                peer: "12D3KooWExamplePeer".to_string(),
                addrs: vec!["/ip4/127.0.0.1/tcp/4001".to_string()],
                site: None,
                steal_pool: "default".to_string(),
                master: false,
                executors: executors(),
            },
            role: "agent".to_string(),
            host: "node017".to_string(),
            pid: 4242,
            uptime_s: 12.5,
            busy: vec![true, false],
            queued: vec![("GPU".to_string(), 3)],
            running: 1,
            waiting: 0,
            finished: 99,
            walltime_left_s: Some(3600.0),
            longest_call_s: 0.25,
            draining: false,
            members_known: 7,
        };
        let node = NodeId::random();
        vec![
            Response::Ack,
            Response::Reply(vec![
                signed(Message::Loot {
                    request: 3,
                    activities: vec![activity(node, vec![0xca, 0xfe])],
                }),
                signed(Message::Swim(vec![7; 40])),
            ]),
            Response::Reply(Vec::new()),
            Response::Refused("not a member".to_string()),
            Response::Status(Box::new(status)),
            Response::App(vec![0, 1, 2, 255]),
        ]
    }

    #[test]
    fn every_request_round_trips() {
        for req in requests() {
            let frame = encode_frame(&req, DEFAULT_MAX_FRAME).unwrap();
            let back: Request = decode_frame(&frame, DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(back, req);
        }
    }

    #[test]
    fn every_response_round_trips() {
        for res in responses() {
            let frame = encode_frame(&res, DEFAULT_MAX_FRAME).unwrap();
            let back: Response = decode_frame(&frame, DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(back, res);
        }
    }

    #[test]
    fn prefix_is_big_endian_body_length() {
        let frame = encode_frame(&Response::Ack, DEFAULT_MAX_FRAME).unwrap();
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len, frame.len() - PREFIX);
    }

    #[test]
    fn encoding_over_the_limit_is_refused() {
        let big = envelope(Message::Loot {
            request: 1,
            activities: vec![activity(NodeId::random(), vec![0; 1000])],
        });
        match encode_frame(&big, 100) {
            Err(FrameError::TooLarge { len, max: 100 }) => assert!(len > 1000),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn oversized_prefix_is_refused_without_a_body() {
        // Only the prefix is there: the decision must not need the body.
        let frame = 1_000_001u32.to_be_bytes();
        match decode_frame::<Request>(&frame, 1_000_000) {
            Err(FrameError::TooLarge {
                len: 1_000_001,
                max: 1_000_000,
            }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    /// A reader that hands out its bytes and then fails the test if read
    /// again, proving the codec stopped after the prefix.
    struct PrefixOnly {
        data: Vec<u8>,
        pos: usize,
    }

    impl AsyncRead for PrefixOnly {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut TaskContext<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            assert!(
                self.pos < self.data.len(),
                "codec read past the length prefix"
            );
            let n = buf.len().min(self.data.len() - self.pos);
            let start = self.pos;
            buf[..n].copy_from_slice(&self.data[start..start + n]);
            self.pos += n;
            Poll::Ready(Ok(n))
        }
    }

    #[test]
    fn codec_refuses_oversized_frame_before_reading_body() {
        let mut io = PrefixOnly {
            data: u32::MAX.to_be_bytes().to_vec(),
            pos: 0,
        };
        let mut codec = FrameCodec::new(1024);
        let protocol = StreamProtocol::new(PROTOCOL);
        // A request is handed to the driver as `Malformed`, to refuse the peer.
        let request = futures::executor::block_on(codec.read_request(&protocol, &mut io)).unwrap();
        match request {
            Request::Malformed(reason) => {
                assert!(reason.contains("exceeds the maximum"), "{reason}")
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        // A response has nobody to refuse: it is an error.
        let mut io = PrefixOnly {
            data: u32::MAX.to_be_bytes().to_vec(),
            pos: 0,
        };
        let err = futures::executor::block_on(codec.read_response(&protocol, &mut io)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("exceeds the maximum"), "{err}");
    }

    #[test]
    fn codec_round_trips_over_a_stream() {
        let protocol = StreamProtocol::new(PROTOCOL);
        let mut codec = FrameCodec::default();
        futures::executor::block_on(async {
            for req in requests() {
                let mut wire = futures::io::Cursor::new(Vec::new());
                codec
                    .write_request(&protocol, &mut wire, req.clone())
                    .await
                    .unwrap();
                wire.set_position(0);
                let back = codec.read_request(&protocol, &mut wire).await.unwrap();
                assert_eq!(back, req);
            }
            for res in responses() {
                let mut wire = futures::io::Cursor::new(Vec::new());
                codec
                    .write_response(&protocol, &mut wire, res.clone())
                    .await
                    .unwrap();
                wire.set_position(0);
                let back = codec.read_response(&protocol, &mut wire).await.unwrap();
                assert_eq!(back, res);
            }
        });
    }

    #[test]
    fn codec_reports_a_stream_that_ends_early() {
        let frame = encode_frame(&Request::Status, DEFAULT_MAX_FRAME).unwrap();
        let protocol = StreamProtocol::new(PROTOCOL);
        let mut codec = FrameCodec::default();
        for cut in 0..frame.len() {
            let mut wire = futures::io::Cursor::new(frame[..cut].to_vec());
            let err =
                futures::executor::block_on(codec.read_request(&protocol, &mut wire)).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::UnexpectedEof,
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn truncated_frames_are_errors() {
        let frame = encode_frame(&requests()[0], DEFAULT_MAX_FRAME).unwrap();
        for cut in 0..frame.len() {
            match decode_frame::<Request>(&frame[..cut], DEFAULT_MAX_FRAME) {
                Err(FrameError::Truncated { got, .. }) => assert_eq!(got, cut),
                other => panic!("cut at {cut}: expected Truncated, got {other:?}"),
            }
        }
    }

    #[test]
    fn trailing_bytes_are_errors() {
        let mut frame = encode_frame(&Request::Status, DEFAULT_MAX_FRAME).unwrap();
        frame.push(0);
        assert!(matches!(
            decode_frame::<Request>(&frame, DEFAULT_MAX_FRAME),
            Err(FrameError::TrailingBytes { extra: 1 })
        ));
    }

    #[test]
    fn junk_after_the_message_inside_the_body_is_malformed() {
        let mut body = rmp_serde::to_vec(&Request::Status).unwrap();
        body.push(0xc0);
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        assert!(matches!(
            decode_frame::<Request>(&frame, DEFAULT_MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for body in [
            &[][..],
            &[0xc1][..],
            &[0xff, 0xff, 0xff][..],
            &[0x92, 0x01][..],
            b"hello, world",
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
        ] {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            assert!(matches!(
                decode_frame::<Request>(&frame, DEFAULT_MAX_FRAME),
                Err(FrameError::Malformed(_))
            ));
            assert!(matches!(
                decode_frame::<Response>(&frame, DEFAULT_MAX_FRAME),
                Err(FrameError::Malformed(_))
            ));
        }
    }

    #[test]
    fn errors_map_to_io_kinds() {
        let kind = |e: FrameError| io::Error::from(e).kind();
        assert_eq!(
            kind(FrameError::TooLarge { len: 2, max: 1 }),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            kind(FrameError::Malformed("x".into())),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            kind(FrameError::TrailingBytes { extra: 1 }),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            kind(FrameError::Truncated {
                expected: 4,
                got: 0
            }),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            kind(FrameError::Io(io::ErrorKind::BrokenPipe.into())),
            io::ErrorKind::BrokenPipe
        );
    }

    #[test]
    fn activity_body_travels_as_bytes() {
        const MIB: usize = 1024 * 1024;
        // Values >= 128 would take two bytes each if written as integers.
        let body: Vec<u8> = (0..MIB).map(|i| 128 + (i % 128) as u8).collect();
        let loot = envelope(Message::Loot {
            request: 1,
            activities: vec![activity(NodeId::random(), body.clone())],
        });
        let frame = encode_frame(&loot, DEFAULT_MAX_FRAME).unwrap();
        assert!(frame.len() > MIB);
        assert!(frame.len() < MIB + 256, "frame is {} bytes", frame.len());
        let back: Request = decode_frame(&frame, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(back, loot);
    }

    /// Decodes `input` as both message types; anything that decodes must
    /// re-encode to a frame that decodes to the same value.
    fn check_input(input: &[u8], max: usize) {
        // The round trip may not fit `max`: the input may have used a
        // shorter encoding than ours.
        const ANY: usize = u32::MAX as usize;
        if let Ok(req) = decode_frame::<Request>(input, max) {
            let again = encode_frame(&req, ANY).expect("a decoded request re-encodes");
            assert_eq!(decode_frame::<Request>(&again, ANY).ok(), Some(req));
        }
        if let Ok(res) = decode_frame::<Response>(input, max) {
            let again = encode_frame(&res, ANY).expect("a decoded response re-encodes");
            assert_eq!(decode_frame::<Response>(&again, ANY).ok(), Some(res));
        }
    }

    /// The codec's fuzz corpus: every sample request and response as a
    /// frame, and frames made by hand to reach the decoder's edges.
    fn corpus_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/codec")
    }

    #[test]
    fn the_codec_corpus_replays_without_a_panic() {
        const MAX: usize = 1024 * 1024;
        let corpus = crate::fuzz::corpus(&corpus_dir());
        let mut decoded = 0;
        for (path, input) in &corpus {
            let outcome = std::panic::catch_unwind(|| check_input(input, MAX));
            assert!(outcome.is_ok(), "{} panics the decoder", path.display());
            if decode_frame::<Request>(input, MAX).is_ok()
                || decode_frame::<Response>(input, MAX).is_ok()
            {
                decoded += 1;
            }
        }
        // The sample messages are in it, and decode: the corpus is no
        // pile of errors only.
        assert!(
            decoded >= requests().len() + responses().len(),
            "{decoded} decode"
        );
    }

    #[test]
    fn fuzzing_the_codec_never_panics_and_what_decodes_round_trips() {
        const MAX: usize = 1024 * 1024;
        let seeds: Vec<Vec<u8>> = (crate::fuzz::corpus(&corpus_dir()).into_iter())
            .map(|(_, bytes)| bytes)
            .collect();
        let mut decoded = 0usize;
        crate::fuzz::run(&seeds, crate::fuzz::cases(20_000), |input| {
            if decode_frame::<Request>(input, MAX).is_ok()
                || decode_frame::<Response>(input, MAX).is_ok()
            {
                decoded += 1;
            }
            check_input(input, MAX);
        });
        // Mutations of valid frames must sometimes stay valid, or the test
        // only ever exercises the error paths.
        assert!(decoded > 0);
    }

    /// Writes the corpus again from the samples above (after a change to
    /// the messages): `cargo test -p constellation --lib -- --ignored
    /// write_the_codec_corpus`. Hand-made files are kept.
    #[test]
    #[ignore = "writes into the source tree; run by hand after the messages change"]
    fn write_the_codec_corpus() {
        let dir = corpus_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let frames = (requests()
            .iter()
            .map(|r| encode_frame(r, DEFAULT_MAX_FRAME)))
        .chain(
            responses()
                .iter()
                .map(|r| encode_frame(r, DEFAULT_MAX_FRAME)),
        )
        .collect::<Vec<_>>();
        for (index, frame) in frames.into_iter().enumerate() {
            let path = dir.join(format!("sample-{index:02}.bin"));
            std::fs::write(path, frame.unwrap()).unwrap();
        }
    }
}
