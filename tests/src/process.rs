//! Ports and processes: free ports, child processes that are killed on drop, required tools.

use std::fs;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::*;

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it). Servers started by this
/// crate retry with another port when the bind races with another test.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// True once something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// A child process killed (and reaped) on drop; its stdout+stderr go to `log`.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    pub log: PathBuf,
    pub what: String,
}

impl ChildGuard {
    /// Spawns `cmd` with stdin closed and stdout/stderr appended to `log`.
    pub fn spawn(mut cmd: Command, log: &Path, what: &str) -> ChildGuard {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let err = out.try_clone().expect("clone log handle");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}; {INSTALL_HINT}"));
        ChildGuard {
            child: Some(child),
            log: log.to_path_buf(),
            what: what.to_string(),
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `Some(status)` when the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The log written so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `ready()` holds. `Err(log)` when the process exited first (the caller may retry
    /// on another port); panics with the log on timeout.
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited with {status} before it was ready; its output:\n{}",
                    self.what,
                    self.log_text()
                ));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!(
                    "{} was not ready within {timeout:?}; its output:\n{}",
                    self.what,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the process now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a server up to 3 times on fresh ports: `spawn(port)` starts it, `ready(port)` says it
/// answers. Returns the guard and the port.
pub(crate) fn start_on_free_port(
    what: &str,
    timeout: Duration,
    mut spawn: impl FnMut(u16) -> ChildGuard,
    mut ready: impl FnMut(u16) -> bool,
) -> (ChildGuard, u16) {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port();
        let mut guard = spawn(port);
        match guard.wait_ready(timeout, || ready(port)) {
            Ok(()) => return (guard, port),
            Err(log) => {
                // Retry on another port only when the bind raced with another process.
                let lower = log.to_lowercase();
                let raced = lower.contains("in use")
                    || lower.contains("cannot listen")
                    || lower.contains("bind");
                last = log;
                if !raced {
                    break;
                }
            }
        }
    }
    panic!("{what} did not start: {last}");
}

/// Looks `name` up on PATH (plus /usr/sbin and /sbin, where Debian puts daemons).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub(crate) fn require_tool(name: &str) -> PathBuf {
    which(name).unwrap_or_else(|| panic!("`{name}` is not installed: {INSTALL_HINT}"))
}
