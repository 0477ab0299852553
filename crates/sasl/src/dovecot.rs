//! The client side of Dovecot's authentication protocol (version 1.x), sans-IO.
//!
//! One [`Client`] is one connection to Dovecot's auth socket, shared by
//! every session of a process: each exchange carries its own id. The
//! handshake is ours `VERSION 1 2` and `CPID pid`, then Dovecot's
//! `VERSION`, `MECH` lines, `SPID`, `CUID`, `COOKIE` and `DONE`; after it
//! [`Event::Ready`] says which mechanisms Dovecot offers. An exchange is
//! `AUTH id mech service=smtp nologin lip= rip= [secured] [resp=]`, then
//! `CONT` lines both ways (base64 challenges and responses, relayed as
//! they are: the mechanism is Dovecot's business), and Dovecot's final
//! `OK id user=name` or `FAIL id [reason=] [temp]`.
//!
//! The shell feeds what it reads ([`Client::feed`]), writes
//! [`Client::take_output`] and acts on [`Client::poll_event`]. Exchanges
//! begun before the handshake ends are held and sent after `DONE`.
//! Answers for an id the client no longer knows (given up by the shell)
//! are dropped. A line longer than [`MAX_LINE`], a major version other
//! than 1, or a malformed answer is a [`ProtocolError`]: the shell drops
//! the connection and fails the exchanges it carried. No clock, no
//! logging, no panic on Dovecot's input.

use std::collections::{BTreeSet, VecDeque};

/// Longest line accepted from Dovecot (its OK lines carry a few fields;
/// its own limit for a request line is 8 KiB of base64).
pub const MAX_LINE: usize = 16 * 1024;

/// One mechanism Dovecot offers, with the flags of its `MECH` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mechanism {
    /// The name, upper case (`PLAIN`, `LOGIN`, ...).
    pub name: String,
    /// Sends the password in the clear (`plaintext`).
    pub plaintext: bool,
    /// Allows anonymous logins (`anonymous`).
    pub anonymous: bool,
    /// Not to be offered to clients (`private`).
    pub private: bool,
    /// Open to dictionary attacks (`dictionary`).
    pub dictionary: bool,
    /// Open to active attacks (`active`).
    pub active: bool,
}

/// What the client tells the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake is over: the mechanisms are known.
    Ready,
    /// Dovecot wants the client's next response to this challenge (base64).
    Continue {
        /// The exchange.
        id: u32,
        /// The challenge, base64 as Dovecot sent it.
        challenge: String,
    },
    /// The client is authenticated.
    Success {
        /// The exchange.
        id: u32,
        /// The authenticated user name (Dovecot's `user=`).
        user: String,
    },
    /// Authentication failed.
    Failure {
        /// The exchange.
        id: u32,
        /// Dovecot's `reason=`, when it gave one (safe to show the client).
        reason: Option<String>,
        /// A temporary failure (`temp`, or `code=temp_fail`): try again later.
        temporary: bool,
    },
}

/// Dovecot said something this client cannot follow; the connection is unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A line longer than [`MAX_LINE`].
    LineTooLong,
    /// A major protocol version other than 1.
    Version(String),
    /// A line that does not parse, quoted (shortened).
    Malformed(String),
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::LineTooLong => write!(f, "line longer than {MAX_LINE} bytes"),
            ProtocolError::Version(v) => write!(f, "unsupported protocol version {v}"),
            ProtocolError::Malformed(l) => write!(f, "malformed line \"{l}\""),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// An exchange that cannot be begun: its fields would break the line format.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The mechanism name is not a SASL mechanism name (RFC 4422 §3.1).
    BadMechanism,
    /// The initial or next response is not base64.
    BadResponse,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RequestError::BadMechanism => "invalid mechanism name",
            RequestError::BadResponse => "invalid base64 data",
        })
    }
}

impl std::error::Error for RequestError {}

/// What the AUTH line says about the client, besides the mechanism.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRequest<'a> {
    /// The mechanism the client chose.
    pub mechanism: &'a str,
    /// The initial response (base64; empty for RFC 4954's `=`), if any.
    pub initial: Option<&'a str>,
    /// Our address (`lip=`).
    pub local_ip: std::net::IpAddr,
    /// The client's address (`rip=`).
    pub remote_ip: std::net::IpAddr,
    /// The session is under TLS (`secured`: Dovecot may then allow plaintext mechanisms).
    pub secured: bool,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Client {
    inbuf: Vec<u8>,
    output: Vec<u8>,
    /// AUTH lines waiting for the end of the handshake.
    held: Vec<u8>,
    version_seen: bool,
    ready: bool,
    mechanisms: Vec<Mechanism>,
    /// Exchanges begun and not finished.
    open: BTreeSet<u32>,
    next_id: u32,
    events: VecDeque<Event>,
}

