//! A daemon's link to one service, as its event loop keeps it: made by
//! the first request and made afresh by the first request after a loss,
//! each answer handed back with the caller's own tag for the request it
//! answers (qmgr names its requests with the queue manager's ids, not the
//! link's wire ids).
//!
//! A link that cannot be made, fails on a write, or is closed by the
//! service is dropped at once (deregistered, the tags it owed handed
//! back): what waited on it is the caller's to give up or send again, and
//! the next request connects anew. [`Peer`] neither logs nor retries by itself; it
//! says which of these happened ([`PeerError`], [`Lost`]) so the caller
//! words the log line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use mio::{Registry, Token};

use crate::{IpcError, Link, Protocol};

/// A link to the service at one socket, connected on demand.
#[derive(Debug)]
pub struct Peer<P: Protocol, T> {
    path: PathBuf,
    link: Option<Link<P>>,
    /// Wire id → the caller's tag.
    tags: HashMap<u64, T>,
}

/// Why a request could not be sent; the link is dropped either way.
#[derive(Debug)]
pub enum PeerError {
    /// No link could be made to the service.
    Connect(IpcError),
    /// The link failed while the request was written.
    Send(IpcError),
}

/// How a link was lost while its answers were read.
#[derive(Debug)]
pub enum Lost {
    /// The service closed it after what it answered.
    Closed,
    /// It failed: closed before an answer, refused, or garbled.
    Failed(IpcError),
}

/// What one event on a peer's link brought.
#[derive(Debug)]
pub struct Heard<R, T> {
    /// Each answer, with the tag its request was sent with (`None` for a
    /// request sent untagged, or an answer nobody waits for).
    pub answers: Vec<(Option<T>, R)>,
    /// Set when the link is lost; it is dropped already.
    pub lost: Option<Lost>,
    /// The tags of the requests a lost link left unanswered.
    pub owed: Vec<T>,
}

/// A request that did not go out: why, and the tags of the requests sent
/// earlier on the link it dropped, never to be answered.
#[derive(Debug)]
pub struct Unsent<T> {
    /// Why it was not sent.
    pub error: PeerError,
    /// What the dropped link owed.
    pub owed: Vec<T>,
}

impl<P: Protocol, T> Peer<P, T> {
    /// A peer for the service listening at `path`, not yet connected.
    pub fn new(path: PathBuf) -> Self {
        Peer {
            path,
            link: None,
            tags: HashMap::new(),
        }
    }

    /// The service's socket.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `token` is the link's.
    pub fn owns(&self, token: Token) -> bool {
        self.link.as_ref().is_some_and(|l| l.token() == token)
    }

    /// Whether a link is up (or being made).
    pub fn is_connected(&self) -> bool {
        self.link.is_some()
    }

    /// Whether a link is up and the service has accepted its hello.
    pub fn is_greeted(&self) -> bool {
        self.link.as_ref().is_some_and(Link::is_greeted)
    }

    /// The tags of the requests sent and not answered yet.
    pub fn waiting(&self) -> impl Iterator<Item = &T> {
        self.tags.values()
    }

    /// Makes a link if there is none, without a request: its hello goes
    /// out, and [`Peer::is_greeted`] says when the service took it.
    pub fn connect(
        &mut self,
        registry: &Rc<Registry>,
        token: impl FnOnce() -> Token,
    ) -> Result<(), PeerError> {
        if self.link.is_none() {
            let link = Link::connect(&self.path, registry, token()).map_err(PeerError::Connect)?;
            self.link = Some(link);
        }
        Ok(())
    }

    /// Sends one request whose last byte string `body` is written from
    /// its own buffer ([`Link::send_later_spliced`]), connecting first if
    /// there is none; its answer comes back with `tag`.
    pub fn send_spliced(
        &mut self,
        registry: &Rc<Registry>,
        token: impl FnOnce() -> Token,
        req: &P::Request,
        body: Vec<u8>,
        after: usize,
        tag: T,
    ) -> Result<(), Unsent<T>> {
        let link = self.linked(registry, token)?;
        let sent = link
            .send_later_spliced(req, body, after)
            .map_err(|(e, _)| e)
            .and_then(|wire| link.flush().map(|()| Some(wire)));
        self.settle(registry, sent, tag)
    }

