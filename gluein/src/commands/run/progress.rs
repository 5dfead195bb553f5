//! Progress while a graph runs, and the summary at its end.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use executors::shell::{Output, ShellResult};
use gluein::service::JobCounts;
use graph::{Graph, NodeReport};

use super::ProgressMode;

/// Counts for progress and the summary.
pub(super) struct Tally {
    pub(super) total: usize,
    pub(super) skipped: usize,
    pub(super) done: usize,
    pub(super) failed: usize,
    pub(super) cancelled: usize,
    /// Killed because the run stopped; they run again on resume.
    pub(super) interrupted: usize,
    pub(super) retried: usize,
    /// Per kind name: durations of successful runs, summarised in a
    /// bounded space. Entries with the same id as written (one per tile
    /// count, say) share a row.
    pub(super) durations: Vec<Option<Durations>>,
    /// The kinds' distinct names, for the table.
    kinds: Vec<String>,
    /// Per entry of the graph ([`Graph::kinds`]), its row in `kinds`.
    row_of_entry: Vec<usize>,
    /// Failure messages, in the order they happened.
    pub(super) failures: Vec<String>,
    /// Released work no executor offers to run, per context, when last
    /// checked.
    pub(super) unoffered: Vec<(String, usize)>,
}

impl Tally {
    pub(super) fn new(graph: &Graph, skipped: usize) -> Tally {
        // A file may have hundreds of thousands of entries: rows by name
        // through a map, not a search per entry.
        let mut kinds: Vec<String> = Vec::new();
        let mut row_of: HashMap<&str, usize> = HashMap::new();
        let row_of_entry = (graph.kinds().iter())
            .map(|kind| {
                *row_of.entry(kind.as_str()).or_insert_with(|| {
                    kinds.push(kind.clone());
                    kinds.len() - 1
                })
            })
            .collect();
        Tally {
            total: graph.len(),
            skipped,
            done: 0,
            failed: 0,
            cancelled: 0,
            interrupted: 0,
            retried: 0,
            durations: vec![None; kinds.len()],
            kinds,
            row_of_entry,
            failures: Vec::new(),
            unoffered: Vec::new(),
        }
    }

    pub(super) fn settled(&self) -> usize {
        self.done + self.failed + self.cancelled
    }

    pub(super) fn count(&mut self, graph: &Graph, report: &NodeReport) {
        let n = report.node();
        match report {
            NodeReport::Finished { result, .. } => {
                if result.attempts > 1 {
                    self.retried += 1;
                }
                if result.is_success() {
                    self.done += 1;
                    self.durations[self.row_of_entry[graph.kind_of(n)]]
                        .get_or_insert_with(Durations::default)
                        .add(result.duration.as_secs_f64());
                } else {
                    self.failed += 1;
                    self.failures.push(failure_text(graph.id(n), result));
                }
            }
            NodeReport::Cancelled { .. } => self.cancelled += 1,
            NodeReport::Refused { reason, .. } => {
                self.failed += 1;
                self.failures.push(format!(
                    "{}: not run ({}): {reason}",
                    graph.id(n),
                    graph.place(n)
                ));
            }
            NodeReport::Lost { reason, .. } => {
                self.failed += 1;
                self.failures.push(format!("{}: {reason}", graph.id(n)));
            }
        }
    }