impl Client {
    /// A new connection from process `pid`; its handshake is the first output.
    pub fn new(pid: u32) -> Self {
        Client {
            inbuf: Vec::new(),
            output: format!("VERSION\t1\t2\nCPID\t{pid}\n").into_bytes(),
            held: Vec::new(),
            version_seen: false,
            ready: false,
            mechanisms: Vec::new(),
            open: BTreeSet::new(),
            next_id: 1,
            events: VecDeque::new(),
        }
    }

    /// True once Dovecot's `DONE` has come.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The mechanisms Dovecot offers (empty before [`Event::Ready`]).
    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// Bytes to write to the socket.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// True when there are bytes to write.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Exchanges begun and not finished.
    pub fn open_exchanges(&self) -> impl Iterator<Item = u32> + '_ {
        self.open.iter().copied()
    }

    /// Begins an exchange; its id tags the events that answer it.
    pub fn begin(&mut self, req: &AuthRequest<'_>) -> Result<u32, RequestError> {
        if !is_mechanism_name(req.mechanism) {
            return Err(RequestError::BadMechanism);
        }
        if req.initial.is_some_and(|r| !crate::is_base64(r)) {
            return Err(RequestError::BadResponse);
        }
        let id = self.next_id;
        // Ids are never 0 and not reused while open.
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        let mut line = format!(
            "AUTH\t{id}\t{}\tservice=smtp\tnologin\tlip={}\trip={}",
            req.mechanism.to_ascii_uppercase(),
            unmap(req.local_ip),
            unmap(req.remote_ip)
        );
        if req.secured {
            line.push_str("\tsecured");
        }
        if let Some(resp) = req.initial {
            line.push_str("\tresp=");
            line.push_str(resp);
        }
        line.push('\n');
        if self.ready {
            self.output.extend_from_slice(line.as_bytes());
        } else {
            self.held.extend_from_slice(line.as_bytes());
        }
        self.open.insert(id);
        Ok(id)
    }

    /// The client's response to a challenge of exchange `id` (base64).
    pub fn respond(&mut self, id: u32, response: &str) -> Result<(), RequestError> {
        if !crate::is_base64(response) {
            return Err(RequestError::BadResponse);
        }
        if self.open.contains(&id) {
            let line = format!("CONT\t{id}\t{response}\n");
            self.output.extend_from_slice(line.as_bytes());
        }
        Ok(())
    }

    /// Forgets exchange `id` (the client went away or cancelled): its
    /// answer, if one comes, is dropped. Dovecot ends an exchange on its
    /// own when no response comes.
    pub fn forget(&mut self, id: u32) {
        self.open.remove(&id);
    }

    /// Feeds bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        self.inbuf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(n) = self.inbuf[start..].iter().position(|&b| b == b'\n') {
            let line = self.inbuf[start..start + n].to_vec();
            start += n + 1;
            if line.len() > MAX_LINE {
                return Err(ProtocolError::LineTooLong);
            }
            self.line(&line)?;
        }
        self.inbuf.drain(..start);
        if self.inbuf.len() > MAX_LINE {
            return Err(ProtocolError::LineTooLong);
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> Result<(), ProtocolError> {
        let text = String::from_utf8_lossy(line);
        let malformed = || ProtocolError::Malformed(text.chars().take(80).collect());
        let mut fields = text.split('\t');
        let verb = fields.next().unwrap_or("");
        if !self.version_seen && verb != "VERSION" {
            return Err(malformed());
        }
        match verb {
            "VERSION" => {
                let major = fields.next().ok_or_else(malformed)?;
                if major != "1" {
                    return Err(ProtocolError::Version(major.chars().take(20).collect()));
                }
                self.version_seen = true;
            }
            "MECH" if !self.ready => {
                let name = fields.next().filter(|n| is_mechanism_name(n));
                let name = name.ok_or_else(malformed)?.to_ascii_uppercase();
                let mut m = Mechanism {
                    name,
                    plaintext: false,
                    anonymous: false,
                    private: false,
                    dictionary: false,
                    active: false,
                };
                for flag in fields {
                    match flag {
                        "plaintext" => m.plaintext = true,
                        "anonymous" => m.anonymous = true,
                        "private" => m.private = true,
                        "dictionary" => m.dictionary = true,
                        "active" => m.active = true,
                        // forward-secrecy, mutual-auth and later flags do
                        // not make a mechanism weaker.
                        _ => {}
                    }
                }
                self.mechanisms.push(m);
            }
            "DONE" if !self.ready => {
                self.ready = true;
                let held = std::mem::take(&mut self.held);
                self.output.extend_from_slice(&held);
                self.events.push_back(Event::Ready);
            }
            "CONT" | "OK" | "FAIL" => {
                let id: u32 = fields
                    .next()
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(malformed)?;
                if !self.open.contains(&id) {
                    return Ok(());
                }
                let event = match verb {
                    "CONT" => Event::Continue {
                        id,
                        challenge: fields.next().unwrap_or("").to_string(),
                    },
                    "OK" => {
                        self.open.remove(&id);
                        let user = fields.find_map(|f| f.strip_prefix("user="));
                        match user.map(unescape) {
                            Some(user) if !user.is_empty() => Event::Success { id, user },
                            // An OK without a user name cannot be logged
                            // or kept: not a login we can honour.
                            _ => Event::Failure {
                                id,
                                reason: None,
                                temporary: true,
                            },
                        }
                    }
                    _ => {
                        self.open.remove(&id);
                        let mut reason = None;
                        let mut temporary = false;
                        for f in fields {
                            if let Some(r) = f.strip_prefix("reason=") {
                                reason = Some(unescape(r));
                            } else if f == "temp" || f == "code=temp_fail" {
                                temporary = true;
                            }
                        }
                        Event::Failure {
                            id,
                            reason,
                            temporary,
                        }
                    }
                };
                self.events.push_back(event);
            }
            // SPID, CUID, COOKIE and anything newer: nothing for us.
            _ => {}
        }
        Ok(())
    }
}

