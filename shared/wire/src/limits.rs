//! Limits on what a remote may send. Every answer a git server gives (a ref advertisement, a
//! pack, a push report) must arrive within the transport's timeout and within a size, so that a
//! hostile or broken server that drips one byte at a time, or never stops sending, cannot hold a
//! worker thread, the cache's write lock or the cache's disk space for longer than one timeout.
//!
//! A socket's read timeout alone does not do this: it bounds one stall, and a server that sends
//! a byte just before each timeout never stalls. So each answer is read through a [`Limited`]
//! reader that checks a deadline before every read and counts what it passes on.

use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gix::protocol::transport::client::blocking_io::{
    ExtendedBufRead, HandleProgress, ReadlineBufRead,
};
use gix::protocol::transport::client::{Error as ClientError, MessageKind};
use gix::protocol::transport::Protocol;

/// The most a ref advertisement may hold, whatever the answer limit: 64 MiB is about 600,000
/// refs, far more than a state repository has (one branch, one lock branch per locked state).
pub const MAX_ADVERTISEMENT_BYTES: u64 = 64 * 1024 * 1024;

/// The default limit of one answer (a pack): 2 GiB, four times the default largest state.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The headroom [`object_limit`] adds to six times the largest state: trees, commits, and the
/// bookkeeping gix allocates from a pack's object count (its delta tree), for any state size.
pub const OBJECT_LIMIT_HEADROOM: u64 = 64 * 1024 * 1024;

/// The most one object a git server sends may inflate to in memory (gix's
/// `gitoxide.objects.allocLimit`, which bounds every single allocation driven by object data:
/// inflating a pack entry or resolving a delta, on receive and on read) for a deployment whose
/// largest state is `max_state_bytes`: six times it (a sealed document is larger than the
/// state it holds: measured 2.9 times for a state as Terraform writes it, 4.8 times for one
/// written compactly, every value encrypted) plus [`OBJECT_LIMIT_HEADROOM`]. 3,136 MiB with the
/// default 512 MiB.
pub fn object_limit(max_state_bytes: u64) -> u64 {
    max_state_bytes
        .saturating_mul(6)
        .saturating_add(OBJECT_LIMIT_HEADROOM)
}

/// The object limit of this process's cache repositories; see [`set_max_object_bytes`].
static MAX_OBJECT_BYTES: AtomicU64 = AtomicU64::new(0);

/// Sets the limit every cache repository opened from now on gets (the configuration is read once
/// per process, before any cache is opened). Until it is called, the limit for the default
/// largest state applies.
pub fn set_max_object_bytes(bytes: u64) {
    MAX_OBJECT_BYTES.store(bytes, Ordering::Relaxed);
}

/// The limit set by [`set_max_object_bytes`], or the one for the default largest state.
pub fn max_object_bytes() -> u64 {
    match MAX_OBJECT_BYTES.load(Ordering::Relaxed) {
        0 => object_limit(DEFAULT_MAX_STATE_BYTES),
        set => set,
    }
}

/// The largest state a deployment accepts when it sets no `max_state_bytes`, 512 MiB: the object
/// limit before [`set_max_object_bytes`] is called. It is gitstate-core's default, said again
/// here because this crate knows no core; gitstate-git holds the two equal at compile time.
pub const DEFAULT_MAX_STATE_BYTES: u64 = 512 * 1024 * 1024;

/// How much a remote may send in one answer, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// Bytes of one answer (after pkt-line framing is removed).
    pub max_bytes: u64,
    /// Time for one whole answer, from the request to its last byte.
    pub within: Duration,
}

impl AnswerLimits {
    /// The limits of an advertisement: `max_bytes`, but at most [`MAX_ADVERTISEMENT_BYTES`].
    pub fn for_advertisement(self) -> AnswerLimits {
        AnswerLimits {
            max_bytes: self.max_bytes.min(MAX_ADVERTISEMENT_BYTES),
            ..self
        }
    }
}