    /// Sends `reqs` in order on one link, in one write, connecting first
    /// if there is none (registered under the token `token` gives); only
    /// the answer to the last is handed back with `tag` (a notice's Begin
    /// and Data are answered too, but only its End settles it). On an
    /// error the link is dropped, so no later request of a sequence goes
    /// out on a new link after its first ones were lost with the old.
    pub fn send(
        &mut self,
        registry: &Rc<Registry>,
        token: impl FnOnce() -> Token,
        reqs: &[P::Request],
        tag: T,
    ) -> Result<(), Unsent<T>> {
        let link = self.linked(registry, token)?;
        let sent = reqs
            .iter()
            .try_fold(None, |_, r| link.send_later(r).map(Some))
            .and_then(|last| link.flush().map(|()| last));
        self.settle(registry, sent, tag)
    }

    /// Queues one request on the link without writing it, connecting
    /// first if there is none; [`Peer::flush`] writes everything queued
    /// in one write, so a loop turn's requests wake the service once. Its
    /// answer comes back with `tag`.
    pub fn send_later(
        &mut self,
        registry: &Rc<Registry>,
        token: impl FnOnce() -> Token,
        req: &P::Request,
        tag: T,
    ) -> Result<(), Unsent<T>> {
        let link = self.linked(registry, token)?;
        let sent = link.send_later(req).map(Some);
        self.settle(registry, sent, tag)
    }

    /// Writes what [`Peer::send_later`] queued, as much as the socket
    /// takes (the rest when it has room). On an error the link is dropped
    /// and what it owed is handed back.
    pub fn flush(&mut self, registry: &Registry) -> Result<(), Unsent<T>> {
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        link.flush().map_err(|e| Unsent {
            error: PeerError::Send(e),
            owed: self.close(registry),
        })
    }

    /// The link, made first if there is none.
    fn linked(
        &mut self,
        registry: &Rc<Registry>,
        token: impl FnOnce() -> Token,
    ) -> Result<&mut Link<P>, Unsent<T>> {
        self.connect(registry, token).map_err(|error| Unsent {
            error,
            owed: Vec::new(),
        })?;
        Ok(self.link.as_mut().expect("connected above"))
    }

    /// Files `tag` under the wire id of what was sent last, or drops the
    /// link when sending failed, handing back what it owed.
    fn settle(
        &mut self,
        registry: &Registry,
        sent: Result<Option<u64>, IpcError>,
        tag: T,
    ) -> Result<(), Unsent<T>> {
        match sent {
            Ok(last) => {
                if let Some(wire) = last {
                    self.tags.insert(wire, tag);
                }
                Ok(())
            }
            Err(e) => Err(Unsent {
                error: PeerError::Send(e),
                owed: self.close(registry),
            }),
        }
    }

    /// Reads what one event on the link announced (`readable`, and its
    /// read-closed flag `closed`: see [`Link::event`]) and writes what
    /// waits.
    pub fn event(
        &mut self,
        registry: &Registry,
        readable: bool,
        closed: bool,
    ) -> Heard<P::Response, T> {
        let mut heard = Heard {
            answers: Vec::new(),
            lost: None,
            owed: Vec::new(),
        };
        let Some(link) = self.link.as_mut() else {
            return heard;
        };
        match link.event(readable, closed) {
            Ok(answers) => {
                for (wire, resp) in answers {
                    heard.answers.push((self.tags.remove(&wire), resp));
                }
                if link.is_closed() {
                    heard.lost = Some(Lost::Closed);
                }
            }
            Err(e) => heard.lost = Some(Lost::Failed(e)),
        }
        if heard.lost.is_some() {
            heard.owed = self.close(registry);
        }
        heard
    }

