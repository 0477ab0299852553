//! `sluice queue move`: pushes queued mail to other instances' transferd.
//!
//! From the running queue, qmgr takes the selected messages out of
//! delivery at once (`MoveBegin`), gives each one's state when no delivery
//! of it is under way (`MoveTake`), and removes it once a receiver has
//! accepted it (`MoveDone`). With `--from-spool DIR` a stopped instance's
//! spool is recovered as its qmgr would at start (partial files dropped,
//! committed ones adopted), read offline, and each accepted message gets a
//! `Removed` record in that spool's journal, so that the instance, started
//! again, does not deliver it too.
//!
//! Offers go round-robin over the targets and their addresses, many in
//! flight per connection, paced by `--rate`. A temporary refusal or a lost
//! connection is retried a few times; what is refused for good, or never
//! moves, stays queued here (held) and makes the exit status 1.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc::queuectl::{Movable, Request, Response, Selector};
use transfer::pace::Pace;
use transfer::proto::{encode, transfer_id, Decoder, Offer, ToMover, ToReceiver, VERSION};
use transfer::targets::{interleave, split, Rotation, Target};

/// Offers in flight per connection.
const WINDOW: usize = 128;
/// Bytes of offers gathered before they are written.
const OUT_BATCH: usize = 64 * 1024;
/// Tries per message before it counts as not moved.
const TRIES: u32 = 5;
/// How long a receiver may take to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to wait for a message still in delivery to come free.
const BUSY_WAIT: Duration = Duration::from_secs(120);

/// What `sluice queue move` was asked.
pub struct MoveArgs {
    /// `--to HOST:PORT`, one or more.
    pub to: Vec<String>,
    /// The selection.
    pub sel: Selector,
    /// `--rate N/SECONDS`.
    pub rate: Option<String>,
    /// `--progress`.
    pub progress: bool,
    /// `--from-spool DIR`.
    pub from_spool: Option<PathBuf>,
    /// `--from-name NAME` (offline: the stopped instance's myhostname).
    pub from_name: Option<String>,
}

/// Where the messages come from.
trait Source {
    /// The ids selected (and, live, taken out of delivery).
    fn begin(&mut self, sel: &Selector) -> Result<Vec<String>, String>;
    /// Messages as offers (their transfer ids still unset), in the order
    /// asked; `None` for one still in delivery.
    fn take(&mut self, ids: &[String]) -> Result<Vec<Result<Option<Offer>, String>>, String>;
    /// Receivers have these: (id here, receiver, id there).
    fn done(&mut self, moved: Vec<(String, String, String)>) -> Result<(), String>;
}

/// The running queue, through qmgr.
struct Live {
    qmgr: crate::top::Qmgr,
    root: PathBuf,
}

