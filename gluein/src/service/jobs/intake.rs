//! A submission on its way in: its paths, graph, context file and relabel
//! rules checked, and its files kept private in the job's own folder.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::Context as _;

use crate::service::{JobSubmission, SubmittedFiles};

/// Checks a submission: absolute paths (relative ones are taken from its
/// working directory), a graph that loads, a context file that reads,
/// relabel rules that parse. The graph, its sweep files and the context
/// file are written to `incoming` as the job will run them: as sent, or,
/// from a client that sent only paths, as read here now. Returns the
/// submission with absolute paths, and its graph's size.
pub(super) fn check_submission(
    mut job: JobSubmission,
    incoming: &IncomingFiles,
) -> Result<(JobSubmission, u64), String> {
    if !job.cwd.is_absolute() {
        return Err(format!(
            "the working directory {} is not an absolute path",
            job.cwd.display()
        ));
    }
    if !job.cwd.is_dir() {
        return Err(format!(
            "the working directory {} is not a directory on the pool node's machine \
             (jobs run on a file system the submitter shares with the pool node)",
            job.cwd.display()
        ));
    }
    job.graph = job.cwd.join(&job.graph);
    job.context_file = job.context_file.map(|file| job.cwd.join(file));
    let paths = std::iter::once(&job.graph).chain(&job.context_file);
    for path in paths.chain([&job.cwd]) {
        if path.to_str().is_none() {
            return Err(format!("{} is not a UTF-8 path", path.display()));
        }
    }
    let files = match job.files.take() {
        Some(files) => *files,
        None => read_submitted_files(&job)?,
    };
    incoming.write(&job.graph, &files)?;
    let options = graph::LoadOptions {
        kept_sweeps: Some(incoming.sweeps()),
        ..graph::LoadOptions::default()
    };
    let file = job.graph.display().to_string();
    let graph = graph::Graph::parse_with(
        &files.graph,
        graph::Format::of(&job.graph),
        &file,
        Path::new("."),
        &options,
    )
    .map_err(|errors| {
        format!(
            "{errors}\n{} error(s) in the graph file {file}",
            errors.0.len()
        )
    })?;
    if let (Some(text), Some(path)) = (&files.context, &job.context_file) {
        graph::parse_context_rules(text).map_err(|error| format!("{}: {error}", path.display()))?;
    }
    for rule in &job.relabel {
        rule.parse::<graph::Relabel>()
            .map_err(|error| format!("--relabel {error}"))?;
    }
    Ok((job, graph.len() as u64))
}

/// The files of a submission that sent only their paths, read on the pool
/// node's machine now, within the default size limit.
fn read_submitted_files(job: &JobSubmission) -> Result<SubmittedFiles, String> {
    let shared = "(jobs run on a file system the submitter shares with the pool node)";
    let graph = graph::Graph::load(&job.graph).map_err(|errors| {
        format!(
            "{errors}\n{} error(s) in the graph file {shared}",
            errors.0.len()
        )
    })?;
    let context = match &job.context_file {
        Some(path) => Some(
            graph::read_bounded(path, "context file", graph::DEFAULT_MAX_INPUT_BYTES, "")
                .map_err(|error| format!("{error} {shared}"))?,
        ),
        None => None,
    };
    let mut sources = graph.sources().to_vec();
    let graph_text = sources.remove(0).1;
    Ok(SubmittedFiles {
        graph: graph_text,
        sweeps: sources,
        context,
    })
}

/// A job's files on their way into its folder: written to a folder of
/// their own under `STATE/jobs`, mode 0700, files 0600, checked there,
/// then moved to `STATE/jobs/ID` with the job's row; removed if the job
/// is not stored.
pub(super) struct IncomingFiles {
    dir: PathBuf,
    placed: std::cell::Cell<bool>,
}

impl IncomingFiles {
    pub(super) fn new(jobs: &Path) -> Result<IncomingFiles, String> {
        use std::os::unix::fs::DirBuilderExt as _;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = jobs.join(format!("{INCOMING}{}-{n}", std::process::id()));
        // A folder left by a pool node killed mid-submit: its job was never
        // stored, and this name is ours now.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        Ok(IncomingFiles {
            dir,
            placed: std::cell::Cell::new(false),
        })
    }

    /// Removes the folders of submits that a pool node killed mid-submit
    /// left: their jobs were never stored. Called with the state
    /// directory's lock held, so no submit of another node is under way.
    pub(super) fn remove_stale(jobs: &Path) {
        let Ok(entries) = std::fs::read_dir(jobs) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(INCOMING) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Where the sweep files go.
    fn sweeps(&self) -> PathBuf {
        self.dir.join(KEPT_SWEEPS)
    }

    /// Writes the graph (named as [`kept_graph_name`] says for `graph`),
    /// the sweep files and the context file.
    fn write(&self, graph: &Path, files: &SubmittedFiles) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt as _;
        let sweeps = self.sweeps();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&sweeps)
            .map_err(|error| format!("cannot create {}: {error}", sweeps.display()))?;
        write_private(&self.dir.join(kept_graph_name(graph)), &files.graph)?;
        for (name, text) in &files.sweeps {
            write_private(&sweeps.join(graph::kept_sweep_name(name)), text)?;
        }
        if let Some(text) = &files.context {
            write_private(&self.dir.join(KEPT_CONTEXT_FILE), text)?;
        }
        Ok(())
    }

    /// Moves the files to `job_dir`, the new job's folder.
    pub(super) fn place(&self, job_dir: &Path) -> anyhow::Result<()> {
        // `job_dir` was made empty for this job by `JobStore::submit`,
        // which never reuses a folder already there; a rename replaces an
        // empty directory.
        std::fs::rename(&self.dir, job_dir).with_context(|| {
            format!(
                "cannot move {} to {}",
                self.dir.display(),
                job_dir.display()
            )
        })?;
        self.placed.set(true);
        Ok(())
    }
}

impl Drop for IncomingFiles {
    fn drop(&mut self) {
        if !self.placed.get() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How the name of a folder of [`IncomingFiles`] begins.
const INCOMING: &str = ".incoming-";

/// Where a job keeps its sweep files, under its folder.
pub(super) const KEPT_SWEEPS: &str = "sweeps";

/// Where a job keeps its context file, under its folder.
pub(super) const KEPT_CONTEXT_FILE: &str = "contexts.toml";

/// The name of a job's copy of its graph: `graph.json` for a JSON graph
/// (the runner tells the format by the extension), `graph.toml` else.
pub(super) fn kept_graph_name(graph: &Path) -> &'static str {
    match graph::Format::of(graph) {
        graph::Format::Json => "graph.json",
        graph::Format::Toml => "graph.toml",
    }
}

/// Writes `text` to a new file at `path`, mode 0600, refusing to follow
/// a link or to reuse a file someone put there.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}