    pub(super) fn summary(&self, elapsed: Duration) -> String {
        let mut out = String::new();
        let run = self.total - self.skipped;
        out.push_str(&format!(
            "\n{} of {} activities done in {:.1} s ({:.0}/s)",
            self.done + self.skipped,
            self.total,
            elapsed.as_secs_f64(),
            // What this run settled, not what it set out to: an interrupted
            // run would otherwise claim the rate of work it never did.
            self.settled() as f64 / elapsed.as_secs_f64().max(1e-9),
        ));
        for (count, what) in [
            (self.skipped, "skipped as done before"),
            (self.failed, "failed"),
            (self.cancelled, "cancelled because of a failure"),
            (self.retried, "needed retries"),
        ] {
            if count > 0 {
                out.push_str(&format!(", {count} {what}"));
            }
        }
        out.push('\n');
        let unfinished = run - self.settled();
        if unfinished > 0 {
            out.push_str(&format!(
                "interrupted with {unfinished} activities not finished"
            ));
            if self.interrupted > 0 {
                out.push_str(&format!(
                    " ({} killed as the run stopped)",
                    self.interrupted
                ));
            }
            if !self.unoffered.is_empty() {
                out.push_str(&format!("; {}", unoffered_text(&self.unoffered)));
            }
            out.push('\n');
        }
        // In the order of the kinds' names.
        let mut rows: Vec<(&str, &Durations)> = (self.kinds.iter().zip(&self.durations))
            .filter_map(|(kind, durations)| Some((kind.as_str(), durations.as_ref()?)))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        if !rows.is_empty() {
            let width = rows
                .iter()
                .map(|(kind, _)| kind.len())
                .max()
                .unwrap_or(4)
                .max(4);
            out.push_str(&format!(
                "\n{:width$}  {:>7}  {:>9}  {:>9}  {:>9}\n",
                "kind", "done", "min s", "median s", "max s"
            ));
            for (kind, durations) in rows {
                out.push_str(&format!(
                    "{kind:width$}  {:>7}  {:>9.3}  {:>9.3}  {:>9.3}\n",
                    durations.count,
                    durations.min,
                    durations.median(),
                    durations.max
                ));
            }
        }
        for failure in self.failures.iter().take(10) {
            out.push_str(&format!("\nFAILED {failure}\n"));
        }
        if self.failures.len() > 10 {
            out.push_str(&format!(
                "\n... and {} more failures; see the journal\n",
                self.failures.len() - 10
            ));
        }
        out
    }
}

