//! TCP proxies on 127.0.0.1 in front of a git server:
//! - [`DelayProxy`] holds every chunk a client sends for a fixed delay before passing it on: a
//!   git server far away (each request waits at least one delay), for tests of time budgets.
//!   Answers pass back at once. It counts the connections it accepted.
//! - [`CountingProxy`] counts the bytes that pass each way: what a client costs on a real link,
//!   which loopback hides.
//! - [`CuttingProxy`] closes a connection without an answer when a request carries given bytes
//!   (armed per use): the server's close crossing one particular request.
//! - [`ClosingProxy`] closes a kept-alive connection at the worst moment: the first request sent
//!   on it after it was idle for a while is read and answered with nothing but the close, as when
//!   a server's idle timeout crosses the client's request (a Lambda container thawed after a
//!   freeze sends its first request on connections the server closed meanwhile).
//! - [`DroppingProxy`] cuts a share of its connections at random: after a random number of
//!   bytes, in a random direction, both ways are closed (a link that drops now and then).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The proxy; it stops with the test process (its threads are detached).
pub struct DelayProxy {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl DelayProxy {
    /// Forwards connections on a new port to `127.0.0.1:target`, each chunk from the client
    /// `delay` late.
    pub fn start(target: u16, delay: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (client_in, server_in) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                std::thread::spawn(move || pipe(client_in, server, delay));
                std::thread::spawn(move || pipe(server_in, client, Duration::ZERO));
            }
        });
        DelayProxy { port, connections }
    }

    /// How many connections clients opened through the proxy so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn pipe(from: TcpStream, to: TcpStream, delay: Duration) {
    pipe_counted(from, to, delay, &AtomicU64::new(0));
}

/// Forwards `from` to `to`, each chunk `delay` late, adding its bytes to `count`.
fn pipe_counted(mut from: TcpStream, mut to: TcpStream, delay: Duration, count: &AtomicU64) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::SeqCst);
                std::thread::sleep(delay);
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Counts the bytes each way ([module documentation](self)); it stops with the test process.
pub struct CountingProxy {
    port: u16,
    /// Client to server, server to client.
    counts: Arc<(AtomicU64, AtomicU64)>,
}

impl CountingProxy {
    /// Forwards connections on a new port to `127.0.0.1:target`, counting what passes.
    pub fn start(target: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let shared = counts.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (client_in, server_in) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let (up, down) = (shared.clone(), shared.clone());
                std::thread::spawn(move || pipe_counted(client_in, server, Duration::ZERO, &up.0));
                std::thread::spawn(move || {
                    pipe_counted(server_in, client, Duration::ZERO, &down.1)
                });
            }
        });
        CountingProxy { port, counts }
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Bytes so far: (client to server, server to client).
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.counts.0.load(Ordering::SeqCst),
            self.counts.1.load(Ordering::SeqCst),
        )
    }
}

/// Closes the connection, passing nothing on, on the next request that holds the armed bytes
/// ([module documentation](self)); it stops with the test process.
pub struct CuttingProxy {
    port: u16,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    cut: Arc<AtomicUsize>,
}

impl CuttingProxy {
    /// Forwards connections on a new port to `127.0.0.1:target`.
    pub fn start(target: u16) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let armed: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
        let cut = Arc::new(AtomicUsize::new(0));
        let (shared_armed, shared_cut) = (armed.clone(), cut.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (Ok(mut client_in), Ok(server_in)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                let (armed, cut) = (shared_armed.clone(), shared_cut.clone());
                let mut server_out = server;
                let client_out = client;
                std::thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client_in.read(&mut buffer) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let chunk = &buffer[..n];
                        let hit = {
                            let mut armed = armed.lock().expect("proxy lock");
                            let hit = armed.as_ref().is_some_and(|needle| {
                                chunk.windows(needle.len()).any(|w| w == needle)
                            });
                            if hit {
                                *armed = None;
                            }
                            hit
                        };
                        if hit {
                            cut.fetch_add(1, Ordering::SeqCst);
                            let _ = client_in.shutdown(Shutdown::Both);
                            let _ = server_out.shutdown(Shutdown::Both);
                            break;
                        }
                        if server_out.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = server_out.shutdown(Shutdown::Write);
                });
                std::thread::spawn(move || pipe(server_in, client_out, Duration::ZERO));
            }
        });
        CuttingProxy { port, armed, cut }
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next request holding `needle` is cut.
    pub fn arm(&self, needle: &[u8]) {
        *self.armed.lock().expect("proxy lock") = Some(needle.to_vec());
    }

    /// Requests cut so far.
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }
}

