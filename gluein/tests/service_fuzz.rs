//! The job service's requests and responses, fuzzed on stable: what a
//! member of the pool (anyone with the pool key) may send the pool node,
//! and what a client reads back, as JSON (`gluein::service`).
//!
//! The corpus (`gluein/fuzz/corpus/service`) is replayed first, then a
//! bounded number of inputs made from it by `constellation::fuzz`
//! (`CONSTELLATION_FUZZ_CASES` runs more). Decoding must never panic,
//! whatever the bytes, and whatever decodes must encode to JSON that
//! decodes to the same value.

use std::path::Path;

use constellation::fuzz;
use gluein::service::{decode, encode, ServiceRequest, ServiceResponse};

fn corpus() -> Vec<(std::path::PathBuf, Vec<u8>)> {
    fuzz::corpus(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/service"))
}

/// Decodes `input` as a request and as a response; what decodes round-trips.
/// Whether either decoded.
fn check(input: &[u8]) -> bool {
    let request = decode::<ServiceRequest>(input);
    if let Ok(request) = &request {
        let again = decode::<ServiceRequest>(&encode(request));
        assert_eq!(again.as_ref(), Ok(request), "a request does not round-trip");
    }
    let response = decode::<ServiceResponse>(input);
    if let Ok(response) = &response {
        let again = decode::<ServiceResponse>(&encode(response));
        assert_eq!(
            again.as_ref(),
            Ok(response),
            "a response does not round-trip"
        );
    }
    request.is_ok() || response.is_ok()
}

#[test]
fn the_service_corpus_replays_without_a_panic() {
    let corpus = corpus();
    let mut decoded = 0;
    for (path, input) in &corpus {
        let outcome = std::panic::catch_unwind(|| check(input));
        match outcome {
            Ok(true) => decoded += 1,
            Ok(false) => {}
            Err(_) => panic!("{} panics the service's decoding", path.display()),
        }
    }
    // The plain requests (jobs, job, cancel, kill_origin) decode: the
    // corpus is no pile of errors only.
    assert!(decoded >= 4, "only {decoded} of {} decode", corpus.len());
}

#[test]
fn fuzzing_service_requests_never_panics_and_what_decodes_round_trips() {
    let seeds: Vec<Vec<u8>> = corpus().into_iter().map(|(_, bytes)| bytes).collect();
    let mut decoded = 0usize;
    fuzz::run(&seeds, fuzz::cases(20_000), |input| {
        if check(input) {
            decoded += 1;
        }
    });
    // Mutations of valid requests must sometimes stay valid, or only the
    // error paths were tried.
    assert!(decoded > 0);
}
