//! A scripted SMTP sink for fault tests: the faults Postfix's smtp-sink
//! cannot produce on demand (a session limit answered with 421, a slow or
//! missing greeting, replies chosen per recipient, a connection dropped in
//! the middle of the message content), with a record of every session so a
//! test can assert on what the server saw; and [`Unanswering`], a port whose
//! connects hang.
//!
//! One thread per connection over `std::net`. The script can be changed
//! while the sink runs (a destination that recovers): the session limit
//! and the greeting apply to the connections accepted after the change,
//! the replies to every command received after it.
//!
//! For traffic shaping tests, [`ShapingSink`] listens on several loopback
//! addresses and records who connected from where and when.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::shaping_sink::{ShapingSink, SinkConn, SinkMessage, Stage};

/// When the 220 greeting comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Greeting {
    /// After this delay.
    After(Duration),
    /// Never: the session is held open, silent, until the client leaves.
    Never,
}

/// What the sink does; change it with the [`ScriptedSink`] setters.
#[derive(Clone, Debug)]
struct Script {
    /// Most sessions served at once; the excess get 421 (0: no limit).
    max_sessions: usize,
    greeting: Greeting,
    /// (substring of the address, full reply line) for RCPT TO, first match wins.
    rcpt_replies: Vec<(String, String)>,
    /// Close the connection after this many bytes of message content.
    drop_in_data: Option<usize>,
    /// Pause before the reply to the end of the content.
    data_delay: Duration,
}

/// A message the sink accepted (250 to the end of data).
#[derive(Clone, Debug)]
pub struct Message {
    /// The MAIL FROM address.
    pub from: String,
    /// The recipients the sink accepted.
    pub rcpts: Vec<String>,
    /// The content as received, dot-unstuffed, without the final dot.
    pub data: String,
}

/// One connection the sink accepted.
#[derive(Clone, Debug)]
pub struct Session {
    /// When the connection was accepted.
    pub connected: Instant,
    /// Whether it was refused with 421 over the session limit.
    pub refused: bool,
    /// Whether the 220 greeting was sent.
    pub greeted: bool,
    /// The command lines in the order received.
    pub commands: Vec<String>,
    /// The messages accepted in this session.
    pub messages: Vec<Message>,
    /// Whether the sink dropped the connection during the content.
    pub dropped_in_data: bool,
}

#[derive(Default)]
struct State {
    sessions: Vec<Session>,
    active: usize,
    max_active: usize,
}

struct Shared {
    script: Mutex<Script>,
    state: Mutex<State>,
    stop: AtomicBool,
}

/// The sink: listening on 127.0.0.1:`port` until dropped.
pub struct ScriptedSink {
    /// Its port.
    pub port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl ScriptedSink {
    /// Starts a sink with no faults on a free loopback port.
    pub fn start() -> ScriptedSink {
        Self::start_on(0)
    }

    /// Starts a sink with no faults on 127.0.0.1:`port` (0: a free one).
    pub fn start_on(port: u16) -> ScriptedSink {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the scripted sink");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                max_sessions: 0,
                greeting: Greeting::After(Duration::ZERO),
                rcpt_replies: Vec::new(),
                drop_in_data: None,
                data_delay: Duration::ZERO,
            }),
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let acceptor = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let sh = sh.clone();
                std::thread::spawn(move || serve(conn, &sh));
            }
        });
        ScriptedSink {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    fn script(&self, f: impl FnOnce(&mut Script)) {
        f(&mut self.shared.script.lock().unwrap());
    }

    /// Serve at most `n` sessions at once; greet the excess with 421 and close (0: no limit).
    pub fn max_sessions(&self, n: usize) {
        self.script(|s| s.max_sessions = n);
    }

    /// When new sessions get their 220 greeting.
    pub fn greeting(&self, g: Greeting) {
        self.script(|s| s.greeting = g);
    }

    /// Answer RCPT TO for addresses containing `pattern` with `reply` (e.g. "450 4.2.0 busy").
    pub fn rcpt_reply(&self, pattern: &str, reply: &str) {
        self.script(|s| s.rcpt_replies.push((pattern.into(), reply.into())));
    }

    /// Accept every recipient again.
    pub fn clear_rcpt_replies(&self) {
        self.script(|s| s.rcpt_replies.clear());
    }

    /// Drop the connection after `bytes` of message content (`None`: never).
    pub fn drop_in_data(&self, bytes: Option<usize>) {
        self.script(|s| s.drop_in_data = bytes);
    }

    /// Wait this long before answering the end of each message (a slow server).
    pub fn data_delay(&self, d: Duration) {
        self.script(|s| s.data_delay = d);
    }

    /// Every session so far, in the order they were accepted.
    pub fn sessions(&self) -> Vec<Session> {
        self.shared.state.lock().unwrap().sessions.clone()
    }

    /// Every message accepted so far.
    pub fn messages(&self) -> Vec<Message> {
        self.sessions()
            .into_iter()
            .flat_map(|s| s.messages)
            .collect()
    }

    /// The most sessions that were being served at the same time.
    pub fn max_concurrent(&self) -> usize {
        self.shared.state.lock().unwrap().max_active
    }
}

