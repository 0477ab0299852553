//! A sink for traffic shaping tests: one port on several loopback
//! addresses (the hosts of a grouping), recording every connection's
//! source and listening address, when it opened and closed and how many
//! transactions it carried, and every message's arrival time, connection
//! and recipients.
//!
//! Concurrency is sampled on every connect: the live count per (source,
//! listening address) and its maximum are kept as connections come and
//! go, and [`ShapingSink::max_concurrent_where`] gives the maximum for any
//! set of connections (one source to all of a grouping's hosts), exact
//! because opens and closes are numbered in the order they happened under
//! one lock, not compared by clock. A reply can be scripted per listening
//! address for RCPT TO or for the end of the data (a `421` one closes the
//! connection after it, as a server does).
//!
//! Replies to pipelined commands go out together, as Postfix's smtpd
//! sends them: held while more commands are already read, flushed before
//! the sink waits for input. Written one by one, the second reply of a
//! group waited for the client's delayed ACK (Nagle: 40 ms on Linux
//! loopback), which no real server adds to a transaction.
//!
//! One thread per listening address and per connection over `std::net`,
//! as [`crate::testkit::ScriptedSink`]; until dropped.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::testkit::{address, content, Conn};

/// Where in the transaction a scripted reply is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// In place of the greeting; the sink then closes the connection.
    Greeting,
    /// To every RCPT TO.
    Rcpt,
    /// To the end of the data (the message is then not accepted).
    Data,
}

/// One connection the sink accepted.
#[derive(Clone, Debug)]
pub struct SinkConn {
    /// Its number, in the order connections were accepted (from 0).
    pub id: usize,
    /// The client's address (its source address and port).
    pub source: SocketAddr,
    /// The address and port it connected to.
    pub listen: SocketAddr,
    /// When it was accepted.
    pub connected: Instant,
    /// When it closed (either side); `None` while open.
    pub closed: Option<Instant>,
    /// MAIL FROM commands answered 250 on it.
    pub transactions: usize,
    /// Order of the accept among all opens and closes.
    opened_seq: u64,
    /// Order of the close, once closed.
    closed_seq: Option<u64>,
}

/// A message the sink accepted (250 to the end of the data).
#[derive(Clone, Debug)]
pub struct SinkMessage {
    /// When it was accepted: the 250 to the end of its data, after the
    /// delay set for its listening address, if any.
    pub at: Instant,
    /// The connection it came on ([`SinkConn::id`]).
    pub conn: usize,
    /// That connection's source address.
    pub source: IpAddr,
    /// The address that connection was made to.
    pub listen: IpAddr,
    /// The MAIL FROM address.
    pub from: String,
    /// The recipients accepted.
    pub rcpts: Vec<String>,
    /// The content, dot-unstuffed, without the final dot.
    pub data: String,
}

#[derive(Default)]
struct State {
    conns: Vec<SinkConn>,
    messages: Vec<SinkMessage>,
    /// Live and most connections per (source, listening address).
    live: HashMap<(IpAddr, IpAddr), (usize, usize)>,
    seq: u64,
}

struct Shared {
    replies: Mutex<HashMap<(IpAddr, Stage), String>>,
    /// Time taken before answering the end of the data, per address.
    delays: Mutex<HashMap<IpAddr, Duration>>,
    state: Mutex<State>,
    stop: AtomicBool,
}

/// The sink; see the module header.
pub struct ShapingSink {
    /// The port, the same on every address.
    pub port: u16,
    /// The addresses it listens on.
    pub ips: Vec<IpAddr>,
    shared: Arc<Shared>,
    acceptors: Vec<JoinHandle<()>>,
}

/// Binds one port on every address: a free port of the first, taken on
/// the others too (tried again with another port if one has it).
fn bind_all(ips: &[IpAddr]) -> (u16, Vec<TcpListener>) {
    'port: for _ in 0..50 {
        let first = TcpListener::bind((ips[0], 0))
            .unwrap_or_else(|e| panic!("bind the shaping sink on {}: {e}", ips[0]));
        let port = first.local_addr().unwrap().port();
        let mut ls = vec![first];
        for ip in &ips[1..] {
            match TcpListener::bind((*ip, port)) {
                Ok(l) => ls.push(l),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue 'port,
                Err(e) => panic!("bind the shaping sink on {ip}:{port}: {e}"),
            }
        }
        return (port, ls);
    }
    panic!("no port free on all of {ips:?}");
}

