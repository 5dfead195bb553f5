//! The report as text for a terminal: a summary, sparklines of utilization
//! and aligned tables.

use std::fmt::{self, Display, Formatter};

use super::bins::resample;
use super::model::{Report, WallEnd};

/// Characters a sparkline may take; wider bins are averaged down to it.
const SPARK_WIDTH: usize = 64;

/// Eighths of a character cell, from just above idle to fully busy.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Kinds listed in the duration table before the rest are summed up.
const MAX_KINDS: usize = 30;

impl Display for Report {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.summary(f)?;
        writeln!(f)?;
        self.activity_counts(f)?;
        writeln!(f)?;
        self.utilization(f)?;
        writeln!(f)?;
        self.kind_table(f)
    }
}

impl Report {
    fn summary(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let run = &self.run;
        let others = match self.runs_in_journal.as_slice() {
            [only] if *only == run.run => "the only run in the journal".to_string(),
            runs => format!(
                "the journal has runs {}",
                runs.iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        writeln!(f, "run {} ({others})", run.run)?;
        writeln!(
            f,
            "  graph      {} (hash {})",
            run.graph_path, run.graph_hash
        )?;
        writeln!(f, "  host       {}", run.host)?;
        writeln!(f, "  status     {}", run.status)?;
        let started = timefmt::format_unix_timestamp(run.started);
        writeln!(f, "  started    {started}")?;
        let wall = duration(run.wall_seconds);
        match run.wall_end {
            WallEnd::Recorded => writeln!(f, "  wall time  {wall} (start to recorded end)")?,
            WallEnd::LastAttempt => writeln!(
                f,
                "  wall time  {wall} to the last attempt's end: no end was recorded \
                 (the runner was killed, or is still running)"
            )?,
            WallEnd::Unknown => writeln!(
                f,
                "  wall time  unknown: no end was recorded and the run has no attempts"
            )?,
        }
        writeln!(
            f,
            "  makespan   {} (first attempt's start to last attempt's end)",
            duration(run.makespan)
        )?;
        let timeline = &self.timeline;
        let listed = self.executors.iter().filter(|e| e.listed).count();
        let unlisted = self.executors.len() - listed;
        let lanes: Vec<String> = self
            .lanes
            .iter()
            .map(|l| format!("{} {}", l.executors, l.label))
            .collect();
        write!(
            f,
            "  executors  {} ({}) with {} cores",
            self.executors.len(),
            lanes.join(", "),
            timeline.cores
        )?;
        if unlisted > 0 {
            write!(
                f,
                "; {unlisted} only named by attempts (not in the run's executor list)"
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "  mean use   {} of executor time",
            percent(timeline.mean_executors_busy)
        )?;
        match timeline.mean_cores_busy {
            Some(cores) => writeln!(
                f,
                ", {} of core time (CPU time known for {} of {} attempts)",
                percent(cores),
                self.attempts.with_cpu_seconds,
                self.attempts.total
            ),
            None => writeln!(f, "; core use unknown (no attempt has CPU time)"),
        }
    }

    fn activity_counts(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let a = &self.attempts;
        writeln!(
            f,
            "attempts in run {}: {} on {} activities, {} failed, {} (attempts after the first)",
            self.run.run,
            a.total,
            a.activities,
            a.failed,
            plural(a.retries, "retry", "retries")
        )?;
        if a.lost + a.extra > 0 {
            writeln!(
                f,
                "re-executions: {} ({} lost with their agent, {} extra results)",
                a.lost + a.extra,
                a.lost,
                a.extra
            )?;
        }
        writeln!(
            f,
            "activity states (the journal keeps one state per activity: as it stands after the latest run)"
        )?;
        let header = ["", "done", "failed", "cancelled", "pending", "total"];
        let row = |name: String, t: &super::model::StateTally| {
            vec![
                name,
                t.done.to_string(),
                t.failed.to_string(),
                t.cancelled.to_string(),
                t.pending.to_string(),
                t.total().to_string(),
            ]
        };
        let rows = vec![
            row(
                format!("last set by run {}", self.run.run),
                &self.states.set_by_run,
            ),
            row("whole journal".to_string(), &self.states.journal),
        ];
        table(f, &header, &rows)
    }

    fn utilization(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let timeline = &self.timeline;
        let width = timeline.executors_busy.len().clamp(1, SPARK_WIDTH);
        writeln!(
            f,
            "utilization over {} ({} per character; blank = idle, █ = all busy)",
            duration(timeline.span),
            duration(timeline.span / width as f64)
        )?;
        let mut lines: Vec<(String, String, &[f64])> = vec![(
            "executors".to_string(),
            percent(timeline.mean_executors_busy),
            &timeline.executors_busy,
        )];
        if let (Some(cores), Some(mean)) = (&timeline.cores_busy, timeline.mean_cores_busy) {
            lines.push(("cores (CPU time)".to_string(), percent(mean), cores));
        }
        for lane in &self.lanes {
            lines.push((
                format!("  {} ×{}", lane.label, lane.executors),
                percent(lane.mean_busy),
                &lane.busy,
            ));
        }
        let name_width = lines.iter().map(|l| l.0.chars().count()).max().unwrap_or(0);
        let mean_width = lines.iter().map(|l| l.1.len()).max().unwrap_or(0);
        for (name, mean, values) in lines {
            writeln!(
                f,
                "  {name:<name_width$} {mean:>mean_width$} |{}|",
                sparkline(values, width)
            )?;
        }
        Ok(())
    }

    fn kind_table(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "durations by activity kind (seconds; all attempts of run {}, failed ones included)",
            self.run.run
        )?;
        if self.kinds.is_empty() {
            return writeln!(f, "  (no attempts)");
        }
        let header = [
            "kind", "attempts", "failed", "min", "median", "max", "total", "cpu",
        ];
        let mut rows: Vec<Vec<String>> = self
            .kinds
            .iter()
            .take(MAX_KINDS)
            .map(|k| {
                vec![
                    k.kind.clone(),
                    k.attempts.to_string(),
                    k.failed.to_string(),
                    seconds(k.min),
                    seconds(k.median),
                    seconds(k.max),
                    seconds(k.total),
                    k.cpu_seconds.map_or("-".to_string(), seconds),
                ]
            })
            .collect();
        let rest = &self.kinds[self.kinds.len().min(MAX_KINDS)..];
        if !rest.is_empty() {
            rows.push(vec![
                format!("({} more kinds)", rest.len()),
                rest.iter().map(|k| k.attempts).sum::<usize>().to_string(),
                rest.iter().map(|k| k.failed).sum::<usize>().to_string(),
                String::new(),
                String::new(),
                String::new(),
                seconds(rest.iter().map(|k| k.total).sum()),
                String::new(),
            ]);
        }
        table(f, &header, &rows)
    }
}

/// Writes `rows` under `header`, indented, the first column left-aligned
/// and the others right-aligned, each as wide as its widest cell.
fn table(f: &mut Formatter<'_>, header: &[&str], rows: &[Vec<String>]) -> fmt::Result {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |f: &mut Formatter<'_>, cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.zip(&widths).enumerate() {
            let pad = width.saturating_sub(cell.chars().count());
            text.push_str("  ");
            if i == 0 {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            } else {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            }
        }
        writeln!(f, "{}", text.trim_end())
    };
    line(f, &mut header.iter().copied())?;
    for row in rows {
        line(f, &mut row.iter().map(String::as_str))?;
    }
    Ok(())
}

/// `values` (fractions, 0 to 1) as `width` block characters: blank for idle,
/// the lowest block for any use at all, the full block for full use.
pub(crate) fn sparkline(values: &[f64], width: usize) -> String {
    resample(values, width)
        .into_iter()
        .map(|v| {
            if v <= 0.0 {
                ' '
            } else {
                let level = (v * LEVELS.len() as f64).ceil() as usize;
                LEVELS[level.clamp(1, LEVELS.len()) - 1]
            }
        })
        .collect()
}

/// `count` with the singular or plural noun.
fn plural(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// Seconds with enough digits to tell short attempts apart.
fn seconds(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.1}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// Seconds, with hours and minutes too once it is long enough to need them.
fn duration(value: f64) -> String {
    if value < 60.0 {
        return format!("{} s", seconds(value));
    }
    let whole = value.round() as u64;
    let (h, m, s) = (whole / 3600, whole / 60 % 60, whole % 60);
    if h > 0 {
        format!("{} s ({h}h{m:02}m{s:02}s)", seconds(value))
    } else {
        format!("{} s ({m}m{s:02}s)", seconds(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_show_idle_as_blank_and_full_as_a_block() {
        assert_eq!(sparkline(&[0.0, 0.01, 0.5, 1.0, 1.5], 5), " ▁▄██");
        assert_eq!(sparkline(&[1.0, 1.0, 0.0, 0.0], 2), "█ ");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(0.0123), "0.012 s");
        assert_eq!(duration(75.0), "75.00 s (1m15s)");
        assert_eq!(duration(3725.0), "3725.0 s (1h02m05s)");
    }
}
