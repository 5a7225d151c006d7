//! The ssh transport: gitstate spawns the ssh program itself (git's conventions: `ssh`, or
//! `GIT_SSH_COMMAND`/`GIT_SSH`, run by a shell when it needs one) and speaks git's protocol over
//! its pipes, with a watchdog on every read and write.
//!
//! gix's own ssh transport reads the child's stdout with a plain blocking read. A server that
//! authenticates, answers ssh's keep-alives and never sends a byte would hold that thread (and
//! the ssh process) forever: the answer limits ([`super::limits`]) check the time between reads,
//! not during one. Here a watchdog thread kills ssh (and every process it runs, such as the
//! shell of `GIT_SSH_COMMAND`) once a read has waited longer than the git timeout since this
//! side's last write, or a write has been blocked as long: the pipes close, the blocked call
//! returns, and the error says the server did not answer in time (a 503).

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gix::bstr::{BStr, ByteSlice};
use gix::protocol::transport::client::blocking_io::ssh::ProgramKind;
use gix::protocol::transport::client::blocking_io::{RequestWriter, SetServiceResponse, Transport};
use gix::protocol::transport::client::{
    self as client, git::blocking_io::Connection, git::ConnectMode, MessageKind,
    TransportWithoutIO, WriteMode,
};
use gix::protocol::transport::{Protocol, Service};

use super::limits::AnswerRefused;

/// Environment variables a spawned git program must not inherit (as gix and git remove them).
const ENV_VARS_TO_REMOVE: &[&str] = &[
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
];

/// Why an ssh connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("the ssh user or host in the URL could be mistaken for a command-line option")]
    AmbiguousArgument,
    #[error("the URL names a port, which the ssh program {0:?} cannot be given")]
    PortUnsupported(OsString),
    #[error("the ssh command could not be prepared")]
    Prepare,
}

/// A git transport over a spawned ssh program, every I/O bounded by `within` (see the module
/// documentation). ssh is started by the handshake, when the service is known.
pub struct SshTransport {
    url: gix::Url,
    command: OsString,
    kind: ProgramKind,
    version: Protocol,
    within: Duration,
    connection: Option<Connection<SshReader, Watched<ChildStdin>>>,
    watch: Option<Arc<Watch>>,
}

impl SshTransport {
    /// A transport to `url` (an `ssh://` or scp-like URL) with the ssh program `command`;
    /// nothing runs yet, except the feature check gix also makes for an unknown program (`-G`).
    pub fn new(
        url: gix::Url,
        command: OsString,
        version: Protocol,
        within: Duration,
    ) -> Result<SshTransport, SshError> {
        let kind = program_kind(&command, &url)?;
        Ok(SshTransport {
            url,
            command,
            kind,
            version,
            within,
            connection: None,
            watch: None,
        })
    }