/// Why a [`Limited`] reader stopped: carried inside the `io::Error` it returns, and found again
/// by the transport's error classification.
#[derive(Debug, thiserror::Error)]
pub enum AnswerRefused {
    #[error("the git server's answer passed {limit} bytes, the most this deployment accepts (max_answer_bytes)")]
    TooLarge { limit: u64 },
    #[error("the git server did not finish its answer within {} s", within.as_secs_f32())]
    TooSlow { within: Duration },
}

/// A reader of one answer that enforces [`AnswerLimits`]; everything else is passed through.
pub struct Limited<R> {
    inner: R,
    limits: AnswerLimits,
    /// Set on the first read: the time a request takes to send (a pack) is not the answer's.
    deadline: Option<Instant>,
    read: u64,
}

impl<R> Limited<R> {
    /// The clock starts at the first read.
    pub fn new(inner: R, limits: AnswerLimits) -> Self {
        Limited {
            inner,
            limits,
            deadline: None,
            read: 0,
        }
    }

    /// An error when the answer is already too large or too late.
    fn check(&mut self) -> io::Result<()> {
        let within = self.limits.within;
        let deadline = *self.deadline.get_or_insert_with(|| Instant::now() + within);
        if self.read > self.limits.max_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                AnswerRefused::TooLarge {
                    limit: self.limits.max_bytes,
                },
            ));
        }
        if Instant::now() >= deadline {
            return Err(too_slow(within));
        }
        Ok(())
    }

    /// Counts `n` bytes passed on; going over the limit fails the next read.
    fn count(&mut self, n: usize) {
        self.read = self.read.saturating_add(n as u64);
    }
}

fn too_slow(within: Duration) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, AnswerRefused::TooSlow { within })
}

/// The clock of a stream connection (`git://`): the time of this side's last write. The other
/// side must answer within `within` of it, however it paces its bytes.
#[derive(Debug, Clone)]
pub struct Pace {
    last_write: Arc<Mutex<Instant>>,
    within: Duration,
}

impl Pace {
    pub fn new(within: Duration) -> Self {
        Pace {
            last_write: Arc::new(Mutex::new(Instant::now())),
            within,
        }
    }

    fn wrote(&self) {
        if let Ok(mut last) = self.last_write.lock() {
            *last = Instant::now();
        }
    }

    fn check(&self) -> io::Result<()> {
        let last = self
            .last_write
            .lock()
            .map(|l| *l)
            .unwrap_or_else(|_| Instant::now());
        if last.elapsed() >= self.within {
            return Err(too_slow(self.within));
        }
        Ok(())
    }

    /// `stream`'s reading half, failing once the answer has taken longer than `within`.
    pub fn reader<R>(&self, stream: R) -> Paced<R> {
        Paced {
            inner: stream,
            pace: self.clone(),
        }
    }

    /// `stream`'s writing half, restarting the clock with every write.
    pub fn writer<W>(&self, stream: W) -> Paced<W> {
        Paced {
            inner: stream,
            pace: self.clone(),
        }
    }
}

/// One half of a stream connection under a [`Pace`].
#[derive(Debug)]
pub struct Paced<S> {
    inner: S,
    pace: Pace,
}

impl<R: Read> Read for Paced<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.pace.check()?;
        self.inner.read(buf)
    }
}

impl<W: Write> Write for Paced<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pace.wrote();
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.check()?;
        let n = self.inner.read(buf)?;
        self.count(n);
        self.check().map(|()| n)
    }
}

impl<R: BufRead> BufRead for Limited<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.check()?;
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.count(amt);
        self.inner.consume(amt)
    }
}

