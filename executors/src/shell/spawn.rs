//! Starting a child process in a multi-threaded program, where a freshly
//! written script can be briefly "busy".

use std::io;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

/// How long [`spawn`] keeps retrying a program the kernel reports as busy.
const BUSY_PATIENCE: Duration = Duration::from_secs(2);

/// Starts `command`, retrying while its program is busy (`ETXTBSY`).
///
/// Linux refuses to execute a file that any process holds open for writing.
/// When one thread writes a script and then runs it while another thread
/// forks, the forked child inherits the write descriptor for the moment
/// between `fork` and `exec` — close-on-exec closes it only at the `exec`.
/// Running the script in that window fails with "Text file busy" although
/// the script is complete. Both the runtime (executors writing and running
/// job scripts side by side) and the glide-in tools do exactly this, so the
/// start is retried for up to two seconds, which that window never
/// approaches. Any other error is returned at once.
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    retry_busy(|| command.spawn())
}

/// Runs `start` until it returns anything but `ExecutableFileBusy`, or two
/// seconds have passed: [`spawn`] for any way of starting a process.
pub(crate) fn retry_busy<T>(mut start: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let give_up = Instant::now() + BUSY_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        match start() {
            Err(error)
                if error.kind() == io::ErrorKind::ExecutableFileBusy
                    && Instant::now() < give_up =>
            {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            started => return started,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    fn script_path(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("spawn-busy-{}-{name}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir.join("job.sh")
    }

    #[test]
    fn a_script_held_open_for_writing_starts_once_it_is_released() {
        let path = script_path("released");
        let mut writer = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&path)
            .unwrap();
        writer.write_all(b"#!/bin/sh\nexit 7\n").unwrap();
        // The kernel itself must call it busy, or this test shows nothing.
        let busy = Command::new(&path).spawn().unwrap_err();
        assert_eq!(busy.kind(), io::ErrorKind::ExecutableFileBusy, "{busy}");
        // Stands in for a forked sibling that reaches its exec 50 ms later.
        let release = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            drop(writer);
        });
        let status = spawn(&mut Command::new(&path)).unwrap().wait().unwrap();
        release.join().unwrap();
        assert_eq!(status.code(), Some(7));
        fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn other_errors_are_returned_without_waiting() {
        let path = script_path("not-executable");
        fs::write(&path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let started = Instant::now();
        let error = spawn(&mut Command::new(&path)).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        assert!(started.elapsed() < BUSY_PATIENCE);
        fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
