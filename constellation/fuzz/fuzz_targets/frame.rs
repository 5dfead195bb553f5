//! Feeds arbitrary bytes to the frame decoder, as a peer on the network
//! could. Decoding must never panic, and whatever decodes must re-encode to
//! a frame that decodes to the same message.
//!
//! Run with `cargo +nightly fuzz run frame` from `constellation/`. The
//! unit test `net::codec::tests::decoding_random_and_mutated_frames_never_panics`
//! makes the same checks on stable.

#![no_main]

use constellation::net::codec::{decode_frame, encode_frame};
use constellation::net::message::{Request, Response};
use libfuzzer_sys::fuzz_target;

/// Smaller than the default, so the fuzzer spends its time on structure
/// rather than on huge allocations.
const MAX: usize = 1024 * 1024;

/// The limit for the round trip. A message that decoded within `MAX` may
/// have been sent in a longer encoding than ours, or a shorter one.
const ANY: usize = u32::MAX as usize;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = decode_frame::<Request>(data, MAX) {
        let frame = encode_frame(&req, ANY).expect("a decoded request re-encodes");
        let again = decode_frame::<Request>(&frame, ANY).expect("a re-encoded request decodes");
        assert_eq!(again, req);
    }
    if let Ok(res) = decode_frame::<Response>(data, MAX) {
        let frame = encode_frame(&res, ANY).expect("a decoded response re-encodes");
        let again = decode_frame::<Response>(&frame, ANY).expect("a re-encoded response decodes");
        assert_eq!(again, res);
    }
});