impl Source for Live {
    fn begin(&mut self, sel: &Selector) -> Result<Vec<String>, String> {
        // A page per request: qmgr journals one page a loop turn and its
        // answers stay small, however large the queue.
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let req = Request::MoveBegin {
                sel: sel.clone(),
                after: after.take(),
                max: 10_000,
            };
            match self.qmgr.call(&req)? {
                Response::Moving { ids, next } => {
                    all.extend(ids);
                    match next {
                        Some(n) => after = Some(n),
                        None => return Ok(all),
                    }
                }
                other => return Err(format!("unexpected answer {other:?}")),
            }
        }
    }

    fn take(&mut self, ids: &[String]) -> Result<Vec<Result<Option<Offer>, String>>, String> {
        let answers = match self.qmgr.call(&Request::MoveTake { ids: ids.to_vec() })? {
            Response::Movable(v) if v.len() == ids.len() => v,
            other => return Err(format!("unexpected answer {other:?}")),
        };
        Ok(answers
            .into_iter()
            .map(|a| match a {
                Ok(Some(m)) => {
                    let data = read_content(&m.data, &self.root)?;
                    Ok(Some(offer_of(*m, data)))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            })
            .collect())
    }

    fn done(&mut self, moved: Vec<(String, String, String)>) -> Result<(), String> {
        match self.qmgr.call(&Request::MoveDone { moved })? {
            Response::Done(_) => Ok(()),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }
}

fn read_content(data: &ipc::delivery::Data, root: &Path) -> Result<Vec<u8>, String> {
    let c = agent::Content::open(data, root).map_err(|e| e.to_string())?;
    let mut out = vec![0u8; c.len() as usize];
    let mut at = 0;
    while at < out.len() {
        let n = c
            .read_at(&mut out[at..], at as u64)
            .map_err(|e| format!("reading the message data: {e}"))?;
        if n == 0 {
            return Err("the message data ends early".into());
        }
        at += n;
    }
    Ok(out)
}

fn offer_of(m: Movable, data: Vec<u8>) -> Offer {
    Offer {
        transfer: String::new(),
        envelope: m.head.envelope,
        remaining: m.remaining,
        next_attempt: m.next_attempt,
        attempts: m.attempts,
        held: m.held,
        warned: m.warned,
        owed: m.owed,
        data,
    }
}

/// A stopped instance's spool, read offline.
struct Offline {
    rec: queue::Recovered,
}

impl Offline {
    fn open(dir: &Path) -> Result<Offline, String> {
        if !dir.join("journal").is_dir() {
            return Err(format!(
                "{}: no journal/ here: not a Sluice spool",
                dir.display()
            ));
        }
        // A running instance's qmgr answers on its socket: never recover
        // a live spool from here.
        let sock = dir.join("private/qmgr");
        if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
            return Err(format!(
                "{}: its instance is running (qmgr answers at {}): stop it, or move from it without --from-spool",
                dir.display(),
                sock.display()
            ));
        }
        let rec = queue::recover(dir, queue::SpoolConfig::default())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let r = &rec.report;
        eprintln!(
            "sluice: {}: {} message(s) in the journal; {} partial file(s) dropped, {} committed file(s) adopted",
            dir.display(),
            rec.state.messages.len(),
            r.partial.len(),
            r.adopted.len()
        );
        Ok(Offline { rec })
    }

    fn head(&self, id: mail::QueueId) -> Result<(queue::Record, queue::MessageHead), String> {
        let m = self
            .rec
            .state
            .messages
            .get(&id)
            .ok_or_else(|| format!("{id}: not in the spool"))?;
        let rec = self
            .rec
            .journal
            .read_at(m.head)
            .map_err(|e| e.to_string())?;
        match &rec {
            queue::Record::Arrived(h) | queue::Record::Rewritten { head: h, .. } => {
                let h = h.clone();
                Ok((rec, h))
            }
            _ => Err(format!("{id}: its head record is not a message")),
        }
    }
}

impl Source for Offline {
    fn begin(&mut self, sel: &Selector) -> Result<Vec<String>, String> {
        self.select(sel)
    }

    fn take(&mut self, ids: &[String]) -> Result<Vec<Result<Option<Offer>, String>>, String> {
        Ok(ids.iter().map(|id| self.take_one(id)).collect())
    }

    fn done(&mut self, moved: Vec<(String, String, String)>) -> Result<(), String> {
        // One journal commit for the batch.
        let mut gone = Vec::new();
        for (id, to, new_id) in &moved {
            let qid: mail::QueueId = id.parse().map_err(|e| format!("{id}: {e}"))?;
            self.rec
                .journal
                .append(&queue::Record::Removed { id: qid })
                .map_err(|e| format!("{id}: journaling its removal: {e}"))?;
            gone.push((qid, to, new_id));
        }
        self.rec
            .journal
            .commit()
            .map_err(|e| format!("journaling the removals: {e}"))?;
        for (qid, to, new_id) in gone {
            if let Some(m) = self.rec.state.messages.remove(&qid) {
                let _ = self.rec.spool.remove_data(qid, m.storage);
            }
            eprintln!("sluice: {qid}: moved to {to} as {new_id}");
        }
        Ok(())
    }
}

impl Offline {
    fn select(&mut self, sel: &Selector) -> Result<Vec<String>, String> {
        let mut ids: Vec<mail::QueueId> = self.rec.state.messages.keys().copied().collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids {
            let m = &self.rec.state.messages[&id];
            if !sel.ids.is_empty() && !sel.ids.iter().any(|s| s == &id.to_string()) {
                continue;
            }
            if (sel.held && !m.held) || (sel.deferred && (m.held || m.next_attempt == 0)) {
                continue;
            }
            let (rec, h) = self.head(id)?;
            let e = &h.envelope;
            let pending = self.rec.state.pending(id, &rec);
            let ok = sel
                .sender
                .as_ref()
                .is_none_or(|s| e.sender.eq_ignore_ascii_case(s))
                && sel
                    .tenant
                    .as_ref()
                    .is_none_or(|t| e.tenant.as_ref() == Some(t))
                && sel.job.as_ref().is_none_or(|j| e.job.as_ref() == Some(j))
                && sel.domain.as_ref().is_none_or(|d| {
                    let d = d.trim_start_matches('@');
                    pending.iter().any(|i| {
                        e.recipients.get(*i as usize).is_some_and(|r| {
                            r.address
                                .rsplit_once('@')
                                .is_some_and(|(_, x)| x.eq_ignore_ascii_case(d))
                        })
                    })
                });
            if ok {
                out.push(id.to_string());
            }
        }
        Ok(out)
    }

