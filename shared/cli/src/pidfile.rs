//! `gitstate serve --pid-file PATH` and `gitstate stop --pid-file PATH`: a way for scripts and
//! service managers without process supervision to stop a server gracefully.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The pid file of a running server; removed when dropped (after a graceful shutdown).
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's id to `path`. Refuses when the file names a process that still runs.
    pub fn create(path: &Path) -> Result<PidFile, String> {
        if let Some(pid) = read_pid(path) {
            if alive(pid) && pid != std::process::id() {
                return Err(format!(
                    "{} names process {pid}, which still runs: is another gitstate serving? (gitstate stop --pid-file {})",
                    path.display(),
                    path.display()
                ));
            }
        }
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write the pid file {}: {e}", path.display()))?;
        Ok(PidFile {
            path: path.to_owned(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if read_pid(&self.path) == Some(std::process::id()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether the process runs: it exists and is not a zombie (exited, waiting for its parent).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends SIGTERM to the server named by `path` and waits up to `wait` for it to finish the
/// requests in flight and exit.
pub fn stop(path: &Path, wait: Duration) -> Result<String, String> {
    let pid = read_pid(path).ok_or_else(|| {
        format!(
            "{} does not exist or holds no process id: is gitstate serving with --pid-file?",
            path.display()
        )
    })?;
    if !alive(pid) {
        let _ = std::fs::remove_file(path);
        return Ok(format!(
            "process {pid} was not running; removed {}\n",
            path.display()
        ));
    }
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| format!("{pid} is not a process id"))?;
    if pid_t <= 1 {
        return Err(format!("refusing to signal process {pid}"));
    }
    // SAFETY: kill(2) with a positive pid read from the pid file and SIGTERM has no memory effects.
    if unsafe { libc::kill(pid_t, libc::SIGTERM) } != 0 {
        return Err(format!(
            "cannot signal process {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let deadline = Instant::now() + wait;
    while alive(pid) {
        if Instant::now() > deadline {
            return Err(format!(
                "process {pid} is still finishing requests after {} s",
                wait.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("gitstate (process {pid}) stopped\n"))
}