/// A proxy whose connections, once idle for `idle`, close on the next request instead of
/// passing it on ([module documentation](self)).
pub struct ClosingProxy {
    port: u16,
    closed: Arc<AtomicUsize>,
}

impl ClosingProxy {
    /// Forwards connections on a new port to `127.0.0.1:target`, closing each one that sends a
    /// request after `idle` without traffic.
    pub fn start(target: u16, idle: Duration) -> ClosingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let closed = Arc::new(AtomicUsize::new(0));
        let counted = closed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                let last = Arc::new(Mutex::new(Instant::now()));
                let (last_in, counted) = (last.clone(), counted.clone());
                std::thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    let (mut from, mut to) = (client_in, server);
                    loop {
                        let n = match from.read(&mut buffer) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let quiet = last_in.lock().map(|t| t.elapsed()).unwrap_or_default();
                        if quiet >= idle {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let _ = from.shutdown(Shutdown::Both);
                            let _ = to.shutdown(Shutdown::Both);
                            return;
                        }
                        *last_in.lock().expect("the proxy's clock") = Instant::now();
                        if to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    let (mut from, mut to) = (server_in, client);
                    loop {
                        match from.read(&mut buffer) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                *last.lock().expect("the proxy's clock") = Instant::now();
                                if to.write_all(&buffer[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        ClosingProxy { port, closed }
    }

    /// How many connections it closed on a request.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Cuts `per_cent` of its connections, chosen at random, after a random number of bytes in a
/// random direction ([module documentation](self)); it stops with the test process.
pub struct DroppingProxy {
    port: u16,
    cut: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

/// Where a connection chosen to drop is cut: after this many bytes passed the way it says.
#[derive(Clone, Copy)]
struct Cut {
    upload: bool,
    after: usize,
}

impl DroppingProxy {
    /// Forwards connections on a new port to `127.0.0.1:target`; each one is cut with
    /// probability `per_cent` / 100, after up to `within` bytes of the direction drawn. `seed`
    /// makes the draws repeatable (the order connections arrive in still varies).
    pub fn start(target: u16, per_cent: u32, within: usize, seed: u64) -> DroppingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (counted_cuts, counted) = (cut.clone(), connections.clone());
        std::thread::spawn(move || {
            let mut random = seed;
            let mut draw = move || {
                // splitmix64: well spread from any seed, and repeatable.
                random = random.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = random;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            for client in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                let cut = (draw() % 100 < u64::from(per_cent)).then(|| Cut {
                    upload: draw() % 2 == 0,
                    after: (draw() % within.max(1) as u64) as usize,
                });
                let limit = |upload: bool| cut.filter(|c| c.upload == upload).map(|c| c.after);
                let (up, down) = (limit(true), limit(false));
                let (cuts_up, cuts_down) = (counted_cuts.clone(), counted_cuts.clone());
                std::thread::spawn(move || cut_after(client_in, server, up, &cuts_up));
                std::thread::spawn(move || cut_after(server_in, client, down, &cuts_down));
            }
        });
        DroppingProxy {
            port,
            cut,
            connections,
        }
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections cut so far.
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Forwards `from` to `to`; once `limit` bytes passed (if given), closes both ways of both
/// sockets and counts the cut in `cuts`.
fn cut_after(mut from: TcpStream, mut to: TcpStream, limit: Option<usize>, cuts: &AtomicUsize) {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut passed = 0usize;
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(limit) = limit.filter(|limit| passed + n > *limit) {
            let _ = to.write_all(&buffer[..limit - passed]);
            cuts.fetch_add(1, Ordering::SeqCst);
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
        passed += n;
    }
    let _ = to.shutdown(Shutdown::Write);
}