impl ShapingSink {
    /// Starts listening on one free port on each of `ips` (loopback
    /// addresses such as 127.0.0.10, 127.0.0.11).
    pub fn start(ips: &[&str]) -> ShapingSink {
        Self::start_on(ips, 0)
    }

    /// Starts listening on `port` of each of `ips` (0: a free port); a
    /// fixed port that cannot be bound fails the test, naming it (port 25,
    /// where MX delivery goes, needs root).
    pub fn start_on(ips: &[&str], port: u16) -> ShapingSink {
        let ips: Vec<IpAddr> = ips
            .iter()
            .map(|i| i.parse().expect("an IP address"))
            .collect();
        assert!(!ips.is_empty(), "a shaping sink needs an address");
        let (port, listeners) = if port == 0 {
            bind_all(&ips)
        } else {
            let ls = ips
                .iter()
                .map(|ip| {
                    TcpListener::bind((*ip, port)).unwrap_or_else(|e| {
                        panic!("the shaping sink cannot listen on {ip}:{port}: {e} (port 25 needs root)")
                    })
                })
                .collect();
            (port, ls)
        };
        let shared = Arc::new(Shared {
            replies: Mutex::new(HashMap::new()),
            delays: Mutex::new(HashMap::new()),
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
        });
        let acceptors = listeners
            .into_iter()
            .map(|l| {
                let sh = shared.clone();
                std::thread::spawn(move || {
                    for conn in l.incoming() {
                        if sh.stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        let sh = sh.clone();
                        std::thread::spawn(move || serve(conn, &sh));
                    }
                })
            })
            .collect();
        ShapingSink {
            port,
            ips,
            shared,
            acceptors,
        }
    }

    /// Like [`ShapingSink::start_on`], listening in the network namespace
    /// whose file is `netns` (see [`crate::netns`]): its sockets are made
    /// by a thread that entered it, and stay in it.
    pub fn start_in(netns: &std::path::Path, ips: &[&str], port: u16) -> ShapingSink {
        let netns = netns.to_path_buf();
        let ips: Vec<String> = ips.iter().map(|s| s.to_string()).collect();
        std::thread::spawn(move || {
            sys::net::enter_net_namespace(&netns)
                .unwrap_or_else(|e| panic!("enter {}: {e}", netns.display()));
            let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
            ShapingSink::start_on(&refs, port)
        })
        .join()
        .expect("the sink starts in its namespace")
    }

    /// Answers `stage` on connections to `listen` with `reply` (a whole
    /// line, e.g. `421 4.7.0 [TS04] try later`), from the next command on.
    pub fn reply(&self, listen: &str, stage: Stage, reply: &str) {
        let ip = listen.parse().expect("an IP address");
        self.shared
            .replies
            .lock()
            .unwrap()
            .insert((ip, stage), reply.to_string());
    }

    /// Takes `d` before answering the end of each message's data on
    /// connections to `listen` (a slow server, so that connections stay busy).
    pub fn delay(&self, listen: &str, d: Duration) {
        let ip = listen.parse().expect("an IP address");
        self.shared.delays.lock().unwrap().insert(ip, d);
    }

    /// Accepts everything again, on every address.
    pub fn clear_replies(&self) {
        self.shared.replies.lock().unwrap().clear();
    }

    /// Every connection so far, in the order accepted.
    pub fn conns(&self) -> Vec<SinkConn> {
        self.shared.state.lock().unwrap().conns.clone()
    }

    /// Every message accepted so far, in the order received.
    pub fn messages(&self) -> Vec<SinkMessage> {
        self.shared.state.lock().unwrap().messages.clone()
    }