    /// The command that runs the git service `service` on the remote.
    fn command(&self, service: Service) -> Result<Command, SshError> {
        let mut prepare = gix::command::prepare(&self.command).command_may_be_shell_script();
        match self.kind {
            ProgramKind::Ssh => {
                if self.version != Protocol::V1 {
                    prepare = prepare
                        .args(["-o", "SendEnv=GIT_PROTOCOL"])
                        .env("GIT_PROTOCOL", format!("version={}", self.version as usize));
                }
                if let Some(port) = self.url.port {
                    prepare = prepare.arg(format!("-p{port}"));
                }
            }
            ProgramKind::Plink | ProgramKind::Putty | ProgramKind::TortoisePlink => {
                if self.kind == ProgramKind::TortoisePlink {
                    prepare = prepare.arg("-batch");
                }
                if let Some(port) = self.url.port {
                    prepare = prepare.arg("-P").arg(port.to_string());
                }
            }
            ProgramKind::Simple => {
                if self.url.port.is_some() {
                    return Err(SshError::PortUnsupported(self.command.clone()));
                }
            }
        }
        let destination = destination(&self.url)?;
        let path = gix::url::expand_path::for_shell(self.url.path.clone());
        if path.trim().first() == Some(&b'-') {
            return Err(SshError::AmbiguousArgument);
        }
        let prepare = prepare
            .arg(destination)
            // English messages: "Permission denied" is recognised below.
            .env("LANG", "C")
            .env("LC_ALL", "C")
            .arg(service.as_str())
            .arg(
                gix::quote::single(path.as_ref())
                    .to_os_str_lossy()
                    .into_owned(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut command = Command::try_from(prepare).map_err(|_| SshError::Prepare)?;
        for name in ENV_VARS_TO_REMOVE {
            command.env_remove(name);
        }
        Ok(command)
    }
}

/// `user@host` or `host`, refused when it could be read as an option.
fn destination(url: &gix::Url) -> Result<String, SshError> {
    use gix::url::ArgumentSafety::{Absent, Dangerous, Usable};
    match (url.user_as_argument(), url.host_as_argument()) {
        (Usable(user), Usable(host) | Dangerous(host)) => Ok(format!("{user}@{host}")),
        (Absent, Usable(host)) => Ok(host.into()),
        _ => Err(SshError::AmbiguousArgument),
    }
}

/// Which ssh program `command` is, as gix decides it: by the program's name, and for an unknown
/// one by whether it accepts OpenSSH's `-G`.
fn program_kind(command: &OsStr, url: &gix::Url) -> Result<ProgramKind, SshError> {
    let text = command.to_string_lossy();
    let program = text.split_whitespace().next().unwrap_or("");
    let kind = ProgramKind::from(OsStr::new(program));
    if kind != ProgramKind::Simple {
        return Ok(kind);
    }
    let host = match url.host_as_argument() {
        gix::url::ArgumentSafety::Usable(host) => host,
        _ => return Err(SshError::AmbiguousArgument),
    };
    let check = gix::command::prepare(command)
        .command_may_be_shell_script()
        .arg("-G")
        .arg(host)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let openssh = Command::try_from(check)
        .map_err(|_| SshError::Prepare)?
        .status()
        .is_ok_and(|status| status.success());
    Ok(if openssh {
        ProgramKind::Ssh
    } else {
        ProgramKind::Simple
    })
}

impl TransportWithoutIO for SshTransport {
    fn set_identity(&mut self, identity: client::Account) -> Result<(), client::Error> {
        self.url
            .set_user((!identity.username.is_empty()).then_some(identity.username));
        Ok(())
    }

    fn to_url(&self) -> Cow<'_, BStr> {
        Cow::Owned(self.url.to_bstring())
    }

    fn connection_persists_across_multiple_requests(&self) -> bool {
        true
    }

    fn configure(&mut self, _config: &dyn std::any::Any) -> gix::error::Result {
        Ok(())
    }
}

fn io_error(e: impl std::error::Error + Send + Sync + 'static) -> client::Error {
    client::Error::Io(io::Error::other(e))
}

impl Transport for SshTransport {
    fn handshake<'a>(
        &mut self,
        service: Service,
        extra_parameters: &'a [(&'a str, Option<&'a str>)],
    ) -> Result<SetServiceResponse<'_>, client::Error> {
        if let Some(watch) = self.watch.take() {
            watch.close();
        }
        let mut command = self.command(service).map_err(io_error)?;
        let mut child = command
            .spawn()
            .map_err(|source| client::Error::InvokeProgram {
                source,
                command: self.command.clone(),
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_tree(&mut child);
            return Err(io_error(io::Error::other(
                "ssh was started without its pipes",
            )));
        };
        let watch = Watch::start(child, self.within);
        let reader = SshReader {
            inner: Watched {
                inner: stdout,
                watch: watch.clone(),
            },
            errors: supervise_stderr(stderr, watch.clone()),
        };
        let writer = Watched {
            inner: stdin,
            watch: watch.clone(),
        };
        self.watch = Some(watch);
        let connection = self.connection.insert(Connection::new(
            reader,
            writer,
            self.version,
            self.url.path.clone(),
            None::<(String, Option<u16>)>,
            ConnectMode::Process,
            false,
        ));
        connection.handshake(service, extra_parameters)
    }

    fn request(
        &mut self,
        write_mode: WriteMode,
        on_into_read: MessageKind,
        trace: bool,
    ) -> Result<RequestWriter<'_>, client::Error> {
        self.connection
            .as_mut()
            .ok_or(client::Error::MissingHandshake)?
            .request(write_mode, on_into_read, trace)
    }
}

