//! `constellation output`: one activity's output, read back from where its
//! run kept it: its own `stdout`/`stderr` files, or its region of a stream
//! file (`constellation run --output stream`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;
use executors::shell::stream::{self, Channel};
use journal::{AttemptRow, Journal, RunRow};

/// Arguments of `constellation output`.
#[derive(Args)]
#[command(after_help = "\
Examples:
  constellation output constellation-runs/pipeline-20261121T101500Z detect-7
  constellation output constellation-runs/pipeline-20261121T101500Z detect-7 --stderr
  constellation output run/journal.db detect-7 --attempt 1     # the first of its attempts
  constellation output run/journal.db detect-7 --run 1         # as the first run left it

It prints the output exactly as the command wrote it, bytes and all,
whether the run kept it in files (--output files) or in stream files
(--output stream). By default: the latest attempt of the latest run that
ran the activity.")]
pub(crate) struct OutputArgs {
    /// The run: its directory (constellation-runs/NAME-TIME) or its
    /// journal.db.
    run: PathBuf,
    /// The activity's id, as the graph renders it (e.g. detect-7).
    id: String,
    /// Print its standard error instead of its standard output.
    #[arg(long)]
    stderr: bool,
    /// Which run of the journal (1 is the first, each resume adds one).
    /// Default: the latest that ran the activity.
    #[arg(long = "run", value_name = "N")]
    run_number: Option<i64>,
    /// Which attempt (1 is the first). Default: the last.
    #[arg(long, value_name = "N")]
    attempt: Option<i64>,
}

/// Prints the chosen attempt's output.
pub(crate) fn main(args: OutputArgs) -> anyhow::Result<ExitCode> {
    let journal_path = journal_path(&args.run)?;
    let journal = Journal::open_read_only(&journal_path)?;
    let attempts = journal.attempts_of(&args.id)?;
    if attempts.is_empty() {
        bail!("{}", no_attempts(&journal, &journal_path, &args.id)?);
    }
    let attempt = choose(&attempts, &args)?;
    let runs = journal.runs()?;
    let run = runs
        .iter()
        .find(|r| r.run == attempt.run)
        .with_context(|| {
            format!(
                "the journal has attempts of run {} but no such run",
                attempt.run
            )
        })?;
    let journal_dir = journal_path.parent().unwrap_or(Path::new("."));
    let (channel, name, file, bytes) = match args.stderr {
        false => (
            Channel::Stdout,
            "standard output",
            &attempt.recorded.stdout,
            attempt.recorded.stdout_bytes,
        ),
        true => (
            Channel::Stderr,
            "standard error",
            &attempt.recorded.stderr,
            attempt.recorded.stderr_bytes,
        ),
    };
    let what = format!(
        "the {name} of {} (run {}, attempt {})",
        args.id, attempt.run, attempt.recorded.attempt
    );
    let mut out = std::io::stdout().lock();
    if bytes == Some(0) {
        // The command printed nothing there: nothing was kept, nothing to read.
    } else if let Some(file) = file {
        let path = locate(file, run, journal_dir);
        let mut source = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {what}, kept in {}", path.display()))?;
        std::io::copy(&mut source, &mut out)
            .with_context(|| format!("cannot read {what} from {}", path.display()))?;
    } else if let Some(place) = &attempt.recorded.stream {
        let place = stream::StreamPlace {
            file: locate(&place.file, run, journal_dir),
            offset: place.offset.max(0) as u64,
            length: place.length.max(0) as u64,
        };
        if !place.file.exists() {
            bail!(
                "{what} is in the stream file {}, which is not there (moved or deleted?)",
                place.file.display()
            );
        }
        stream::copy_channel(&place, channel, &mut out)
            .with_context(|| format!("cannot read all of {what}"))?;
    } else if bytes.unwrap_or(0) > 0 {
        bail!(
            "{what} was {} bytes, but the run kept no copy of it",
            bytes.unwrap_or(0)
        );
    }
    out.flush().context("cannot write to standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// The journal of the run at `run`: the file itself, or `journal.db` in it.
fn journal_path(run: &Path) -> anyhow::Result<PathBuf> {
    if run.is_dir() {
        let path = run.join("journal.db");
        if !path.is_file() {
            bail!(
                "{} has no journal.db: give a run directory (constellation-runs/NAME-TIME) or a journal file",
                run.display()
            );
        }
        return Ok(path);
    }
    if !run.exists() {
        bail!(
            "no run at {}: give a run directory (constellation-runs/NAME-TIME) or a journal file",
            run.display()
        );
    }
    Ok(run.to_path_buf())
}

/// The attempt the arguments ask for, among an activity's `attempts`
/// (in run, then attempt order).
fn choose<'a>(attempts: &'a [AttemptRow], args: &OutputArgs) -> anyhow::Result<&'a AttemptRow> {
    let run = match args.run_number {
        Some(run) => run,
        None => attempts.iter().map(|a| a.run).max().expect("some attempts"),
    };
    let of_run: Vec<&AttemptRow> = attempts.iter().filter(|a| a.run == run).collect();
    if of_run.is_empty() {
        let runs: Vec<String> = attempts.iter().map(|a| a.run.to_string()).collect();
        let mut runs = runs;
        runs.dedup();
        bail!(
            "{} did not run in run {run}; it ran in run {}",
            args.id,
            runs.join(", ")
        );
    }
    match args.attempt {
        None => Ok(of_run
            .iter()
            .max_by_key(|a| a.recorded.attempt)
            .expect("some attempts")),
        Some(number) => of_run
            .iter()
            .find(|a| a.recorded.attempt == number)
            .copied()
            .with_context(|| {
                let last = of_run.iter().map(|a| a.recorded.attempt).max().unwrap_or(0);
                format!(
                    "{} has no attempt {number} in run {run}: it has attempts 1 to {last}",
                    args.id
                )
            }),
    }
}