impl<R: ReadlineBufRead> ReadlineBufRead for Limited<R> {
    fn readline(
        &mut self,
    ) -> Option<
        io::Result<gix::error::Result<gix::protocol::transport::packetline::PacketLineRef<'_>>>,
    > {
        if let Err(e) = self.check() {
            return Some(Err(e));
        }
        let line = self.inner.readline();
        if let Some(Ok(Ok(line))) = &line {
            // The framing counts too: a flood of empty lines is still a flood.
            let n = line.as_slice().map_or(0, <[u8]>::len) + 4;
            self.read = self.read.saturating_add(n as u64);
        }
        line
    }

    fn readline_str(&mut self, line: &mut String) -> io::Result<usize> {
        self.check()?;
        let n = self.inner.readline_str(line)?;
        self.count(n + 4);
        Ok(n)
    }
}

impl<'a, R: ExtendedBufRead<'a>> ExtendedBufRead<'a> for Limited<R> {
    fn set_progress_handler(&mut self, handle_progress: Option<HandleProgress<'a>>) {
        self.inner.set_progress_handler(handle_progress)
    }

    fn peek_data_line(&mut self) -> Option<io::Result<Result<&[u8], ClientError>>> {
        if let Err(e) = self.check() {
            return Some(Err(e));
        }
        self.inner.peek_data_line()
    }

    fn reset(&mut self, version: Protocol) {
        self.inner.reset(version)
    }

    fn stopped_at(&self) -> Option<MessageKind> {
        self.inner.stopped_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that always has one more byte, 5 ms later.
    struct Drip;

    impl Read for Drip {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_millis(5));
            buf[0] = b'x';
            Ok(1)
        }
    }

    fn limits(max_bytes: u64, within: Duration) -> AnswerLimits {
        AnswerLimits { max_bytes, within }
    }

    #[test]
    fn the_object_limit_is_six_states_and_headroom() {
        assert_eq!(object_limit(1024 * 1024), 70 * 1024 * 1024);
        assert_eq!(object_limit(512 * 1024 * 1024), 3136 * 1024 * 1024);
        assert_eq!(object_limit(u64::MAX), u64::MAX);
    }

    #[test]
    fn an_answer_within_the_limits_reads_whole() {
        let mut r = Limited::new(&b"0123456789"[..], limits(10, Duration::from_secs(5)));
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"0123456789");
    }

    #[test]
    fn a_larger_answer_is_refused_with_the_limit() {
        let mut r = Limited::new(&b"0123456789"[..], limits(4, Duration::from_secs(5)));
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).unwrap_err();
        assert!(out.len() <= 10);
        let why = e
            .get_ref()
            .unwrap()
            .downcast_ref::<AnswerRefused>()
            .unwrap();
        assert!(matches!(why, AnswerRefused::TooLarge { limit: 4 }), "{why}");
        assert!(e.to_string().contains("passed 4 bytes"), "{e}");
    }

    #[test]
    fn a_late_answer_is_refused_even_when_bytes_keep_coming() {
        // A drip never stalls, so only a deadline ends it.
        let mut r = Limited::new(Drip, limits(u64::MAX, Duration::from_millis(50)));
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(!out.is_empty());
    }

    #[test]
    fn a_stream_answer_must_come_within_the_pace_of_the_last_write() {
        let pace = Pace::new(Duration::from_millis(50));
        let mut reader = pace.reader(Drip);
        let mut writer = pace.writer(Vec::new());
        let mut out = Vec::new();
        let e = (&mut reader)
            .take(1_000_000)
            .read_to_end(&mut out)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // A write (the next request) gives the other side a fresh `within`.
        writer.write_all(b"want").unwrap();
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).unwrap();
    }

    #[test]
    fn buffered_reads_count_what_is_consumed() {
        let mut r = Limited::new(
            io::BufReader::new(&b"line one\nline two\n"[..]),
            limits(12, Duration::from_secs(5)),
        );
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "line one\n");
        line.clear();
        // The limit is checked before each read: what is already buffered may pass it once.
        r.read_line(&mut line).unwrap();
        line.clear();
        assert!(r.read_line(&mut line).is_err());
    }
}