impl Drop for ScriptedSink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor, which is blocked in accept().
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// What one read gave.
#[derive(PartialEq, Eq)]
pub(crate) enum Fill {
    Data,
    Idle,
    Gone,
}

/// A port where connects hang until the client gives up: a listener that
/// never accepts, its accept queue filled, so the kernel drops further SYNs
/// (what a host behind a dropping firewall looks like). Until dropped.
pub struct Unanswering {
    /// Its port.
    pub port: u16,
    _listener: std::net::TcpListener,
    _fillers: Vec<TcpStream>,
}

impl Unanswering {
    /// Binds and fills the accept queue; panics if the queue never fills.
    pub fn start() -> Unanswering {
        let listener = sys::net::tcp_listener("127.0.0.1:0".parse().unwrap(), 1)
            .expect("bind the unanswering port");
        let addr = listener.local_addr().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..64 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => fillers.push(s),
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    return Unanswering {
                        port: addr.port(),
                        _listener: listener,
                        _fillers: fillers,
                    }
                }
                Err(e) => panic!("filling the accept queue: {e}"),
            }
        }
        panic!("the accept queue of {addr} never filled");
    }
}

/// Reads lines from the client, noticing the sink's stop flag (shared
/// with the [`crate::shaping_sink`]).
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) buf: Vec<u8>,
}

impl Conn {
    /// Reads what the client sent within the read timeout.
    pub(crate) fn fill(&mut self, stop: &AtomicBool) -> Fill {
        if stop.load(Ordering::SeqCst) {
            return Fill::Gone;
        }
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => Fill::Gone,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Fill::Data
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Fill::Idle
            }
            Err(_) => Fill::Gone,
        }
    }

    /// The next line without its line ending, or `None` when the client is gone.
    pub(crate) fn line(&mut self, stop: &AtomicBool) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let mut l: Vec<u8> = self.buf.drain(..=i).collect();
                l.pop();
                if l.last() == Some(&b'\r') {
                    l.pop();
                }
                return Some(l);
            }
            if self.fill(stop) == Fill::Gone {
                return None;
            }
        }
    }

    pub(crate) fn reply(&mut self, text: &str) -> bool {
        self.stream
            .write_all(format!("{text}\r\n").as_bytes())
            .is_ok()
    }
}

fn serve(stream: TcpStream, sh: &Shared) {
    let script = sh.script.lock().unwrap().clone();
    let index = {
        let mut st = sh.state.lock().unwrap();
        let refused = script.max_sessions > 0 && st.active >= script.max_sessions;
        if !refused {
            st.active += 1;
            st.max_active = st.max_active.max(st.active);
        }
        st.sessions.push(Session {
            connected: Instant::now(),
            refused,
            greeted: false,
            commands: Vec::new(),
            messages: Vec::new(),
            dropped_in_data: false,
        });
        if refused {
            drop(st);
            let mut s = stream;
            let _ = s.write_all(b"421 4.7.0 too many connections\r\n");
            return;
        }
        st.sessions.len() - 1
    };
    // Short reads, so that a sink being dropped is noticed.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut c = Conn {
        stream,
        buf: Vec::new(),
    };
    session(&mut c, sh, script.greeting, index);
    sh.state.lock().unwrap().active -= 1;
}

fn record(sh: &Shared, index: usize, f: impl FnOnce(&mut Session)) {
    f(&mut sh.state.lock().unwrap().sessions[index]);
}

