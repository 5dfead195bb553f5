//! The files an attempt's output goes to, and their removal when the
//! command wrote nothing into them: a million commands that print nothing
//! leave no files and no folders behind.
//!
//! The child needs its descriptors when it starts, so the files are
//! created before it runs and removed afterwards. Only what this attempt
//! created is removed: a file goes only if it is still the very file that
//! was created (same device and inode, a regular file, still empty), and
//! the activity's folder only if this attempt created it and it is empty
//! again, which `rmdir` itself checks. Nothing here follows a symbolic link.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Output;

/// Where one attempt's standard output and error go: `stdout` and `stderr`
/// (`stdout.N` and `stderr.N` for attempt N) in the activity's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputFiles {
    /// The standard output file.
    pub stdout: PathBuf,
    /// The standard error file.
    pub stderr: PathBuf,
    /// The activity's folder, when this attempt created it; it is removed
    /// again if the attempt leaves it empty. A folder that was there
    /// before (an earlier attempt's output, or one the user made) stays.
    created_folder: Option<PathBuf>,
}

/// The identity of a file as it was created, so that the file the command
/// may have put in its place is never taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    device: u64,
    inode: u64,
}

/// The two files, open for the child, and who they are.
pub(crate) struct OpenedOutput {
    /// The child's standard output.
    pub stdout: File,
    /// The child's standard error.
    pub stderr: File,
    /// Both files' identities, for [`OutputFiles::settle`].
    pub identities: [FileIdentity; 2],
}

impl OutputFiles {
    /// Makes sure `folder` exists and names attempt `attempt`'s files in it.
    pub(crate) fn prepare(folder: PathBuf, attempt: u32) -> Result<OutputFiles, String> {
        let cannot =
            |e: io::Error| format!("cannot create output directory {}: {e}", folder.display());
        // `create_dir` first: it is the one call in the common case, and it
        // says whether this attempt made the folder.
        let created = match std::fs::create_dir(&folder) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&folder).map_err(cannot)?;
                true
            }
            Err(e) => return Err(cannot(e)),
        };
        let suffix = if attempt == 1 {
            String::new()
        } else {
            format!(".{attempt}")
        };
        Ok(OutputFiles {
            stdout: folder.join(format!("stdout{suffix}")),
            stderr: folder.join(format!("stderr{suffix}")),
            created_folder: created.then_some(folder),
        })
    }

    /// Files at these two paths, in a folder this code does not own and
    /// never removes (tests of the process runner).
    #[cfg(test)]
    pub(crate) fn at(stdout: PathBuf, stderr: PathBuf) -> OutputFiles {
        OutputFiles {
            stdout,
            stderr,
            created_folder: None,
        }
    }

    /// Creates (or truncates) both files for the child.
    pub(crate) fn open(&self) -> io::Result<OpenedOutput> {
        let stdout = File::create(&self.stdout)?;
        let stderr = File::create(&self.stderr)?;
        let identity = |file: &File| {
            file.metadata().map(|m| FileIdentity {
                device: m.dev(),
                inode: m.ino(),
            })
        };
        let identities = [identity(&stdout)?, identity(&stderr)?];
        Ok(OpenedOutput {
            stdout,
            stderr,
            identities,
        })
    }

    /// After the command has ended: removes each file it wrote nothing
    /// to, and then the folder if this attempt created it and nothing else
    /// is in it. Returns where each stream ended up: [`Output::Empty`] for
    /// a removed file, else [`Output::File`].
    pub(crate) fn settle(&self, identities: &[FileIdentity; 2]) -> (Output, Output) {
        let stdout = settle_stream(&self.stdout, identities[0]);
        let stderr = settle_stream(&self.stderr, identities[1]);
        if matches!((&stdout, &stderr), (Output::Empty, Output::Empty)) {
            if let Some(folder) = &self.created_folder {
                // rmdir removes only an empty directory, and never the
                // target of a link: a folder the command wrote into stays.
                if let Err(e) = std::fs::remove_dir(folder) {
                    if e.kind() != io::ErrorKind::DirectoryNotEmpty {
                        tracing::debug!(
                            "cannot remove the empty output folder {}: {e}",
                            folder.display()
                        );
                    }
                }
            }
        }
        (stdout, stderr)
    }
}

/// Removes the file at `path` if it is still the empty regular file known
/// as `created`; [`Output::Empty`] if it was removed.
fn settle_stream(path: &Path, created: FileIdentity) -> Output {
    let kept = Output::File(path.to_path_buf());
    // symlink_metadata: a link the command put there is not followed.
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return kept;
    };
    let same = meta.is_file()
        && meta.len() == 0
        && meta.dev() == created.device
        && meta.ino() == created.inode;
    if !same {
        return kept;
    }
    match std::fs::remove_file(path) {
        Ok(()) => Output::Empty,
        Err(e) => {
            tracing::debug!(
                "cannot remove the empty output file {}: {e}",
                path.display()
            );
            kept
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("output-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn empty_files_and_the_folder_made_for_them_are_removed() {
        let root = scratch("empty");
        let files = OutputFiles::prepare(root.join("a"), 1).unwrap();
        let opened = files.open().unwrap();
        drop((opened.stdout, opened.stderr));
        assert_eq!(
            files.settle(&opened.identities),
            (Output::Empty, Output::Empty)
        );
        assert!(!root.join("a").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn written_files_and_what_the_command_left_in_the_folder_stay() {
        use std::io::Write;
        let root = scratch("written");
        let files = OutputFiles::prepare(root.join("a"), 1).unwrap();
        let mut opened = files.open().unwrap();
        opened.stderr.write_all(b"oops\n").unwrap();
        let (out, err) = files.settle(&opened.identities);
        assert_eq!(out, Output::Empty);
        assert_eq!(err, Output::File(root.join("a/stderr")));
        // A second attempt, quiet, next to a file the command wrote itself.
        let again = OutputFiles::prepare(root.join("a"), 2).unwrap();
        let opened = again.open().unwrap();
        std::fs::write(root.join("a/result.txt"), "").unwrap();
        assert_eq!(
            again.settle(&opened.identities),
            (Output::Empty, Output::Empty)
        );
        let mut left: Vec<_> = std::fs::read_dir(root.join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["result.txt", "stderr"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_or_link_the_command_put_in_place_of_its_output_is_left_alone() {
        let root = scratch("replaced");
        let files = OutputFiles::prepare(root.join("a"), 1).unwrap();
        let opened = files.open().unwrap();
        // The command replaced its stdout with an empty file of its own,
        // and its stderr with a link to an empty file elsewhere.
        std::fs::remove_file(&files.stdout).unwrap();
        std::fs::write(&files.stdout, "").unwrap();
        std::fs::write(root.join("elsewhere"), "").unwrap();
        std::fs::remove_file(&files.stderr).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), &files.stderr).unwrap();
        let (out, err) = files.settle(&opened.identities);
        assert_eq!(out, Output::File(files.stdout.clone()));
        assert_eq!(err, Output::File(files.stderr.clone()));
        assert!(files.stdout.exists() && root.join("elsewhere").exists());
        assert!(std::fs::symlink_metadata(&files.stderr)
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_folder_that_was_there_before_stays() {
        let root = scratch("before");
        std::fs::create_dir(root.join("a")).unwrap();
        let files = OutputFiles::prepare(root.join("a"), 1).unwrap();
        let opened = files.open().unwrap();
        assert_eq!(
            files.settle(&opened.identities),
            (Output::Empty, Output::Empty)
        );
        assert!(root.join("a").is_dir());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