    fn take_one(&mut self, id: &str) -> Result<Option<Offer>, String> {
        let qid: mail::QueueId = id.parse().map_err(|e| format!("{id}: {e}"))?;
        let (rec, h) = self.head(qid)?;
        let st = &self.rec.state;
        let m = &st.messages[&qid];
        let data = match &h.data {
            queue::DataRef::Inline(b) => b.clone(),
            other => {
                let mut d = self
                    .rec
                    .spool
                    .open_data(qid, other)
                    .map_err(|e| format!("{id}: {e}"))?;
                let mut out = Vec::new();
                d.read_to_end(&mut out).map_err(|e| format!("{id}: {e}"))?;
                out
            }
        };
        let owed = st
            .unnotified
            .get(&qid)
            .map(|v| {
                v.iter()
                    .map(|b| ipc::queuectl::Owed {
                        index: b.index,
                        status: b.status,
                        reason: b.reason.clone(),
                        success: b.success,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let held = st.moving.get(&qid).copied().unwrap_or(m.held);
        Ok(Some(Offer {
            transfer: String::new(),
            remaining: st.pending(qid, &rec),
            envelope: h.envelope,
            next_attempt: m.next_attempt,
            attempts: 0,
            held,
            warned: m.warned,
            owed,
            data,
        }))
    }
}

/// One receiver connection.
struct Conn {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    dec: Decoder,
    /// Transfer id → local queue id.
    inflight: HashMap<String, String>,
    name: String,
    /// Offers not written yet: written together (one TLS record and one
    /// write for many), always before waiting for an answer.
    out: Vec<u8>,
}

impl Conn {
    fn open(t: &Target, cfg: &Arc<rustls::ClientConfig>, me: &str) -> Result<Conn, String> {
        let sock = TcpStream::connect_timeout(&t.addr, Duration::from_secs(10))
            .map_err(|e| format!("{} ({}): {e}", t.given, t.addr))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_read_timeout(Some(READ_TIMEOUT));
        let name = rustls::pki_types::ServerName::try_from(t.host.clone())
            .map_err(|e| format!("{}: {e}", t.given))?;
        let conn = rustls::ClientConnection::new(cfg.clone(), name)
            .map_err(|e| format!("{}: {e}", t.given))?;
        let mut c = Conn {
            tls: rustls::StreamOwned::new(conn, sock),
            dec: Decoder::new(1 << 20),
            inflight: HashMap::new(),
            name: String::new(),
            out: Vec::new(),
        };
        c.send(&ToReceiver::Hello {
            version: VERSION,
            name: me.to_string(),
        })?;
        match c.recv().map_err(|e| format!("{}: {e}", t.given))? {
            ToMover::Hello { version, name } if version == VERSION => c.name = name,
            ToMover::Hello { version, .. } => {
                return Err(format!("{}: speaks transfer protocol {version}", t.given))
            }
            ToMover::Goodbye { reason } => return Err(format!("{}: refused: {reason}", t.given)),
            other => return Err(format!("{}: unexpected {other:?}", t.given)),
        }
        Ok(c)
    }

    fn send(&mut self, m: &ToReceiver) -> Result<(), String> {
        self.out.extend_from_slice(&encode(m));
        self.flush_out()
    }

    /// Queues an encoded offer; written once enough wait.
    fn push(&mut self, frame: &[u8]) -> Result<(), String> {
        self.out.extend_from_slice(frame);
        if self.out.len() >= OUT_BATCH {
            self.flush_out()?;
        }
        Ok(())
    }

    fn flush_out(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self
            .tls
            .write_all(&self.out)
            .and_then(|_| self.tls.flush())
            .map_err(|e| e.to_string());
        self.out.clear();
        r
    }

    fn recv(&mut self) -> Result<ToMover, String> {
        loop {
            if let Some(m) = self.recv_until(None)? {
                return Ok(m);
            }
        }
    }

    /// The next answer, waiting until `deadline` at most (`None`: as long
    /// as the socket's read timeout); `Ok(None)` when none came in time.
    fn recv_until(&mut self, deadline: Option<Instant>) -> Result<Option<ToMover>, String> {
        self.flush_out()?;
        loop {
            if let Some(m) = self.dec.decode::<ToMover>().map_err(|e| e.to_string())? {
                return Ok(Some(m));
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Ok(None),
                },
                None => READ_TIMEOUT,
            };
            let _ = self.tls.sock.set_read_timeout(Some(wait));
            let mut buf = [0u8; 16 * 1024];
            match self.tls.read(&mut buf) {
                Ok(0) => return Err("the receiver closed the connection".into()),
                Ok(n) => self.dec.push(&buf[..n]),
                Err(e)
                    if deadline.is_some()
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// Counts for the summary and the progress line.
#[derive(Default)]
struct Tally {
    total: usize,
    moved: usize,
    again: usize,
    failed: usize,
}

struct Mover<'a> {
    src: &'a mut dyn Source,
    me: String,
    cfg: Arc<rustls::ClientConfig>,
    rot: Rotation,
    conns: Vec<Option<Conn>>,
    dead: Vec<bool>,
    tries: HashMap<String, u32>,
    todo: VecDeque<String>,
    tally: Tally,
    progress: bool,
    started: Instant,
    last_progress: Instant,
    /// Offers taken from the source, waiting for their turn.
    ready: VecDeque<(String, Offer)>,
    /// Acceptances not yet told to the source: (id, receiver, id
    /// there, taken before).
    accepted: Vec<(String, String, String, bool)>,
}

/// Messages taken from the source, and told done, per round trip.
const BATCH: usize = 64;

impl Mover<'_> {
    /// Tells the source what receivers accepted since the last time.
    fn flush_done(&mut self) {
        if self.accepted.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.accepted);
        let n = batch.len();
        let again = batch.iter().filter(|b| b.3).count();
        let moved = batch.into_iter().map(|(a, b, c, _)| (a, b, c)).collect();
        match self.src.done(moved) {
            Ok(()) => {
                self.tally.moved += n;
                self.tally.again += again;
            }
            Err(e) => {
                eprintln!("sluice: {n} message(s) accepted by their receivers, but: {e}");
                self.tally.failed += n;
            }
        }
    }

    /// The next offer: from those taken already, else a new batch from
    /// the source (ids still in delivery go to `busy`).
    fn next_offer(&mut self, busy: &mut Vec<String>) -> Option<(String, Offer)> {
        while self.ready.is_empty() && !self.todo.is_empty() {
            let n = self.todo.len().min(BATCH);
            let ids: Vec<String> = self.todo.drain(..n).collect();
            match self.src.take(&ids) {
                Ok(answers) => {
                    for (id, a) in ids.into_iter().zip(answers) {
                        match a {
                            Ok(Some(o)) => self.ready.push_back((id, o)),
                            Ok(None) => busy.push(id),
                            Err(e) => {
                                eprintln!("sluice: {id}: not moved: {e}");
                                self.tally.failed += 1;
                            }
                        }
                    }
                }
                Err(e) => {
                    for id in ids {
                        eprintln!("sluice: {id}: not moved: {e}");
                        self.tally.failed += 1;
                    }
                }
            }
        }
        self.ready.pop_front()
    }

    fn conn(&mut self, i: usize) -> Result<&mut Conn, String> {
        if self.conns[i].is_none() {
            let t = self.rot.targets()[i].clone();
            match Conn::open(&t, &self.cfg, &self.me) {
                Ok(c) => self.conns[i] = Some(c),
                Err(e) => {
                    self.dead[i] = true;
                    return Err(e);
                }
            }
        }
        Ok(self.conns[i].as_mut().expect("just opened"))
    }

    /// Reads one answer from connection `i` and acts on it.
    fn answer(&mut self, i: usize) {
        let got = match self.conns[i].as_mut() {
            Some(c) => c.recv(),
            None => return,
        };
        self.handle(i, got);
    }

    /// Takes the answers that come until `until` (the pace's next send),
    /// so that acceptances are acted on while the mover waits.
    fn absorb(&mut self, until: Instant) {
        // What waits to be written goes now: the pace says it is due.
        for i in 0..self.conns.len() {
            let r = self.conns[i].as_mut().map(Conn::flush_out);
            if let Some(Err(e)) = r {
                let to = self.rot.targets()[i].given.clone();
                self.lost(i, &format!("{to}: {e}"));
            }
        }
        loop {
            let Some(i) = (0..self.conns.len()).find(|&i| {
                self.conns[i]
                    .as_ref()
                    .is_some_and(|c| !c.inflight.is_empty())
            }) else {
                if let Some(w) = until.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                return;
            };
            let got = match self.conns[i].as_mut() {
                Some(c) => c.recv_until(Some(until)),
                None => return,
            };
            match got {
                Ok(Some(m)) => self.handle(i, Ok(m)),
                Ok(None) => return,
                Err(e) => self.handle(i, Err(e)),
            }
        }
    }

    /// Acts on one answer (or a failed read) from connection `i`.
    fn handle(&mut self, i: usize, got: Result<ToMover, String>) {
        let to = self.rot.targets()[i].given.clone();
        match got {
            Ok(ToMover::Accepted {
                transfer,
                id: new_id,
                again,
            }) => {
                let Some(local) = self.conns[i]
                    .as_mut()
                    .and_then(|c| c.inflight.remove(&transfer))
                else {
                    return;
                };
                let peer = self.conns[i].as_ref().map(|c| c.name.clone()).unwrap_or(to);
                self.accepted.push((local, peer, new_id, again));
                if self.accepted.len() >= BATCH {
                    self.flush_done();
                }
            }
            Ok(ToMover::Refused { transfer, status }) => {
                let Some(local) = self.conns[i]
                    .as_mut()
                    .and_then(|c| c.inflight.remove(&transfer))
                else {
                    return;
                };
                self.retry_or_fail(local, &format!("{to}: {status}"), status.is_transient());
            }
            Ok(other) => self.lost(i, &format!("{to}: unexpected {other:?}")),
            Err(e) => self.lost(i, &format!("{to}: {e}")),
        }
    }

    fn retry_or_fail(&mut self, local: String, why: &str, temporary: bool) {
        let n = self.tries.entry(local.clone()).or_default();
        *n += 1;
        if temporary && *n < TRIES {
            self.todo.push_back(local);
        } else {
            eprintln!("sluice: {local}: not moved: {why}");
            self.tally.failed += 1;
        }
    }

    /// A connection failed: what it had in flight is offered again
    /// (elsewhere if need be); the receiver may have some of it, which
    /// the transfer ids make harmless.
    fn lost(&mut self, i: usize, why: &str) {
        eprintln!("sluice: {why}");
        self.dead[i] = true;
        if let Some(c) = self.conns[i].take() {
            for (_, local) in c.inflight {
                self.retry_or_fail(local, why, true);
            }
        }
    }

    fn show_progress(&mut self, last: bool) {
        if !self.progress || (!last && self.last_progress.elapsed() < Duration::from_millis(200)) {
            return;
        }
        self.last_progress = Instant::now();
        let t = &self.tally;
        let done = t.moved + t.failed;
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let width = 30;
        let filled = (done * width).checked_div(t.total).unwrap_or(width);
        eprint!(
            "\r[{}{}] {}/{} moved, {:.0}/s, {} left{}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            t.moved,
            t.total,
            t.moved as f64 / secs,
            t.total.saturating_sub(done),
            if last { "\n" } else { "" }
        );
        let _ = std::io::stderr().flush();
    }

    fn run(&mut self, pace: Option<Pace>) {
        let mut sent: u64 = 0;
        let mut busy: Vec<String> = Vec::new();
        let mut busy_since: HashMap<String, Instant> = HashMap::new();
        loop {
            while let Some((local, mut offer)) = self.next_offer(&mut busy) {
                for id in &busy {
                    busy_since.entry(id.clone()).or_insert_with(Instant::now);
                }
                if let Some(p) = pace {
                    let w = p.wait(sent, self.started.elapsed());
                    if !w.is_zero() {
                        self.flush_done();
                        self.absorb(Instant::now() + w);
                    }
                }
                offer.transfer = transfer_id(&self.me, &local);
                let transfer = offer.transfer.clone();
                let frame = encode(&ToReceiver::Offer(Box::new(offer)));
                loop {
                    let dead = self.dead.clone();
                    let Some(i) = self.rot.pick(|i| !dead[i]) else {
                        eprintln!("sluice: {local}: not moved: no receiver is reachable");
                        self.tally.failed += 1;
                        break;
                    };
                    let full = self.conns[i]
                        .as_ref()
                        .is_some_and(|c| c.inflight.len() >= WINDOW);
                    if full {
                        self.answer(i);
                        if self.dead[i] {
                            continue;
                        }
                    }
                    let r = self.conn(i).and_then(|c| {
                        c.push(&frame)?;
                        c.inflight.insert(transfer.clone(), local.clone());
                        Ok(())
                    });
                    match r {
                        Ok(()) => {
                            sent += 1;
                            break;
                        }
                        Err(e) => self.lost(i, &e),
                    }
                }
                self.show_progress(false);
            }
            // Drain what is in flight.
            for i in 0..self.conns.len() {
                while self.conns[i]
                    .as_ref()
                    .is_some_and(|c| !c.inflight.is_empty())
                {
                    self.answer(i);
                    self.show_progress(false);
                }
            }
            self.flush_done();
            for id in &busy {
                busy_since.entry(id.clone()).or_insert_with(Instant::now);
            }
            if !self.todo.is_empty() || !self.ready.is_empty() {
                continue;
            }
            if busy.is_empty() {
                break;
            }
            // Messages in delivery a moment ago: ask again, for a while.
            std::thread::sleep(Duration::from_millis(200));
            for local in std::mem::take(&mut busy) {
                if busy_since
                    .get(&local)
                    .is_some_and(|t| t.elapsed() > BUSY_WAIT)
                {
                    eprintln!("sluice: {local}: not moved: still in delivery after {BUSY_WAIT:?}");
                    self.tally.failed += 1;
                } else {
                    self.todo.push_back(local);
                }
            }
        }
        self.show_progress(true);
    }
}

/// `sluice queue move`.
pub fn run(dir: &Path, args: MoveArgs) -> i32 {
    match run_inner(dir, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {e}");
            2
        }
    }
}

fn run_inner(dir: &Path, args: MoveArgs) -> Result<i32, String> {
    if args.to.is_empty() {
        return Err("say where to: --to HOST:PORT (one or more)".into());
    }
    let pace = args.rate.as_deref().map(Pace::parse).transpose()?;
    let (cfg, _) = crate::load_config(dir, true)?;
    let file = |name: &str| -> Result<PathBuf, String> {
        let v = cfg.str(name);
        if v.is_empty() {
            Err(format!(
                "{name} is empty: moving mail between instances is mutual TLS only"
            ))
        } else {
            Ok(PathBuf::from(v))
        }
    };
    let tls = tls::mutual_client_config(
        &file("cluster_tls_cert_file")?,
        &file("cluster_tls_key_file")?,
        &file("cluster_tls_CAfile")?,
    )
    .map_err(|e| e.to_string())?;
    let mut resolved = Vec::new();
    for given in &args.to {
        let (host, port) = split(given)?;
        let addrs: Vec<_> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("--to {given}: {e}"))?
            .collect();
        resolved.push((given.clone(), host, addrs));
    }
    let targets = interleave(resolved);
    if targets.is_empty() {
        return Err("no receiver address resolved".into());
    }
    let mut live;
    let mut offline;
    let (src, me): (&mut dyn Source, String) = match &args.from_spool {
        Some(spool) => {
            offline = Offline::open(spool)?;
            let me = args
                .from_name
                .clone()
                .unwrap_or_else(|| cfg.str("myhostname"));
            (&mut offline, me)
        }
        None => {
            live = Live {
                qmgr: crate::top::Qmgr::new(dir, Duration::from_secs(60))?,
                root: PathBuf::from(cfg.str("queue_directory")),
            };
            (&mut live, cfg.str("myhostname"))
        }
    };
    let ids = src.begin(&args.sel)?;
    let n = targets.len();
    let mut m = Mover {
        src,
        me,
        cfg: tls,
        rot: Rotation::new(targets),
        conns: (0..n).map(|_| None).collect(),
        dead: vec![false; n],
        tries: HashMap::new(),
        todo: ids.into_iter().collect(),
        tally: Tally::default(),
        progress: args.progress,
        started: Instant::now(),
        last_progress: Instant::now(),
        ready: VecDeque::new(),
        accepted: Vec::new(),
    };
    m.tally.total = m.todo.len();
    m.run(pace);
    let t = &m.tally;
    eprintln!(
        "sluice: move: {} of {} message(s) moved{}{}",
        t.moved,
        t.total,
        if t.again > 0 {
            format!(" ({} had been taken before)", t.again)
        } else {
            String::new()
        },
        if t.failed > 0 {
            format!(
                "; {} not moved, still queued here{}",
                t.failed,
                if args.from_spool.is_some() {
                    ""
                } else {
                    " on hold (sluice queue release gives them back to delivery)"
                }
            )
        } else {
            String::new()
        }
    );
    Ok(if t.failed == 0 && t.moved == t.total {
        0
    } else {
        1
    })
}
