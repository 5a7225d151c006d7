//! A TCP proxy on 127.0.0.1 that holds every chunk a client sends for a fixed delay before
//! passing it on: a git server far away (each request waits at least one delay), for tests of
//! time budgets. Answers pass back at once. It counts the connections it accepted.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                std::thread::sleep(delay);
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
