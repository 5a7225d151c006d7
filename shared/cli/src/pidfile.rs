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

/// Whether the process runs: one of its threads exists and is not a zombie. The first thread
/// alone is not enough: while a process exits, or after its main thread ended, the first thread is
/// already a zombie while the others still run (and still hold its sockets and files).
fn alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(Path::new("/proc").join(pid.to_string()).join("task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|task| std::fs::read_to_string(task.path().join("stat")).is_ok_and(|s| running(&s)))
}

/// Whether a `/proc/.../stat` line names a thread that runs (any state but zombie or dead).
fn running(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Polls `alive(pid)` until it equals `want` (a signal or an exit takes a moment to land).
    fn becomes(pid: u32, want: bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if alive(pid) == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_process_runs_until_its_last_thread_has_ended() {
        // The main thread ends first (it becomes a zombie), another thread sleeps on: the process
        // still runs, as a server does while its runtime's threads wind down.
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import ctypes, threading, time\n\
                 threading.Thread(target=time.sleep, args=(2,)).start()\n\
                 time.sleep(0.2)\n\
                 ctypes.CDLL(None).pthread_exit(None)",
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let pid = child.id();
        let stat = Path::new("/proc").join(pid.to_string()).join("stat");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&stat).is_ok_and(|s| running(&s)) {
            assert!(Instant::now() < deadline, "the main thread never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            alive(pid),
            "a process whose main thread ended but another runs is alive"
        );
        // Once the last thread ends the process is a zombie until it is waited for: not alive.
        assert!(
            becomes(pid, false),
            "an exited, unreaped process counts as running"
        );
        child.wait().unwrap();
        assert!(!alive(pid));
    }

    #[test]
    fn a_running_process_is_alive_and_a_killed_one_is_not() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(alive(pid));
        child.kill().unwrap();
        assert!(becomes(pid, false));
        child.wait().unwrap();
    }
}
