//! The bench's WAN link: a TCP delay line on OS threads.
//!
//! netem delays packets on kernel high-resolution timers, so a link it emulates keeps the
//! spacing of what was sent to within microseconds, on every connection alike. A delay
//! line on tokio's timer does not: deadlines round up to 1 ms ticks, and a busy runtime
//! fires them late, so bytes sent a few milliseconds apart on two connections could leave
//! in the wrong order. That is jitter of the emulator, not of a link, and etcd runs
//! requests that arrive together in no useful order (docs/design.md, "Pipelined commits").
//! So each direction of each connection has a reader thread, which stamps what it reads,
//! and a writer thread, which sleeps (`nanosleep`, tens of microseconds late at most on an
//! idle core) until each chunk is due.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Largest single read.
const READ_BYTES: usize = 64 << 10;

/// Chunks held per direction: with reads of at most READ_BYTES, 64 MiB, far above what
/// etcd moves in one delay, so the bound only stops a reader whose receiver stopped
/// taking bytes (as a real link's window would).
const HELD_CHUNKS: usize = 1024;

/// Bytes read at one time, delivered together after the delay; `None` is the sender's
/// FIN, delayed like the bytes before it.
struct Chunk {
    due: Instant,
    data: Option<Vec<u8>>,
}

/// Forwards `down` to `upstream` and back, each way `one_way` late, until both directions
/// end. An EOF is forwarded as a delayed half-close; an error on either side ends both
/// directions, as a reset would.
pub fn proxy_connection(down: TcpStream, upstream: &str, one_way: Duration) -> io::Result<()> {
    let up = TcpStream::connect(upstream)?;
    // The delay is ours to add; Nagle would add more, and unevenly.
    down.set_nodelay(true)?;
    up.set_nodelay(true)?;
    let to_up = spawn_direction(down.try_clone()?, up.try_clone()?, one_way)?;
    let to_down = spawn_direction(up, down, one_way)?;
    let a = to_up.join();
    let b = to_down.join();
    for r in [a, b] {
        r.map_err(|_| io::Error::other("delay line thread panicked"))??;
    }
    Ok(())
}

/// One direction: `from` is read, `to` written. Returns the reader's handle, which ends
/// once the writer has.
fn spawn_direction(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Duration,
) -> io::Result<thread::JoinHandle<io::Result<()>>> {
    let (tx, rx) = mpsc::sync_channel::<Chunk>(HELD_CHUNKS);
    let to_reset = to.try_clone()?;
    let from_reset = from.try_clone()?;
    let writer =
        thread::Builder::new()
            .name("delay-write".into())
            .spawn(move || -> io::Result<()> {
                for c in rx {
                    let now = Instant::now();
                    if c.due > now {
                        thread::sleep(c.due - now);
                    }
                    let sent = match c.data {
                        Some(d) => to.write_all(&d),
                        None => return to.shutdown(Shutdown::Write),
                    };
                    if let Err(e) = sent {
                        // The receiver is gone: stop the sender too.
                        let _ = from_reset.shutdown(Shutdown::Both);
                        return Err(e);
                    }
                }
                Ok(())
            })?;
    thread::Builder::new()
        .name("delay-read".into())
        .spawn(move || -> io::Result<()> {
            let mut buf = vec![0u8; READ_BYTES];
            let read = loop {
                let n = match from.read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // The sender reset: so does the link, at once.
                        let _ = to_reset.shutdown(Shutdown::Both);
                        break Err(e);
                    }
                };
                let chunk = Chunk {
                    due: Instant::now() + delay,
                    data: (n > 0).then(|| buf[..n].to_vec()),
                };
                // A send fails only when the writer has ended, on an error returned below.
                if tx.send(chunk).is_err() || n == 0 {
                    break Ok(());
                }
            };
            drop(tx);
            let written = writer
                .join()
                .map_err(|_| io::Error::other("delay line writer panicked"))?;
            // A writer stopped by the receiver going away is the usual end of a connection.
            read.and(written.or_else(|e| match e.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Ok(()),
                _ => Err(e),
            }))
        })
}