/// Durations of one kind's successful runs in a fixed space, however many
/// run: the count, the shortest and the longest exactly, and the median
/// estimated from a uniform sample of at most [`Durations::SAMPLE`] of them
/// (reservoir sampling, Vitter's algorithm R). Up to that many runs the
/// median is exact; beyond, it is the sample's median, typically within a
/// few percentiles of the true one.
#[derive(Debug, Clone)]
pub(super) struct Durations {
    pub(super) count: u64,
    pub(super) min: f64,
    pub(super) max: f64,
    sample: Vec<f64>,
    /// State of the generator that picks which durations the sample keeps.
    random: u64,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sample: Vec::new(),
            random: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl Durations {
    /// Durations kept for the median.
    pub(super) const SAMPLE: usize = 1024;

    pub(super) fn add(&mut self, seconds: f64) {
        self.count += 1;
        self.min = self.min.min(seconds);
        self.max = self.max.max(seconds);
        if self.sample.len() < Self::SAMPLE {
            self.sample.push(seconds);
            return;
        }
        // The n-th duration replaces a kept one with probability SAMPLE/n.
        // xorshift64: good enough to pick slots, and needs no dependency.
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let slot = self.random % self.count;
        if (slot as usize) < Self::SAMPLE {
            self.sample[slot as usize] = seconds;
        }
    }

    /// The median of the sample (exact up to [`Self::SAMPLE`] runs).
    pub(super) fn median(&self) -> f64 {
        let mut sorted = self.sample.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// A failure with the last lines of its error output.
pub(super) fn failure_text(id: &str, result: &ShellResult) -> String {
    let mut text = format!("{id}: {}", result.command);
    text.push_str(&format!(" {}", result.outcome));
    if result.attempts > 1 {
        text.push_str(&format!(" on the last of {} attempts", result.attempts));
    }
    if let Some(path) = result.stderr.path() {
        text.push_str(&format!("\n  stderr: {}", path.display()));
    }
    if let Some(place) = result.stderr.stream_place() {
        // All of it: `constellation output RUN ID --stderr`.
        text.push_str(&format!(
            "\n  stderr: in the stream {}",
            place.file.display()
        ));
    }
    if result.stderr == Output::Empty {
        // Its empty file was removed: say so rather than name no file.
        text.push_str(" and wrote no error output");
    }
    // Only the stream's end is read, and long lines are cut: a command may
    // write gigabytes of error output, all on one line.
    for line in result.stderr.last_lines(5) {
        text.push_str(&format!("\n  | {line}"));
    }
    text
}

/// Progress while the graph runs: a bar on a terminal, or a line every 10 s.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    /// `--progress none`: not even the notices.
    quiet: bool,
    last_line: Instant,
    /// The contexts of the last notice about work no executor offers to run.
    unoffered_labels: Vec<String>,
    /// `--job-progress`: the counts, for the job service.
    job_file: Option<JobProgressFile>,
}

impl Progress {
    pub(super) fn new(mode: ProgressMode, total: u64) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = matches!(mode, ProgressMode::Bar) || (mode == ProgressMode::Auto && terminal);
        let bar = bar.then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {pos}/{len} {msg} eta {eta}",
                )
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar
        });
        Progress {
            lines: bar.is_none()
                && (mode == ProgressMode::Lines || (mode == ProgressMode::Auto && !terminal)),
            bar,
            quiet: mode == ProgressMode::None,
            last_line: Instant::now(),
            unoffered_labels: Vec::new(),
            job_file: None,
        }
    }

    /// Also writes the counts to `path` at every update (`--job-progress`).
    pub(super) fn with_job_file(mut self, path: &Path) -> Progress {
        self.job_file = Some(JobProgressFile::new(path));
        self
    }

    /// Says at once when released work starts (or stops) waiting for
    /// labels that no executor offers: the bar or a progress line every
    /// 10 s would show it late, and only a changing ETA would hint at it.
    pub(super) fn unoffered(&mut self, unoffered: &[(String, usize)]) {
        let labels: Vec<&str> = unoffered
            .iter()
            .map(|(context, _)| context.as_str())
            .collect();
        if labels == self.unoffered_labels {
            return;
        }
        let line = if unoffered.is_empty() {
            "every released activity has an executor that offers its labels again".to_string()
        } else {
            format!(
                "{}; relabel executors or add some that offer them",
                unoffered_text(unoffered)
            )
        };
        self.unoffered_labels = labels.into_iter().map(String::from).collect();
        match &self.bar {
            Some(bar) => bar.println(line),
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }

    /// Says `line` at once, above the bar if there is one: news that must
    /// not wait for the next progress line, shown even with
    /// `--progress none`.
    pub(super) fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Shows the counts; `running` is how many activities run now,
    /// wherever they run.
    pub(super) fn show(&mut self, tally: &Tally, running: usize, elapsed: Duration) {
        if let Some(file) = &mut self.job_file {
            file.write(tally, running);
        }
        let mut message = format!(
            "running {running}, failed {}, cancelled {}",
            tally.failed, tally.cancelled
        );
        if !tally.unoffered.is_empty() {
            message.push_str(&format!(", {}", unoffered_text(&tally.unoffered)));
        }
        if let Some(bar) = &self.bar {
            bar.set_position(tally.settled() as u64);
            bar.set_message(message);
        } else if self.lines && self.last_line.elapsed() >= Duration::from_secs(10) {
            self.last_line = Instant::now();
            let total = tally.total - tally.skipped;
            let settled = tally.settled();
            // Work that no executor can take has no end to estimate.
            let eta = (settled > 0 && tally.unoffered.is_empty())
                .then(|| elapsed.as_secs_f64() * (total - settled) as f64 / settled as f64);
            eprintln!(
                "progress: {settled}/{total} settled ({} done), {message}{}",
                tally.done,
                eta.map_or(String::new(), |s| format!(", eta {s:.0} s"))
            );
        }
    }

    pub(super) fn finish(&mut self, tally: &Tally) {
        if let Some(bar) = self.bar.take() {
            bar.set_position(tally.settled() as u64);
            bar.finish_and_clear();
        }
    }
}

/// The run's counts as a JSON file that is replaced whole at each write
/// (a temporary file beside it, renamed over it), so that a reader never
/// sees half of one: `--job-progress`, read by the pool node's job
/// service for `constellation jobs`.
pub(super) struct JobProgressFile {
    path: PathBuf,
    /// What was written last: the same counts are not written again.
    last: Option<JobCounts>,
    /// Whether a failed write was reported: once is enough.
    warned: bool,
}

impl JobProgressFile {
    pub(super) fn new(path: &Path) -> JobProgressFile {
        JobProgressFile {
            path: path.to_path_buf(),
            last: None,
            warned: false,
        }
    }