    /// Drops the link, if any; the tags of what it owed are handed back.
    pub fn close(&mut self, registry: &Registry) -> Vec<T> {
        if let Some(mut l) = self.link.take() {
            l.deregister(registry);
        }
        let mut owed: Vec<(u64, T)> = self.tags.drain().collect();
        // In the order the requests were sent.
        owed.sort_by_key(|(wire, _)| *wire);
        owed.into_iter().map(|(_, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::time::{Duration, Instant};

    use mio::{Events, Poll};

    use super::*;
    use crate::anvil::{Anvil, Request, Response};
    use crate::{decode, encode, FrameBuf, Hello, HelloReply, Tagged};

    fn frame<T: serde::de::DeserializeOwned>(s: &mut UnixStream, fb: &mut FrameBuf) -> Option<T> {
        loop {
            if let Some(p) = fb.next_payload().unwrap() {
                return Some(decode(p).unwrap());
            }
            if fb.read_from(s).unwrap().bytes == 0 {
                return None;
            }
        }
    }

    /// An anvil that answers each request with its count of requests so
    /// far on the connection, and closes after `serve` of them.
    fn anvil(l: UnixListener, conns: usize, serve: u32) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for _ in 0..conns {
                let (mut s, _) = l.accept().unwrap();
                let mut fb = FrameBuf::new();
                let hello: Hello = frame(&mut s, &mut fb).unwrap();
                assert_eq!(hello, Hello::of::<Anvil>());
                s.write_all(&encode(&HelloReply::Accepted)).unwrap();
                for n in 1..=serve {
                    let Some(t) = frame::<Tagged<Request>>(&mut s, &mut fb) else {
                        break;
                    };
                    let body = Response::Counts { count: n, rate: 0 };
                    s.write_all(&encode(&Tagged { id: t.id, body })).unwrap();
                }
                // Closes once the client has seen the answers.
                let _ = s.shutdown(std::net::Shutdown::Write);
                let _ = s.read(&mut [0; 64]);
            }
        })
    }

    fn lookup() -> Request {
        Request::Lookup {
            service: "smtp".into(),
            client: "192.0.2.1".into(),
        }
    }

    /// Polls until `want` answers have come, or the link is lost.
    fn hear(
        poll: &mut Poll,
        peer: &mut Peer<Anvil, &'static str>,
        want: usize,
    ) -> Heard<Response, &'static str> {
        let mut all = Heard {
            answers: Vec::new(),
            lost: None,
            owed: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut events = Events::with_capacity(8);
        while all.answers.len() < want && all.lost.is_none() {
            assert!(Instant::now() < deadline, "no answer from the test anvil");
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            for e in events.iter() {
                assert!(peer.owns(e.token()));
                let h = peer.event(poll.registry(), e.is_readable(), e.is_read_closed());
                all.answers.extend(h.answers);
                all.lost = all.lost.or(h.lost);
                all.owed.extend(h.owed);
            }
        }
        all
    }