    /// The most connections from `source` to `listen` open at once.
    pub fn max_concurrent(&self, source: &str, listen: &str) -> usize {
        let key = (source.parse().unwrap(), listen.parse().unwrap());
        let st = self.shared.state.lock().unwrap();
        st.live.get(&key).map_or(0, |&(_, max)| max)
    }

    /// Connections from `source` to `listen` open now.
    pub fn open_now(&self, source: &str, listen: &str) -> usize {
        let key = (source.parse().unwrap(), listen.parse().unwrap());
        let st = self.shared.state.lock().unwrap();
        st.live.get(&key).map_or(0, |&(live, _)| live)
    }

    /// The most connections satisfying `which` open at once, sampled at
    /// each of their connects (e.g. one source to any of a grouping's hosts).
    pub fn max_concurrent_where(&self, which: impl Fn(&SinkConn) -> bool) -> usize {
        self.max_concurrent_since(which, None)
    }

    /// As [`ShapingSink::max_concurrent_where`], sampled only at the
    /// connects at or after `since` (those before still count as open).
    pub fn max_concurrent_since(
        &self,
        which: impl Fn(&SinkConn) -> bool,
        since: Option<Instant>,
    ) -> usize {
        let st = self.shared.state.lock().unwrap();
        let sel: Vec<&SinkConn> = st.conns.iter().filter(|c| which(c)).collect();
        sel.iter()
            .filter(|c| since.is_none_or(|t| c.connected >= t))
            .map(|c| {
                sel.iter()
                    .filter(|d| {
                        d.opened_seq <= c.opened_seq
                            && d.closed_seq.is_none_or(|s| s > c.opened_seq)
                    })
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Waits until `n` messages have arrived; panics after `secs`.
    pub fn wait_messages(&self, n: usize, secs: u64) -> Vec<SinkMessage> {
        crate::wait_for(secs, &format!("{n} messages at the shaping sink"), || {
            let m = self.messages();
            (m.len() >= n).then_some(m)
        })
    }
}

impl Drop for ShapingSink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake each acceptor, blocked in accept().
        for ip in &self.ips {
            let _ = TcpStream::connect_timeout(&(*ip, self.port).into(), Duration::from_secs(1));
        }
        for t in self.acceptors.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, sh: &Shared) {
    let (Ok(source), Ok(listen)) = (stream.peer_addr(), stream.local_addr()) else {
        return;
    };
    if sh.stop.load(Ordering::SeqCst) {
        return;
    }
    let key = (source.ip(), listen.ip());
    let id = {
        let mut st = sh.state.lock().unwrap();
        st.seq += 1;
        let opened_seq = st.seq;
        let live = st.live.entry(key).or_default();
        live.0 += 1;
        live.1 = live.1.max(live.0);
        let id = st.conns.len();
        st.conns.push(SinkConn {
            id,
            source,
            listen,
            connected: Instant::now(),
            closed: None,
            transactions: 0,
            opened_seq,
            closed_seq: None,
        });
        id
    };
    // Short reads, so that a sink being dropped is noticed.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut c = Conn {
        stream,
        buf: Vec::new(),
    };
    session(&mut c, sh, id, key);
    let _ = c.stream.shutdown(std::net::Shutdown::Both);
    end(sh, id, key);
}

/// Records the end of connection `id` (once): when the sink answers QUIT,
/// or when the connection goes. A client told 221 may open its next
/// connection at once, and this thread's own close would then be counted
/// after that connect, one too many at once that no server would see.
fn end(sh: &Shared, id: usize, key: (IpAddr, IpAddr)) {
    let mut st = sh.state.lock().unwrap();
    if st.conns[id].closed_seq.is_some() {
        return;
    }
    st.seq += 1;
    let seq = st.seq;
    if let Some(live) = st.live.get_mut(&key) {
        live.0 -= 1;
    }
    let conn = &mut st.conns[id];
    conn.closed = Some(Instant::now());
    conn.closed_seq = Some(seq);
}

/// A connection whose replies wait in `out` until [`Replies::flush`].
struct Replies<'a> {
    c: &'a mut Conn,
    out: Vec<u8>,
}