    /// Writes the counts of `tally` with `running` activities running now.
    /// A failed write is a warning, not the run's failure: the counts are a
    /// view, and the journal keeps the record.
    pub(super) fn write(&mut self, tally: &Tally, running: usize) {
        let counts = job_counts(tally, running);
        if self.last == Some(counts) {
            return;
        }
        match self.replace(&counts) {
            Ok(()) => self.last = Some(counts),
            Err(error) if !self.warned => {
                self.warned = true;
                eprintln!(
                    "warning: cannot write the job progress file {}: {error}",
                    self.path.display()
                );
            }
            Err(_) => {}
        }
    }

    fn replace(&self, counts: &JobCounts) -> std::io::Result<()> {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        let temporary = self.path.with_file_name(name);
        std::fs::write(&temporary, serde_json::to_vec(counts)?)?;
        std::fs::rename(&temporary, &self.path)
    }
}

/// The counts of a job as the job service shows them: skipped activities
/// (done in an earlier run of the journal) count as done, and those killed
/// as the run stopped as waiting, as they are pending in the journal.
pub(super) fn job_counts(tally: &Tally, running: usize) -> JobCounts {
    let total = tally.total as u64;
    let done = (tally.done + tally.skipped) as u64;
    let failed = tally.failed as u64;
    let cancelled = tally.cancelled as u64;
    let running = running as u64;
    JobCounts {
        waiting: total.saturating_sub(done + failed + cancelled + running),
        running,
        done,
        failed,
        cancelled,
        total,
    }
}

/// `12 waiting for labels no executor offers: gpu (12)`.
pub(super) fn unoffered_text(unoffered: &[(String, usize)]) -> String {
    let total: usize = unoffered.iter().map(|(_, n)| n).sum();
    let each: Vec<String> = (unoffered.iter())
        .map(|(context, n)| format!("{context} ({n})"))
        .collect();
    format!(
        "{total} waiting for labels no executor offers: {}",
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{Durations, JobProgressFile, Tally};
    use gluein::service::JobCounts;

    /// The file holds the counts as JSON the job service reads back, is
    /// replaced whole (no temporary file is left beside it), and counts
    /// what an earlier run did as done.
    #[test]
    fn the_job_progress_file_is_replaced_with_the_counts() {
        let dir = std::env::temp_dir().join(format!("job-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "[[activity]]\nid = \"a-{n}\"\nfor = { n = \"1..=5\" }\ncommand = \"true\"\n";
        let graph = graph::Graph::parse(text, graph::Format::Toml, "g.toml", &dir).unwrap();
        let mut tally = Tally::new(&graph, 1);
        tally.done = 1;
        tally.failed = 1;
        let path = dir.join("progress.json");
        let mut file = JobProgressFile::new(&path);
        file.write(&tally, 2);
        let read = |path: &std::path::Path| -> JobCounts {
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        };
        let expected = JobCounts {
            waiting: 0,
            running: 2,
            done: 2,
            failed: 1,
            cancelled: 0,
            total: 5,
        };
        assert_eq!(read(&path), expected);
        tally.done = 3;
        file.write(&tally, 0);
        assert_eq!(
            read(&path),
            JobCounts {
                running: 0,
                done: 4,
                ..expected
            }
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["progress.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The summary stays the same size however many runs it takes in, and
    /// its figures stay right: exact count, min and max, a median near the
    /// true one.
    #[test]
    fn durations_are_summarised_in_bounded_space() {
        let mut durations = Durations::default();
        // 0.000 .. 0.999 s, each 100 times, in a scrambled order.
        for k in 0..100_000u64 {
            durations.add(((k * 7_919) % 1_000) as f64 / 1_000.0);
        }
        assert_eq!(durations.count, 100_000);
        assert_eq!(durations.sample.len(), Durations::SAMPLE);
        assert_eq!(durations.min, 0.0);
        assert_eq!(durations.max, 0.999);
        let median = durations.median();
        assert!((0.4..=0.6).contains(&median), "{median}");
        // Few runs: exact.
        let mut few = Durations::default();
        for s in [3.0, 1.0, 2.0] {
            few.add(s);
        }
        assert_eq!(
            (few.count, few.min, few.median(), few.max),
            (3, 1.0, 2.0, 3.0)
        );
    }
}