    #[test]
    fn answers_come_back_with_the_callers_tags_and_a_lost_link_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anvil");
        let server = anvil(UnixListener::bind(&path).unwrap(), 2, 3);
        let mut poll = Poll::new().unwrap();
        let mut peer: Peer<Anvil, &str> = Peer::new(path);
        assert!(!peer.is_connected());
        let reg = Rc::new(poll.registry().try_clone().unwrap());
        peer.send(&reg, || Token(7), &[lookup(), lookup()], "pair")
            .unwrap();
        peer.send(&reg, || Token(8), &[lookup()], "one").unwrap();
        assert!(peer.owns(Token(7)) && !peer.owns(Token(8)));
        let h = hear(&mut poll, &mut peer, 3);
        let got: Vec<_> = h.answers.iter().map(|(t, r)| (*t, *r)).collect();
        // The first of the pair is answered untagged: only the last
        // request of a sequence carries the tag.
        assert_eq!(
            got,
            [
                (None, Response::Counts { count: 1, rate: 0 }),
                (Some("pair"), Response::Counts { count: 2, rate: 0 }),
                (Some("one"), Response::Counts { count: 3, rate: 0 }),
            ]
        );
        // The server closes after three: the link is lost and dropped
        // (a close read with the last answers, or alone, after them).
        let h = if h.lost.is_some() {
            h
        } else {
            hear(&mut poll, &mut peer, 1)
        };
        assert!(
            matches!(h.lost, Some(Lost::Closed | Lost::Failed(IpcError::Closed))),
            "{:?}",
            h.lost
        );
        assert!(!peer.is_connected() && !peer.owns(Token(7)));
        // The next request connects anew.
        peer.send(&reg, || Token(9), &[lookup()], "again").unwrap();
        assert!(peer.owns(Token(9)));
        let h = hear(&mut poll, &mut peer, 1);
        assert_eq!(h.answers[0].0, Some("again"));
        assert_eq!(h.answers[0].1, Response::Counts { count: 1, rate: 0 });
        peer.close(&reg);
        server.join().unwrap();
    }

    /// Requests queued with `send_later` stay with the client until
    /// `flush`, which writes them together; each answer comes back with
    /// its own tag.
    #[test]
    fn queued_requests_go_out_at_the_flush_each_answered_with_its_tag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anvil");
        let listener = UnixListener::bind(&path).unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        let (go, flushed) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut fb = FrameBuf::new();
            let _: Hello = frame(&mut s, &mut fb).unwrap();
            s.write_all(&encode(&HelloReply::Accepted)).unwrap();
            // Nothing may come before the client flushes.
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let early = s.read(&mut [0u8; 64]);
            told.send(early.map_or(0, |n| n)).unwrap();
            flushed.recv().unwrap();
            s.set_read_timeout(None).unwrap();
            for n in 1..=3 {
                let t: Tagged<Request> = frame(&mut s, &mut fb).unwrap();
                let body = Response::Counts { count: n, rate: 0 };
                s.write_all(&encode(&Tagged { id: t.id, body })).unwrap();
            }
        });
        let mut poll = Poll::new().unwrap();
        let mut peer: Peer<Anvil, &str> = Peer::new(path);
        let reg = Rc::new(poll.registry().try_clone().unwrap());
        // Greeted first: until the hello is answered nothing else goes out.
        peer.connect(&reg, || Token(5)).unwrap();
        let mut events = Events::with_capacity(8);
        while !peer.is_greeted() {
            poll.poll(&mut events, Some(Duration::from_secs(5)))
                .unwrap();
            for e in events.iter() {
                let h = peer.event(poll.registry(), e.is_readable(), e.is_read_closed());
                assert!(h.lost.is_none());
            }
        }
        for tag in ["a", "b", "c"] {
            peer.send_later(&reg, || Token(6), &lookup(), tag).unwrap();
        }
        assert_eq!(peer.waiting().count(), 3);
        assert_eq!(heard.recv().unwrap(), 0, "bytes went out before the flush");
        peer.flush(&reg).unwrap();
        go.send(()).unwrap();
        let h = hear(&mut poll, &mut peer, 3);
        let got: Vec<_> = h.answers.iter().map(|(t, r)| (*t, *r)).collect();
        assert_eq!(
            got,
            [
                (Some("a"), Response::Counts { count: 1, rate: 0 }),
                (Some("b"), Response::Counts { count: 2, rate: 0 }),
                (Some("c"), Response::Counts { count: 3, rate: 0 }),
            ]
        );
        peer.close(&reg);
        server.join().unwrap();
    }

    #[test]
    fn a_link_lost_hands_back_the_tags_it_left_unanswered_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("anvil");
        let server = anvil(UnixListener::bind(&path).unwrap(), 1, 1);
        let mut poll = Poll::new().unwrap();
        let mut peer: Peer<Anvil, &str> = Peer::new(path);
        let reg = Rc::new(poll.registry().try_clone().unwrap());
        peer.connect(&reg, || Token(3)).unwrap();
        for tag in ["a", "b", "c"] {
            peer.send(&reg, || Token(4), &[lookup()], tag).unwrap();
        }
        assert_eq!(peer.waiting().count(), 3);
        let mut h = hear(&mut poll, &mut peer, 1);
        if h.lost.is_none() {
            let more = hear(&mut poll, &mut peer, usize::MAX);
            h.lost = more.lost;
            h.owed = more.owed;
        }
        assert_eq!(h.answers[0].0, Some("a"));
        assert!(h.lost.is_some());
        assert_eq!(h.owed, ["b", "c"]);
        assert!(!peer.is_connected() && peer.waiting().next().is_none());
        server.join().unwrap();
    }

    #[test]
    fn a_service_not_listening_is_a_connect_error_and_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let poll = Poll::new().unwrap();
        let mut peer: Peer<Anvil, u64> = Peer::new(dir.path().join("absent"));
        let reg = Rc::new(poll.registry().try_clone().unwrap());
        let r = peer.send(&reg, || Token(1), &[lookup()], 1);
        assert!(
            matches!(&r, Err(Unsent { error: PeerError::Connect(_), owed }) if owed.is_empty()),
            "{r:?}"
        );
        assert!(!peer.is_connected());
        let h = peer.event(poll.registry(), true, false);
        assert!(h.answers.is_empty() && h.lost.is_none());
    }
}