/// RFC 4422 §3.1: 1 to 20 of upper-case letters, digits, `-` and `_`
/// (clients may write them in lower case).
fn is_mechanism_name(s: &str) -> bool {
    (1..=20).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Dovecot's tab escaping: `\001` then `1`, `t`, `r`, `n` or `0`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\u{1}' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('1') => out.push('\u{1}'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// IPv4 clients on a dual-stack socket are shown as IPv4, as Dovecot logs them.
fn unmap(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HANDSHAKE: &[u8] = b"VERSION\t1\t2\nMECH\tPLAIN\tplaintext\nMECH\tLOGIN\tplaintext\n\
MECH\tCRAM-MD5\tdictionary\tactive\nMECH\tANONYMOUS\tanonymous\nSPID\t4242\nCUID\t1\n\
COOKIE\t0123456789abcdef0123456789abcdef\nDONE\n";

    fn request(mech: &'static str, initial: Option<&'static str>) -> AuthRequest<'static> {
        AuthRequest {
            mechanism: mech,
            initial,
            local_ip: "127.0.0.1".parse().unwrap(),
            remote_ip: "::ffff:192.0.2.7".parse().unwrap(),
            secured: true,
        }
    }

    fn ready() -> Client {
        let mut c = Client::new(77);
        assert_eq!(c.take_output(), b"VERSION\t1\t2\nCPID\t77\n");
        c.feed(HANDSHAKE).unwrap();
        assert_eq!(c.poll_event(), Some(Event::Ready));
        c
    }

    #[test]
    fn handshake_lists_mechanisms_with_flags() {
        let c = ready();
        let names: Vec<&str> = c.mechanisms().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["PLAIN", "LOGIN", "CRAM-MD5", "ANONYMOUS"]);
        assert!(c.mechanisms()[0].plaintext);
        assert!(c.mechanisms()[2].dictionary && c.mechanisms()[2].active);
        assert!(c.mechanisms()[3].anonymous);
        assert!(c.is_ready());
    }

    #[test]
    fn handshake_split_anywhere() {
        for cut in 0..HANDSHAKE.len() {
            let mut c = Client::new(1);
            c.feed(&HANDSHAKE[..cut]).unwrap();
            c.feed(&HANDSHAKE[cut..]).unwrap();
            assert_eq!(c.poll_event(), Some(Event::Ready), "cut at {cut}");
            assert_eq!(c.mechanisms().len(), 4);
        }
    }

    #[test]
    fn plain_with_initial_response_succeeds() {
        let mut c = ready();
        let id = c
            .begin(&request("plain", Some("AGFsaWNlAHNlY3JldA==")))
            .unwrap();
        assert_eq!(
            String::from_utf8(c.take_output()).unwrap(),
            format!("AUTH\t{id}\tPLAIN\tservice=smtp\tnologin\tlip=127.0.0.1\trip=192.0.2.7\tsecured\tresp=AGFsaWNlAHNlY3JldA==\n")
        );
        c.feed(format!("OK\t{id}\tuser=alice\n").as_bytes())
            .unwrap();
        assert_eq!(
            c.poll_event(),
            Some(Event::Success {
                id,
                user: "alice".into()
            })
        );
        assert_eq!(c.open_exchanges().count(), 0);
    }

    #[test]
    fn login_goes_through_challenges() {
        let mut c = ready();
        let id = c.begin(&request("LOGIN", None)).unwrap();
        c.take_output();
        c.feed(format!("CONT\t{id}\tVXNlcm5hbWU6\n").as_bytes())
            .unwrap();
        assert_eq!(
            c.poll_event(),
            Some(Event::Continue {
                id,
                challenge: "VXNlcm5hbWU6".into()
            })
        );
        c.respond(id, "YWxpY2U=").unwrap();
        assert_eq!(
            c.take_output(),
            format!("CONT\t{id}\tYWxpY2U=\n").as_bytes()
        );
        assert_eq!(c.respond(id, "not base64!"), Err(RequestError::BadResponse));
        c.feed(format!("FAIL\t{id}\tuser=alice\n").as_bytes())
            .unwrap();
        assert_eq!(
            c.poll_event(),
            Some(Event::Failure {
                id,
                reason: None,
                temporary: false
            })
        );
    }

    #[test]
    fn failures_temporary_and_with_reason() {
        let mut c = ready();
        let a = c.begin(&request("PLAIN", Some("AA=="))).unwrap();
        let b = c.begin(&request("PLAIN", Some("AA=="))).unwrap();
        assert_ne!(a, b);
        c.feed(
            format!("FAIL\t{a}\ttemp\nFAIL\t{b}\treason=Password\x01texpired\tcode=temp_fail\n")
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            c.poll_event(),
            Some(Event::Failure {
                id: a,
                reason: None,
                temporary: true
            })
        );
        assert_eq!(
            c.poll_event(),
            Some(Event::Failure {
                id: b,
                reason: Some("Password\texpired".into()),
                temporary: true
            })
        );
    }

    #[test]
    fn requests_before_done_are_held() {
        let mut c = Client::new(5);
        c.take_output();
        let id = c.begin(&request("PLAIN", Some(""))).unwrap();
        assert!(!c.has_output(), "nothing may precede the handshake's end");
        c.feed(HANDSHAKE).unwrap();
        let out = String::from_utf8(c.take_output()).unwrap();
        assert!(out.starts_with(&format!("AUTH\t{id}\tPLAIN\t")), "{out}");
        assert!(out.ends_with("\tresp=\n"), "{out}");
    }

    #[test]
    fn forgotten_and_unknown_ids_are_dropped() {
        let mut c = ready();
        let id = c.begin(&request("PLAIN", None)).unwrap();
        c.forget(id);
        c.respond(id, "AA==").unwrap();
        c.take_output();
        c.feed(format!("OK\t{id}\tuser=alice\nOK\t999\tuser=bob\nCONT\t12\t\n").as_bytes())
            .unwrap();
        assert_eq!(c.poll_event(), None);
    }

    #[test]
    fn ok_without_user_is_not_a_login() {
        let mut c = ready();
        let id = c.begin(&request("PLAIN", Some("AA=="))).unwrap();
        c.feed(format!("OK\t{id}\n").as_bytes()).unwrap();
        assert!(matches!(
            c.poll_event(),
            Some(Event::Failure {
                temporary: true,
                ..
            })
        ));
    }

    #[test]
    fn hostile_input() {
        let cases: &[(&[u8], ProtocolError)] = &[
            (b"VERSION\t2\t0\n", ProtocolError::Version("2".into())),
            (
                b"MECH\tPLAIN\n",
                ProtocolError::Malformed("MECH\tPLAIN".into()),
            ),
            (
                b"VERSION\t1\t2\nMECH\tBAD NAME!\n",
                ProtocolError::Malformed("MECH\tBAD NAME!".into()),
            ),
            (
                b"VERSION\t1\t2\nDONE\nOK\tx\tuser=a\n",
                ProtocolError::Malformed("OK\tx\tuser=a".into()),
            ),
        ];
        for (input, want) in cases {
            let mut c = Client::new(1);
            assert_eq!(c.feed(input).as_ref(), Err(want), "{input:?}");
        }
        let mut c = Client::new(1);
        let long = vec![b'A'; MAX_LINE + 1];
        assert_eq!(c.feed(&long), Err(ProtocolError::LineTooLong));
        let mut c = ready();
        assert_eq!(
            c.begin(&request("PL\tAIN", None)),
            Err(RequestError::BadMechanism)
        );
        assert_eq!(
            c.begin(&request("PLAIN", Some("AA==\nOK"))),
            Err(RequestError::BadResponse)
        );
        // NULs and non-UTF-8 bytes in a user name do not break the line.
        let id = c.begin(&request("PLAIN", Some("AA=="))).unwrap();
        c.feed(format!("OK\t{id}\tuser=a\x010b\u{e9}\n").as_bytes())
            .unwrap();
        assert_eq!(
            c.poll_event(),
            Some(Event::Success {
                id,
                user: "a\0b\u{e9}".into()
            })
        );
    }
}