/// Waits for the greeting delay; false if the client left or the sink stopped first.
fn wait_greeting(c: &mut Conn, sh: &Shared, g: Greeting) -> bool {
    let start = Instant::now();
    loop {
        if let Greeting::After(d) = g {
            if start.elapsed() >= d {
                return true;
            }
        }
        // Anything the client says before the greeting is kept for later;
        // EOF means it gave up waiting.
        if c.fill(&sh.stop) == Fill::Gone {
            return false;
        }
    }
}

fn session(c: &mut Conn, sh: &Shared, greeting: Greeting, index: usize) {
    if greeting != Greeting::After(Duration::ZERO) && !wait_greeting(c, sh, greeting) {
        return;
    }
    if !c.reply("220 scripted.test.example ESMTP testkit") {
        return;
    }
    record(sh, index, |s| s.greeted = true);
    let mut from: Option<String> = None;
    let mut rcpts: Vec<String> = Vec::new();
    while let Some(line) = c.line(&sh.stop) {
        let text = String::from_utf8_lossy(&line).into_owned();
        record(sh, index, |s| s.commands.push(text.clone()));
        let upper = text.to_ascii_uppercase();
        // Replies follow the script as it is now: a server that recovers
        // does so for the connections it already has, too.
        let script = sh.script.lock().unwrap().clone();
        let ok = if upper.starts_with("EHLO") {
            c.reply("250-scripted.test.example\r\n250-PIPELINING\r\n250-SIZE 104857600\r\n250-8BITMIME\r\n250 ENHANCEDSTATUSCODES")
        } else if upper.starts_with("HELO") {
            c.reply("250 scripted.test.example")
        } else if upper.starts_with("MAIL FROM:") {
            from = Some(address(&text[10..]));
            rcpts.clear();
            c.reply("250 2.1.0 Ok")
        } else if upper.starts_with("RCPT TO:") {
            let a = address(&text[8..]);
            match script
                .rcpt_replies
                .iter()
                .find(|(p, _)| a.contains(p.as_str()))
            {
                Some((_, r)) => c.reply(r),
                None if from.is_none() => c.reply("503 5.5.1 Error: need MAIL command"),
                None => {
                    rcpts.push(a);
                    c.reply("250 2.1.5 Ok")
                }
            }
        } else if upper == "DATA" {
            if rcpts.is_empty() {
                c.reply("554 5.5.1 Error: no valid recipients")
            } else {
                if !c.reply("354 End data with <CR><LF>.<CR><LF>") {
                    return;
                }
                let Some(data) = content(c, &sh.stop, script.drop_in_data) else {
                    record(sh, index, |s| s.dropped_in_data = true);
                    return;
                };
                std::thread::sleep(script.data_delay);
                let m = Message {
                    from: from.take().unwrap_or_default(),
                    rcpts: std::mem::take(&mut rcpts),
                    data,
                };
                record(sh, index, |s| s.messages.push(m));
                c.reply("250 2.0.0 Ok: queued")
            }
        } else if upper == "RSET" {
            from = None;
            rcpts.clear();
            c.reply("250 2.0.0 Ok")
        } else if upper == "NOOP" {
            c.reply("250 2.0.0 Ok")
        } else if upper == "QUIT" {
            let _ = c.reply("221 2.0.0 Bye");
            return;
        } else {
            c.reply("502 5.5.2 Error: command not recognized")
        };
        if !ok {
            return;
        }
    }
}

/// Reads the content up to the final dot; `None` if the connection ended
/// (or was dropped by the script after `drop_after` bytes) before it.
pub(crate) fn content(
    c: &mut Conn,
    stop: &AtomicBool,
    drop_after: Option<usize>,
) -> Option<String> {
    let mut data = Vec::new();
    loop {
        if drop_after.is_some_and(|n| data.len() >= n) {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
            return None;
        }
        let line = c.line(stop)?;
        if line == b"." {
            return Some(String::from_utf8_lossy(&data).into_owned());
        }
        let l = line.strip_prefix(b".").unwrap_or(&line);
        data.extend_from_slice(l);
        data.extend_from_slice(b"\r\n");
    }
}

/// The address inside `<...>` of a MAIL/RCPT argument, without parameters.
pub(crate) fn address(arg: &str) -> String {
    let arg = arg.trim();
    match (arg.find('<'), arg.find('>')) {
        (Some(a), Some(b)) if a < b => arg[a + 1..b].to_string(),
        _ => arg.split_whitespace().next().unwrap_or("").to_string(),
    }
}