impl Drop for SshTransport {
    fn drop(&mut self) {
        // Closing stdin first lets a well-behaved server end; ssh is killed either way.
        self.connection.take();
        if let Some(watch) = self.watch.take() {
            watch.close();
        }
    }
}

/// What a line ssh wrote on stderr is.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// Why the connection failed: the reader reports it (a refused key is `Permission denied`,
    /// which the transport's classification reads as such).
    Error(io::ErrorKind),
    /// Routine, logged at DEBUG: anything after gitstate stopped ssh itself (the shell of a
    /// `GIT_SSH` wrapper then says `Killed`), and the host key notice that
    /// `StrictHostKeyChecking=no` or `accept-new` prints on every session.
    Routine,
    /// Anything else, at WARN: it may need attention.
    Notable,
    Nothing,
}

/// Classes a line of ssh's stderr; `stopped`: gitstate ended the session.
fn said(text: &str, stopped: bool) -> Said {
    if text.contains("Permission denied") || text.contains("permission denied") {
        Said::Error(io::ErrorKind::PermissionDenied)
    } else if text.contains("resolve hostname") || text.contains("connect to host") {
        Said::Error(io::ErrorKind::ConnectionRefused)
    } else if text.is_empty() {
        Said::Nothing
    } else if stopped || text.starts_with("Warning: Permanently added") {
        Said::Routine
    } else {
        Said::Notable
    }
}

/// The state the watchdog and the pipes share.
struct Watch {
    state: Mutex<WatchState>,
    wake: Condvar,
    within: Duration,
}

struct WatchState {
    /// ssh, until it is killed and reaped.
    child: Option<Child>,
    /// When the read or write in progress must have finished.
    deadline: Option<Instant>,
    /// This side's last write: an answer is due within `within` of it.
    last_write: Instant,
    /// The watchdog killed ssh.
    fired: bool,
    /// The transport is gone: the watchdog ends.
    closed: bool,
}

impl Watch {
    fn start(child: Child, within: Duration) -> Arc<Watch> {
        let watch = Arc::new(Watch {
            state: Mutex::new(WatchState {
                child: Some(child),
                deadline: None,
                last_write: Instant::now(),
                fired: false,
                closed: false,
            }),
            wake: Condvar::new(),
            within,
        });
        let watching = watch.clone();
        let spawned = std::thread::Builder::new()
            .name("ssh watchdog".into())
            .stack_size(64 * 1024)
            .spawn(move || watching.run());
        if let Err(e) = spawned {
            // Without a watchdog no I/O may start: the first one fails at once.
            tracing::warn!(error = %e, "could not start the ssh watchdog");
            let mut state = watch.lock();
            state.fired = true;
            if let Some(mut child) = state.child.take() {
                kill_tree(&mut child);
            }
        }
        watch
    }

    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The watchdog: kills ssh when the I/O in progress passes its deadline.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.closed {
                return;
            }
            let now = Instant::now();
            state = match state.deadline {
                Some(deadline) if now >= deadline && !state.fired => {
                    state.fired = true;
                    if let Some(child) = state.child.as_mut() {
                        tracing::warn!(
                            within_seconds = self.within.as_secs_f32(),
                            "the ssh server did not answer in time; ssh is stopped"
                        );
                        kill_descendants(child.id());
                        let _ = child.kill();
                    }
                    state
                }
                Some(deadline) if !state.fired => self
                    .wake
                    .wait_timeout(state, deadline - now)
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0),
                _ => self
                    .wake
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            };
        }
    }

    /// Marks the start of a read (due within `within` of the last write) or a write (within
    /// `within` from now); an error when the watchdog already fired or the answer is late.
    fn begin(&self, write: bool) -> io::Result<()> {
        let mut state = self.lock();
        let deadline = if write {
            Instant::now() + self.within
        } else {
            state.last_write + self.within
        };
        if state.fired || Instant::now() >= deadline {
            return Err(self.too_slow());
        }
        state.deadline = Some(deadline);
        self.wake.notify_all();
        Ok(())
    }

    /// Marks the end of the I/O begun last; its result is replaced by a timeout when the
    /// watchdog fired meanwhile (a killed ssh reads as an early end of the answer).
    fn end<T>(&self, write: bool, result: io::Result<T>) -> io::Result<T> {
        let mut state = self.lock();
        state.deadline = None;
        if write {
            state.last_write = Instant::now();
        }
        if state.fired {
            return Err(self.too_slow());
        }
        result
    }

    fn too_slow(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            AnswerRefused::TooSlow {
                within: self.within,
            },
        )
    }

    /// Whether gitstate stopped ssh: the transport closed it, or the watchdog (whose error
    /// the I/O in progress reports).
    fn stopped(&self) -> bool {
        let state = self.lock();
        state.closed || state.fired
    }

    /// Ends the watchdog, kills ssh and every process it started, and reaps it.
    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        if let Some(mut child) = state.child.take() {
            kill_tree(&mut child);
        }
        self.wake.notify_all();
    }
}

