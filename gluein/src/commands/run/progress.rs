//! Progress while a graph runs, and the summary at its end.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use executors::shell::{Output, ShellResult};
use graph::{Graph, NodeReport};

use super::ProgressMode;

/// Counts for progress and the summary.
pub(super) struct Tally {
    pub(super) total: usize,
    pub(super) skipped: usize,
    pub(super) done: usize,
    pub(super) failed: usize,
    pub(super) cancelled: usize,
    pub(super) retried: usize,
    /// Per kind: durations of successful runs.
    pub(super) durations: BTreeMap<String, Vec<f64>>,
    /// Failure messages, in the order they happened.
    pub(super) failures: Vec<String>,
    /// Released work no executor offers to run, per context, when last
    /// checked.
    pub(super) unoffered: Vec<(String, usize)>,
}

impl Tally {
    pub(super) fn new(graph: &Graph, skipped: usize) -> Tally {
        Tally {
            total: graph.nodes.len(),
            skipped,
            done: 0,
            failed: 0,
            cancelled: 0,
            retried: 0,
            durations: BTreeMap::new(),
            failures: Vec::new(),
            unoffered: Vec::new(),
        }
    }

    pub(super) fn settled(&self) -> usize {
        self.done + self.failed + self.cancelled
    }

    pub(super) fn count(&mut self, graph: &Graph, report: &NodeReport) {
        let node = &graph.nodes[report.node()];
        match report {
            NodeReport::Finished { result, .. } => {
                if result.attempts > 1 {
                    self.retried += 1;
                }
                if result.is_success() {
                    self.done += 1;
                    self.durations
                        .entry(node.kind.clone())
                        .or_default()
                        .push(result.duration.as_secs_f64());
                } else {
                    self.failed += 1;
                    self.failures.push(failure_text(&node.id, result));
                }
            }
            NodeReport::Cancelled { .. } => self.cancelled += 1,
            NodeReport::Refused { reason, .. } => {
                self.failed += 1;
                self.failures.push(format!(
                    "{}: not run ({}): {reason}",
                    node.id,
                    graph.place(report.node())
                ));
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
            run as f64 / elapsed.as_secs_f64().max(1e-9),
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
            if !self.unoffered.is_empty() {
                out.push_str(&format!("; {}", unoffered_text(&self.unoffered)));
            }
            out.push('\n');
        }
        if !self.durations.is_empty() {
            let width = self
                .durations
                .keys()
                .map(String::len)
                .max()
                .unwrap_or(4)
                .max(4);
            out.push_str(&format!(
                "\n{:width$}  {:>7}  {:>9}  {:>9}  {:>9}\n",
                "kind", "done", "min s", "median s", "max s"
            ));
            for (kind, times) in &self.durations {
                let mut sorted = times.clone();
                sorted.sort_by(f64::total_cmp);
                out.push_str(&format!(
                    "{kind:width$}  {:>7}  {:>9.3}  {:>9.3}  {:>9.3}\n",
                    sorted.len(),
                    sorted[0],
                    sorted[sorted.len() / 2],
                    sorted[sorted.len() - 1]
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
        }
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

    pub(super) fn show(&mut self, tally: &Tally, running: usize, elapsed: Duration) {
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
