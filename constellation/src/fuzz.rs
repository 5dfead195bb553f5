//! Fuzzing on stable Rust, for tests: a corpus of inputs kept in the
//! repository, and a bounded number of inputs made from it by mutations
//! that [`arbitrary`] draws from a seeded byte stream, so a failure
//! reproduces from its case number.
//!
//! A fuzz test replays every corpus file, then [`run`]s the mutations,
//! calling its check on each input; the check must not panic on any
//! input, however malformed. The codec's frames
//! (`constellation/fuzz/corpus/codec`) and the job service's requests
//! (`gluein/fuzz/corpus/service`) are fuzzed this way.
//!
//! Compiled for this crate's own tests and with the `fuzzing` feature
//! (which other crates' tests turn on).

use std::path::{Path, PathBuf};

use arbitrary::Unstructured;

/// The variable that sets how many cases [`run`] tries, for a longer run
/// than the test suite's (`CONSTELLATION_FUZZ_CASES=1000000 cargo test ...`).
pub const CASES_VARIABLE: &str = "CONSTELLATION_FUZZ_CASES";

/// The corpus in `dir`: each file's path and bytes, in name order.
///
/// # Panics
/// If `dir` cannot be read or holds no file: a fuzz test without its
/// corpus would test nothing and pass.
pub fn corpus(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot read the fuzz corpus {}: {error}", dir.display()));
    let mut files: Vec<PathBuf> = (entries.filter_map(Result::ok))
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the fuzz corpus {} holds no file",
        dir.display()
    );
    (files.into_iter())
        .map(|path| {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
            (path, bytes)
        })
        .collect()
}

/// How many cases [`run`] tries: `default`, or what [`CASES_VARIABLE`] says.
///
/// # Panics
/// If the variable is set to something other than a number.
pub fn cases(default: usize) -> usize {
    match std::env::var(CASES_VARIABLE) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_VARIABLE}={text:?} is not a number of cases")),
        Err(_) => default,
    }
}

/// Calls `check` on `cases` inputs, each made from the `seeds` by a few
/// mutations, or made of bytes alone; case `n` is always the same input.
/// A panic in `check` names the case.
///
/// # Panics
/// If `seeds` is empty, or `check` panics.
pub fn run(seeds: &[Vec<u8>], cases: usize, mut check: impl FnMut(&[u8])) {
    assert!(!seeds.is_empty(), "fuzzing needs at least one seed input");
    let mut bytes = ByteStream(0x9e37_79b9_7f4a_7c15);
    for case in 0..cases {
        let entropy: Vec<u8> = (0..256).map(|_| bytes.next()).collect();
        let input = mutant(&mut Unstructured::new(&entropy), seeds);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        if let Err(panic) = outcome {
            eprintln!("fuzz case {case} of {cases} failed on the input {input:02x?}");
            std::panic::resume_unwind(panic);
        }
    }
}

/// One input: a seed changed by one to four mutations, or random bytes.
fn mutant(u: &mut Unstructured<'_>, seeds: &[Vec<u8>]) -> Vec<u8> {
    let pick = |u: &mut Unstructured<'_>| u.choose_index(seeds.len()).unwrap_or(0);
    let mut input = seeds[pick(u)].clone();
    let mutations = u.int_in_range(1..=4).unwrap_or(1);
    for _ in 0..mutations {
        let at = |u: &mut Unstructured<'_>, len: usize| u.choose_index(len.max(1)).unwrap_or(0);
        match u.int_in_range(0..=7).unwrap_or(0) {
            // A bit flipped.
            0 if !input.is_empty() => {
                let i = at(u, input.len());
                input[i] ^= 1 << u.int_in_range(0..=7).unwrap_or(0);
            }
            // A byte replaced by an interesting one or any.
            1 if !input.is_empty() => {
                let i = at(u, input.len());
                let interesting = [0x00, 0x7f, 0x80, 0xc0, 0xc1, 0xdc, 0xdd, 0xff, b'"', b'{'];
                input[i] = match u.ratio(1, 2).unwrap_or(false) {
                    true => *u.choose(&interesting).unwrap_or(&0),
                    false => u.arbitrary().unwrap_or(0),
                };
            }
            // Bytes inserted.
            2 => {
                let i = at(u, input.len() + 1);
                let len = u.int_in_range(1..=16).unwrap_or(1);
                let new: Vec<u8> = (0..len).map(|_| u.arbitrary().unwrap_or(0)).collect();
                input.splice(i..i, new);
            }
            // A range removed.
            3 if !input.is_empty() => {
                let i = at(u, input.len());
                let len = u.int_in_range(1..=input.len() - i).unwrap_or(1);
                input.drain(i..i + len);
            }
            // Cut short.
            4 => input.truncate(at(u, input.len() + 1)),
            // Another seed's tail after this one's head.
            5 => {
                let other = &seeds[pick(u)];
                input.truncate(at(u, input.len() + 1));
                let from = at(u, other.len() + 1).min(other.len());
                input.extend_from_slice(&other[from..]);
            }
            // A range repeated, as a nesting or a list grown.
            6 if !input.is_empty() => {
                let i = at(u, input.len());
                let len = u.int_in_range(1..=(input.len() - i).min(32)).unwrap_or(1);
                let copy = input[i..i + len].to_vec();
                let times = u.int_in_range(1..=64).unwrap_or(1);
                for _ in 0..times {
                    input.splice(i..i, copy.iter().copied());
                }
            }
            // Bytes alone.
            7 => {
                let len = u.int_in_range(0..=64).unwrap_or(0);
                input = (0..len).map(|_| u.arbitrary().unwrap_or(0)).collect();
            }
            _ => {}
        }
    }
    input
}

/// The bytes the mutations are drawn from (xorshift64*): seeded, so case
/// `n` is the same input on every machine.
struct ByteStream(u64);

impl ByteStream {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_case_is_the_same_input_and_inputs_vary() {
        let seeds = vec![
            b"{\"request\":\"jobs\",\"all\":true}".to_vec(),
            vec![0, 0, 0, 1, 0xc0],
        ];
        let mut first = Vec::new();
        run(&seeds, 200, |input| first.push(input.to_vec()));
        let mut second = Vec::new();
        run(&seeds, 200, |input| second.push(input.to_vec()));
        assert_eq!(first, second, "case n is always the same input");
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert!(
            distinct.len() > 150,
            "only {} distinct inputs of 200",
            distinct.len()
        );
    }

    #[test]
    #[should_panic(expected = "holds no file")]
    fn an_empty_corpus_is_an_error() {
        let dir =
            std::env::temp_dir().join(format!("constellation-empty-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        corpus(&dir);
    }
}