/// Kills `child` and its descendants (the shell running `GIT_SSH_COMMAND` does not `exec` ssh)
/// and reaps it.
fn kill_tree(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        kill_descendants(child.id());
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Sends SIGKILL to every descendant of `pid` (found in `/proc`, deepest first).
fn kill_descendants(pid: u32) {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for child in children(parent) {
            found.push(child);
            next.push(child);
        }
    }
    for pid in found.into_iter().rev() {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) with a pid read from /proc and a valid signal number.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// The children of `pid` (`/proc/PID/task/*/children`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// One pipe of ssh under the [`Watch`].
struct Watched<S> {
    inner: S,
    watch: Arc<Watch>,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.watch.begin(false)?;
        let result = self.inner.read(buf);
        self.watch.end(false, result)
    }
}

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.watch.begin(true)?;
        let result = self.inner.write(buf);
        self.watch.end(true, result)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.watch.begin(true)?;
        let result = self.inner.flush();
        self.watch.end(true, result)
    }
}

/// ssh's stdout, failing with what ssh said on stderr when that was an error (a refused key is
/// `Permission denied`, which the transport's classification reads as such).
struct SshReader {
    inner: Watched<ChildStdout>,
    errors: mpsc::Receiver<io::Error>,
}

impl Read for SshReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.inner.read(buf);
        if let Ok(error) = self.errors.try_recv() {
            return Err(error);
        }
        match result {
            Ok(0) | Err(_) => {
                // ssh ended: its last words may still be on their way.
                match self.errors.recv_timeout(Duration::from_millis(100)) {
                    Ok(error) if !matches!(&result, Err(e) if e.kind() == io::ErrorKind::TimedOut) => {
                        Err(error)
                    }
                    _ => result,
                }
            }
            ok => ok,
        }
    }
}

/// Reads ssh's stderr on a thread of its own: error lines go to the reader, the rest to the log
/// as [`said`] classes them.
fn supervise_stderr(
    stderr: std::process::ChildStderr,
    watch: Arc<Watch>,
) -> mpsc::Receiver<io::Error> {
    let (send, receive) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("ssh stderr".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            for line in io::BufReader::new(stderr).split(b'\n') {
                let Ok(line) = line else { break };
                let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                match said(&text, watch.stopped()) {
                    Said::Error(kind) => {
                        let _ = send.try_send(io::Error::new(kind, text));
                    }
                    Said::Routine => tracing::debug!(ssh = %text, "ssh said"),
                    Said::Notable => tracing::warn!(ssh = %text, "ssh said"),
                    Said::Nothing => {}
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the reader of ssh's messages");
    }
    receive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_ssh_says_is_classed_by_whether_it_needs_attention() {
        let refused = "root@127.0.0.1: Permission denied (publickey).";
        assert_eq!(
            said(refused, false),
            Said::Error(io::ErrorKind::PermissionDenied)
        );
        assert_eq!(
            said(
                "ssh: Could not resolve hostname nowhere: Name or service not known",
                false
            ),
            Said::Error(io::ErrorKind::ConnectionRefused)
        );
        // gitstate ended the session: the wrapper's shell reporting it is routine.
        assert_eq!(said("Killed", true), Said::Routine);
        assert_eq!(said("Killed", false), Said::Notable);
        let added =
            "Warning: Permanently added '[127.0.0.1]:2222' (ED25519) to the list of known hosts.";
        assert_eq!(said(added, false), Said::Routine);
        assert_eq!(
            said("WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!", false),
            Said::Notable
        );
        assert_eq!(said("", false), Said::Nothing);
    }
}