impl Replies<'_> {
    /// Queues a reply line; true (a failed write shows at the flush).
    fn reply(&mut self, text: &str) -> bool {
        self.out.extend_from_slice(text.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        true
    }

    /// Writes what is queued in one write; false when the client is gone.
    fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let ok = self.c.stream.write_all(&self.out).is_ok();
        self.out.clear();
        ok
    }

    /// The next command line, the replies flushed first unless a whole
    /// line is already read (a pipelined group goes on).
    fn line(&mut self, stop: &AtomicBool) -> Option<Vec<u8>> {
        if !self.c.buf.contains(&b'\n') && !self.flush() {
            return None;
        }
        self.c.line(stop)
    }
}

fn session(conn: &mut Conn, sh: &Shared, id: usize, (source, listen): (IpAddr, IpAddr)) {
    let mut c = Replies {
        c: conn,
        out: Vec::new(),
    };
    let scripted = |stage| sh.replies.lock().unwrap().get(&(listen, stage)).cloned();
    if let Some(r) = scripted(Stage::Greeting) {
        let _ = c.reply(&r) && c.flush();
        return;
    }
    if !c.reply("220 shaping.test.example ESMTP testkit") {
        return;
    }
    let mut from: Option<String> = None;
    let mut rcpts: Vec<String> = Vec::new();
    while let Some(line) = c.line(&sh.stop) {
        let text = String::from_utf8_lossy(&line).into_owned();
        let upper = text.to_ascii_uppercase();
        let mut close = false;
        let ok = if upper.starts_with("EHLO") {
            c.reply("250-shaping.test.example\r\n250-PIPELINING\r\n250-SIZE 104857600\r\n250-8BITMIME\r\n250 ENHANCEDSTATUSCODES")
        } else if upper.starts_with("HELO") {
            c.reply("250 shaping.test.example")
        } else if upper.starts_with("MAIL FROM:") {
            from = Some(address(&text[10..]));
            rcpts.clear();
            sh.state.lock().unwrap().conns[id].transactions += 1;
            c.reply("250 2.1.0 Ok")
        } else if upper.starts_with("RCPT TO:") {
            if let Some(r) = scripted(Stage::Rcpt) {
                close = r.starts_with("421");
                c.reply(&r)
            } else if from.is_none() {
                c.reply("503 5.5.1 Error: need MAIL command")
            } else {
                rcpts.push(address(&text[8..]));
                c.reply("250 2.1.5 Ok")
            }
        } else if upper == "DATA" {
            if rcpts.is_empty() {
                c.reply("554 5.5.1 Error: no valid recipients")
            } else {
                // The client sends the data only after the 354.
                if !c.reply("354 End data with <CR><LF>.<CR><LF>") || !c.flush() {
                    return;
                }
                let Some(data) = content(c.c, &sh.stop, None) else {
                    return;
                };
                let delay = sh.delays.lock().unwrap().get(&listen).copied();
                if let Some(d) = delay {
                    std::thread::sleep(d);
                }
                if let Some(r) = scripted(Stage::Data) {
                    from = None;
                    rcpts.clear();
                    close = r.starts_with("421");
                    c.reply(&r)
                } else {
                    let m = SinkMessage {
                        at: Instant::now(),
                        conn: id,
                        source,
                        listen,
                        from: from.take().unwrap_or_default(),
                        rcpts: std::mem::take(&mut rcpts),
                        data,
                    };
                    sh.state.lock().unwrap().messages.push(m);
                    c.reply("250 2.0.0 Ok: queued")
                }
            }
        } else if upper == "RSET" {
            from = None;
            rcpts.clear();
            c.reply("250 2.0.0 Ok")
        } else if upper == "NOOP" {
            c.reply("250 2.0.0 Ok")
        } else if upper == "QUIT" {
            end(sh, id, (source, listen));
            let _ = c.reply("221 2.0.0 Bye");
            let _ = c.flush();
            return;
        } else {
            c.reply("502 5.5.2 Error: command not recognized")
        };
        if !ok || close {
            let _ = c.flush();
            return;
        }
    }
}