/// Where a path the journal names is now. Paths are written as the run
/// named them, relative to where it ran; a path in the run's output
/// directory is found from the journal's directory instead, so the
/// command works from anywhere, and after the run directory has moved.
fn locate(stored: &str, run: &RunRow, journal_dir: &Path) -> PathBuf {
    let stored = Path::new(stored);
    let output_dir = Path::new(&run.output_dir);
    if let (Ok(inside), Some(name)) = (stored.strip_prefix(output_dir), output_dir.file_name()) {
        let moved = journal_dir.join(name).join(inside);
        if moved.exists() || !stored.exists() {
            return moved;
        }
    }
    stored.to_path_buf()
}

/// Why `id` has no attempts: it is not in the journal (with the closest
/// ids, if any are close), or it never ran.
fn no_attempts(journal: &Journal, path: &Path, id: &str) -> anyhow::Result<String> {
    let activities = journal.activities()?;
    if let Some(activity) = activities.iter().find(|a| a.id == id) {
        let why = match &activity.message {
            Some(message) => format!(" ({message})"),
            None => String::new(),
        };
        return Ok(format!(
            "{id} has no attempt in {}: it is {}{why}",
            path.display(),
            activity.state.as_str()
        ));
    }
    let close = closest(id, activities.iter().map(|a| a.id.as_str()));
    let hint = match close.as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean {one}?"),
        many => format!("; did you mean one of {}?", many.join(", ")),
    };
    Ok(format!(
        "no activity {id} in {} ({} activities){hint}",
        path.display(),
        activities.len()
    ))
}

/// The ids at the smallest edit distance from `id`, if it is at most 2:
/// a typo's likely meaning. One pass, with a band of width 5 per id, so a
/// million ids take well under a second.
fn closest<'a>(id: &str, ids: impl Iterator<Item = &'a str>) -> Vec<String> {
    const MOST: usize = 2;
    let wanted: Vec<char> = id.chars().collect();
    let mut best = MOST + 1;
    let mut found = Vec::new();
    for candidate in ids {
        let Some(distance) = bounded_distance(&wanted, candidate, best.min(MOST)) else {
            continue;
        };
        if distance < best {
            best = distance;
            found.clear();
        }
        if found.len() < 5 {
            found.push(candidate.to_string());
        }
    }
    found
}

/// The edit distance between `a` and `b`, if it is at most `most`.
fn bounded_distance(a: &[char], b: &str, most: usize) -> Option<usize> {
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > most {
        return None;
    }
    let far = most + 1;
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![far; b.len() + 1];
    for i in 1..=a.len() {
        let low = i.saturating_sub(most).max(1);
        let high = (i + most).min(b.len());
        current.fill(far);
        current[0] = i;
        for j in low..=high {
            let substitute = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            current[j] = substitute
                .min(previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(far);
        }
        if current[..=b.len()].iter().all(|&d| d > most) {
            return None;
        }
        std::mem::swap(&mut previous, &mut current);
    }
    Some(previous[b.len()]).filter(|&d| d <= most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_ids() {
        let ids = ["detect-7", "detect-17", "detect-71", "ingest", "report"];
        assert_eq!(closest("detetc-7", ids.into_iter()), ["detect-7"]);
        assert_eq!(
            closest("detect-1", ids.into_iter()),
            ["detect-7", "detect-17", "detect-71"]
        );
        assert!(closest("something-else", ids.into_iter()).is_empty());
        assert_eq!(closest("injest", ids.into_iter()), ["ingest"]);
    }

    #[test]
    fn the_distance_stops_at_its_bound() {
        let a: Vec<char> = "kitten".chars().collect();
        assert_eq!(bounded_distance(&a, "sitting", 3), Some(3));
        assert_eq!(bounded_distance(&a, "sitting", 2), None);
        assert_eq!(bounded_distance(&a, "kitten", 0), Some(0));
        assert_eq!(bounded_distance(&[], "ab", 2), Some(2));
    }
}
