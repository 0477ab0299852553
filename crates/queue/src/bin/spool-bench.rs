//! spool-bench: commits/s, fsyncs and CPU per message of the storage paths
//! at group-commit batch sizes, and replay of a large deferred queue.
//!
//! `spool-bench [accept] [--messages N] [--size BYTES] [--batches 1,20,100]
//! [--repeat 3] [--modes simple,pool,pool-steady,pool-gc,inline,inline-gc]
//! [--dir PATH]`. Paths: `simple` = a new file per message (create, write,
//! fdatasync, directory fsync); `pool` = a preallocated pool slot (one
//! fdatasync), the pool grown before the timed run and every message held;
//! `pool-steady` = the same with each round's messages removed in the next
//! round, so slots recycle; `inline` = data inside the `Arrived` record. In
//! those four, B writer threads (concurrent SMTP sessions) each store one
//! message, then one journal commit acknowledges all B, then the next round:
//! lock-step batches of exactly B. The `-gc` paths are the real qmgr loop: B
//! writers each wait for their own acknowledgement while a `Syncer` thread
//! runs one fdatasync at a time and records arriving during it go in the
//! next (group commit); the journal's segments are written ahead (zeros
//! synced before records overwrite them, made before the timed run as
//! qmgr makes them at start) unless `--append` is given. Each figure is
//! the median of `--repeat` runs.
//! `spool-bench replay [--messages N] [--dir PATH]` writes a journal of N
//! deferred messages, then times `queue::replay` in a fresh process and
//! reports its memory. `spool-bench deferred --dir SPOOL [--messages N]
//! [--size BYTES] [--delay SECS] [--spread SECS]` writes a real spool that
//! qmgr starts on (`queue_directory = SPOOL`): N small messages stored
//! inline in their `Arrived` records, each followed by a `Deferred` record
//! (its first attempt failed) whose next attempt is `--delay` seconds from
//! now plus up to `--spread`; for `scripts/bench restart` and the restart
//! test. Exits non-zero with a message on bad arguments or I/O errors;
//! panics on nothing else.

use mail::{Envelope, QueueId, QueueIdGen, Recipient, StatusCode, Timestamp};
use queue::{
    recover, DataRef, FileMode, Journal, JournalConfig, MessageHead, Record, SpoolConfig, Syncer,
};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Barrier};
use std::time::Instant;

struct Args {
    cmd: String,
    messages: u64,
    size: usize,
    batches: Vec<usize>,
    modes: Vec<String>,
    dir: PathBuf,
    child: bool,
    repeat: usize,
    delay: u64,
    spread: u64,
    append: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        cmd: "accept".into(),
        messages: 0,
        size: 2048,
        batches: vec![1, 20, 100],
        modes: [
            "simple",
            "pool",
            "pool-steady",
            "pool-gc",
            "inline",
            "inline-gc",
        ]
        .map(String::from)
        .to_vec(),
        dir: PathBuf::from("spool-bench.tmp"),
        child: false,
        repeat: 3,
        delay: 3600,
        spread: 3600,
        append: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "accept" | "replay" | "deferred" => a.cmd = arg.clone(),
            "--messages" => a.messages = val()?.parse().map_err(|e| format!("--messages: {e}"))?,
            "--size" => a.size = val()?.parse().map_err(|e| format!("--size: {e}"))?,
            "--batches" => {
                a.batches = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--batches: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--modes" => a.modes = val()?.split(',').map(str::to_string).collect(),
            "--dir" => a.dir = PathBuf::from(val()?),
            "--child" => a.child = true,
            "--append" => a.append = true,
            "--repeat" => a.repeat = val()?.parse().map_err(|e| format!("--repeat: {e}"))?,
            "--delay" => a.delay = val()?.parse().map_err(|e| format!("--delay: {e}"))?,
            "--spread" => a.spread = val()?.parse().map_err(|e| format!("--spread: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: spool-bench [accept|replay|deferred] [--messages N] [--size BYTES] \
                            [--batches 1,20,100] [--repeat 3] [--modes simple,pool,pool-steady,pool-gc,inline,inline-gc] [--dir PATH] \
                            [--delay SECS] [--spread SECS] [--append]"
                    .into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.messages == 0 {
        a.messages = if a.cmd == "accept" { 4000 } else { 1_000_000 };
    }
    Ok(a)
}

/// Process CPU time (user + system, all threads) in milliseconds.
fn cpu_ms() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
    ms(u.user_time()) + ms(u.system_time())
}

fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn envelope(n: u64, size: u64) -> Envelope {
    Envelope {
        sender: format!("sender{n}@example.org"),
        recipients: vec![Recipient::new(format!("rcpt{n}@example.net"))],
        client_addr: Some("192.0.2.10".into()),
        client_name: Some("client.example.org".into()),
        helo: Some("client.example.org".into()),
        arrival: Timestamp::from_micros(1_700_000_000_000_000 + n),
        size,
        ..Envelope::default()
    }
}

fn message(size: usize) -> Vec<u8> {
    let mut v = b"Received: from client.example.org\r\nSubject: bench\r\n\r\n".to_vec();
    while v.len() < size {
        v.extend_from_slice(b"Lorem ipsum dolor sit amet, consectetur adipiscing elit sed do.\r\n");
    }
    v.truncate(size.saturating_sub(5));
    v.extend_from_slice(b"\r\n.\r\n");
    v
}

struct Row {
    mode: String,
    batch: usize,
    rate: f64,
    fsyncs: f64,
    cpu_us: f64,
}

fn run_accept(a: &Args, mode: &str, batch: usize) -> Result<Row, String> {
    let dir = a.dir.join(format!("{mode}-{batch}"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = SpoolConfig::default();
    match mode {
        "simple" => (cfg.file_mode, cfg.inline_max) = (FileMode::Simple, 0),
        "pool" | "pool-steady" | "pool-gc" => (cfg.file_mode, cfg.inline_max) = (FileMode::Pool, 0),
        "inline" | "inline-gc" => (cfg.file_mode, cfg.inline_max) = (FileMode::Pool, 64 << 10),
        other => return Err(format!("unknown mode {other}")),
    }
    let mut r = recover(&dir, cfg).map_err(|e| e.to_string())?;
    let rounds = (a.messages as usize).div_ceil(batch);
    let steady = mode == "pool-steady";
    if mode.starts_with("pool") {
        // Grown ahead of load (idle time, or at start), as a running system's pool is:
        // enough for every held message, or for two rounds when delivered ones are removed.
        let slots = if steady {
            2 * batch + 8
        } else {
            rounds * batch + 8
        } as u32;
        let t = Instant::now();
        r.spool.grow_pool(slots).map_err(|e| e.to_string())?;
        eprintln!(
            "  ({mode}, batch {batch}: pool grown by {slots} slots of {} KiB in {:.2} s, not timed)",
            cfg.pool.prealloc >> 10,
            t.elapsed().as_secs_f64()
        );
    }
    let data = message(a.size);
    if mode.ends_with("-gc") {
        return pipelined(a, mode, batch, r, &data);
    }
    let (tx, rx) = mpsc::channel::<Result<(QueueId, DataRef), String>>();
    let barrier = Barrier::new(batch + 1);
    let (f0, c0, t0) = (queue::fsync_count(), cpu_ms(), Instant::now());
    let spool = &r.spool;
    let journal = &mut r.journal;
    let result = std::thread::scope(|s| -> Result<(), String> {
        for w in 0..batch {
            let (tx, barrier, data) = (tx.clone(), &barrier, &data);
            s.spawn(move || {
                let mut ids = QueueIdGen::new(w as u32);
                for round in 0..rounds {
                    let id = ids.next(1_700_000_000_000_000 + round as u64);
                    let mut d = spool.draft(id);
                    let res = d
                        .append(spool, data)
                        .and_then(|()| d.commit(spool, &envelope(round as u64, data.len() as u64)))
                        .map(|dr| (id, dr))
                        .map_err(|e| e.to_string());
                    if tx.send(res).is_err() {
                        return;
                    }
                    barrier.wait();
                }
            });
        }
        // pool-steady: messages of the previous round are delivered and removed,
        // their Removed records riding in this round's commit.
        let mut removing: Vec<(QueueId, DataRef)> = Vec::new();
        for round in 0..rounds {
            let mut arrived = Vec::with_capacity(batch);
            for _ in 0..batch {
                let (id, data_ref) = rx.recv().map_err(|e| e.to_string())??;
                let head = MessageHead {
                    id,
                    envelope: envelope(round as u64, a.size as u64),
                    data: data_ref.clone(),
                };
                journal
                    .append(&Record::Arrived(head))
                    .map_err(|e| e.to_string())?;
                arrived.push((id, data_ref));
            }
            for (id, _) in &removing {
                journal
                    .append(&Record::Removed { id: *id })
                    .map_err(|e| e.to_string())?;
            }
            journal.commit().map_err(|e| e.to_string())?;
            for (id, d) in removing.drain(..) {
                spool
                    .remove_data(id, d.storage())
                    .map_err(|e| e.to_string())?;
            }
            if steady {
                removing = arrived;
            }
            barrier.wait();
        }
        Ok(())
    });
    result?;
    let (secs, n) = (t0.elapsed().as_secs_f64(), (rounds * batch) as f64);
    let row = Row {
        mode: mode.into(),
        batch,
        rate: n / secs,
        fsyncs: (queue::fsync_count() - f0) as f64 / n,
        cpu_us: (cpu_ms() - c0) * 1000.0 / n,
    };
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(row)
}

enum Event {
    Submit(QueueId, DataRef, mpsc::Sender<()>),
    Failed(String),
    Synced,
}

/// Real group commit: `batch` writers each wait for their own acknowledgement
/// (an SMTP session waiting for its 250) while the loop appends whatever
/// arrived and a `Syncer` thread runs one fdatasync at a time; records that
/// arrive during a sync go in the next one. This is the qmgr event loop.
fn pipelined(
    a: &Args,
    mode: &str,
    batch: usize,
    mut r: queue::Recovered,
    data: &[u8],
) -> Result<Row, String> {
    let per_writer = (a.messages as usize).div_ceil(batch);
    let total = per_writer * batch;
    let (tx, rx) = mpsc::channel::<Event>();
    let notify = tx.clone();
    let notify = move || {
        let _ = notify.send(Event::Synced);
    };
    let mut syncer = if a.append {
        Syncer::spawn_appending(notify)
    } else {
        Syncer::spawn(notify)
    }
    .map_err(|e| e.to_string())?;
    // The first segment written ahead, as qmgr has it before mail comes.
    syncer.prepare_ahead(&mut r.journal);
    while syncer.ahead_busy() {
        std::thread::sleep(std::time::Duration::from_millis(1));
        syncer.prepare_ahead(&mut r.journal);
    }
    if let Some(e) = syncer.take_ahead_error() {
        return Err(format!("writing the first segment ahead: {e}"));
    }
    let (f0, c0, t0) = (queue::fsync_count(), cpu_ms(), Instant::now());
    let spool = &r.spool;
    let journal = &mut r.journal;
    std::thread::scope(|s| -> Result<(), String> {
        for w in 0..batch {
            let tx = tx.clone();
            s.spawn(move || {
                let mut ids = QueueIdGen::new(w as u32);
                let (ack_tx, ack_rx) = mpsc::channel();
                for i in 0..per_writer {
                    let id = ids.next(1_700_000_000_000_000 + i as u64);
                    let mut d = spool.draft(id);
                    let res = d
                        .append(spool, data)
                        .and_then(|()| d.commit(spool, &envelope(i as u64, data.len() as u64)));
                    let ev = match res {
                        Ok(dr) => Event::Submit(id, dr, ack_tx.clone()),
                        Err(e) => Event::Failed(e.to_string()),
                    };
                    if tx.send(ev).is_err() || ack_rx.recv().is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut waiting: Vec<(queue::Lsn, mpsc::Sender<()>)> = Vec::new();
        let mut acked = 0;
        while acked < total {
            match rx.recv().map_err(|e| e.to_string())? {
                Event::Submit(id, data_ref, ack) => {
                    let head = MessageHead {
                        id,
                        envelope: envelope(0, a.size as u64),
                        data: data_ref,
                    };
                    let lsn = journal
                        .append(&Record::Arrived(head))
                        .map_err(|e| e.to_string())?;
                    waiting.push((lsn, ack));
                    syncer.kick(journal).map_err(|e| e.to_string())?;
                }
                Event::Synced => {
                    let Some(durable) = syncer.poll(journal).map_err(|e| e.to_string())? else {
                        continue;
                    };
                    waiting.retain(|(lsn, ack)| {
                        if *lsn < durable {
                            let _ = ack.send(());
                            acked += 1;
                            false
                        } else {
                            true
                        }
                    });
                    // What arrived during that sync goes in the next one:
                    // its writers wait for it and send nothing more.
                    syncer.kick(journal).map_err(|e| e.to_string())?;
                }
                Event::Failed(e) => return Err(e),
            }
        }
        Ok(())
    })?;
    let n = total as f64;
    let row = Row {
        mode: mode.into(),
        batch,
        rate: n / t0.elapsed().as_secs_f64(),
        fsyncs: (queue::fsync_count() - f0) as f64 / n,
        cpu_us: (cpu_ms() - c0) * 1000.0 / n,
    };
    drop(syncer);
    let dir = r.spool.root().to_path_buf();
    drop(r);
    let _ = std::fs::remove_dir_all(dir);
    Ok(row)
}

fn accept(a: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("{}: {e}", a.dir.display()))?;
    println!(
        "spool-bench accept: {} messages of {} bytes per run, median of {} runs, dir {}{}",
        a.messages,
        a.size,
        a.repeat.max(1),
        a.dir.display(),
        if a.append {
            ", segments appended"
        } else {
            ", segments written ahead"
        }
    );
    println!("| path | batch | commits/s | fsyncs/msg | CPU µs/msg |");
    println!("|---|---:|---:|---:|---:|");
    for mode in &a.modes {
        for &b in &a.batches {
            let mut runs = (0..a.repeat.max(1))
                .map(|_| run_accept(a, mode, b.max(1)))
                .collect::<Result<Vec<_>, _>>()?;
            runs.sort_by(|x, y| x.rate.total_cmp(&y.rate));
            let r = &runs[runs.len() / 2];
            println!(
                "| {} | {} | {:.0} | {:.2} | {:.0} |",
                r.mode, r.batch, r.rate, r.fsyncs, r.cpu_us
            );
        }
    }
    Ok(())
}

fn generate(dir: &Path, n: u64) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    let mut j = Journal::open(dir, JournalConfig::default()).map_err(|e| e.to_string())?;
    let mut ids = QueueIdGen::new(1);
    let status: StatusCode = "4.4.1".parse().map_err(|e| format!("{e}"))?;
    for i in 0..n {
        let id = ids.next(1_700_000_000_000_000 + i * 10);
        let head = MessageHead {
            id,
            envelope: envelope(i, 2048),
            data: DataRef::Pool(i as u32),
        };
        j.append(&Record::Arrived(head))
            .map_err(|e| e.to_string())?;
        let rec = Record::Deferred {
            id,
            rcpts: vec![0],
            status,
            reason: "connect to mx.example.net[192.0.2.25]:25: Connection timed out".into(),
            next_attempt: 1_700_000_000 + (i * 7919) % 86_400,
        };
        j.append(&rec).map_err(|e| e.to_string())?;
        if i % 10_000 == 9_999 {
            j.commit().map_err(|e| e.to_string())?;
        }
    }
    j.commit().map_err(|e| e.to_string())?;
    Ok(())
}

fn replay_bench(a: &Args) -> Result<(), String> {
    let dir = a.dir.join("replay");
    if a.child {
        let rss0 = status_kb("VmRSS:");
        let t0 = Instant::now();
        let st =
            queue::replay(&dir, JournalConfig::default().max_record).map_err(|e| e.to_string())?;
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "replay: {} records, {} live, {} deferred in {:.2} s; RSS +{} MB (peak {} MB)",
            st.records,
            st.messages.len(),
            st.deferred.len(),
            secs,
            (status_kb("VmRSS:") - rss0) / 1024,
            status_kb("VmHWM:") / 1024
        );
        return Ok(());
    }
    let t0 = Instant::now();
    generate(&dir, a.messages)?;
    let bytes: u64 = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "generated {} deferred messages ({} MB of journal) in {:.1} s",
        a.messages,
        bytes >> 20,
        t0.elapsed().as_secs_f64()
    );
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let status = std::process::Command::new(exe)
        .args(["replay", "--child", "--dir"])
        .arg(&a.dir)
        .status()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    if status.success() {
        Ok(())
    } else {
        Err("replay child failed".into())
    }
}

/// Recipient domains of the deferred spool: a few, as a real backlog has
/// (one destination down, or a few slow ones).
const DOMAINS: [&str; 5] = [
    "example.net",
    "example.com",
    "mail.example.org",
    "customers.example",
    "lists.example.edu",
];

/// The wire-form data cleanup would store for message `n`: its headers
/// (Received first) and a body filled to about `size` bytes, CRLF lines,
/// no final dot.
fn deferred_data(n: u64, env: &Envelope, id: QueueId, size: usize) -> Vec<u8> {
    let to = env.recipients.first().map_or("", |r| r.address.as_str());
    let mut v = format!(
        "Received: from client{c}.example.org (client{c}.example.org [192.0.2.{c}])\r\n\
         \tby sluice.bench.test with ESMTP id {id}\r\n\
         \tfor <{to}>; Sun, 22 Nov 2026 02:00:00 +0000\r\n\
         From: <{from}>\r\nTo: <{to}>\r\nSubject: deferred message {n}\r\n\
         Date: Sun, 22 Nov 2026 02:00:00 +0000\r\nMessage-ID: <{n}.{id}@example.org>\r\n\r\n",
        c = n % 250 + 1,
        from = env.sender,
    )
    .into_bytes();
    while v.len() + 66 <= size {
        v.extend_from_slice(b"Lorem ipsum dolor sit amet, consectetur adipiscing elit sed do.\r\n");
    }
    v
}

/// `deferred`: a spool qmgr starts on, written with the queue crate's own
/// draft and journal writers, as cleanup and qmgr would have written it.
fn deferred_spool(a: &Args) -> Result<(), String> {
    let t0 = Instant::now();
    let jdir = a.dir.join("journal");
    if jdir.is_dir()
        && !queue::list_segments(&jdir)
            .map_err(|e| e.to_string())?
            .is_empty()
    {
        return Err(format!(
            "{} already holds a journal: give a new or empty directory",
            a.dir.display()
        ));
    }
    let cfg = SpoolConfig::default();
    if a.size > cfg.inline_max {
        return Err(format!(
            "--size {} is over the inline limit of {} bytes: the messages must be stored inline",
            a.size, cfg.inline_max
        ));
    }
    // As qmgr's first start: the tree, and the first journal segment.
    let mut r = recover(&a.dir, cfg).map_err(|e| e.to_string())?;
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_micros() as u64;
    let now = now_us / 1_000_000;
    let status: StatusCode = "4.4.1".parse().map_err(|e| format!("{e}"))?;
    let mut ids = QueueIdGen::new(std::process::id());
    let n = a.messages;
    // A message's first attempt fails a little after it arrived, while
    // later ones arrive: its Deferred record follows some later Arrived ones.
    let mut failing: std::collections::VecDeque<(QueueId, u32, u64)> = Default::default();
    let lag = 64;
    let mut first = None;
    let defer = |j: &mut Journal, (id, rcpts, i): (QueueId, u32, u64)| {
        let domain = DOMAINS[(i % DOMAINS.len() as u64) as usize];
        let rec = Record::Deferred {
            id,
            rcpts: (0..rcpts).collect(),
            status,
            reason: format!("connect to mx.{domain}[192.0.2.25]:25: Connection timed out"),
            next_attempt: now + a.delay + (i.wrapping_mul(7919) % a.spread.max(1)),
        };
        j.append(&rec).map(drop).map_err(|e| e.to_string())
    };
    for i in 0..n {
        // Arrived over the last hour, in order.
        let arrival = now_us - 3_600_000_000 + i * 3_600_000_000 / n.max(1);
        let id = ids.next(arrival);
        first.get_or_insert(id);
        let nrcpt = if i % 10 == 0 { 2 } else { 1 };
        let env = Envelope {
            sender: format!("user{i}@sender{}.example.org", i % 997),
            recipients: (0..nrcpt)
                .map(|k| {
                    let d = DOMAINS[((i + k) % DOMAINS.len() as u64) as usize];
                    Recipient::new(format!("rcpt{}@{d}", i % 50_000 + k))
                })
                .collect(),
            client_addr: Some(format!("192.0.2.{}", i % 250 + 1)),
            client_name: Some(format!("client{}.example.org", i % 250 + 1)),
            helo: Some(format!("client{}.example.org", i % 250 + 1)),
            arrival: Timestamp::from_micros(arrival),
            ..Envelope::default()
        };
        let data = deferred_data(i, &env, id, a.size);
        let mut d = r.spool.draft(id);
        d.append(&r.spool, &data).map_err(|e| e.to_string())?;
        let env = Envelope {
            size: d.len(),
            ..env
        };
        let data = d.commit(&r.spool, &env).map_err(|e| e.to_string())?;
        if !matches!(data, DataRef::Inline(_)) {
            return Err(format!("{id}: the draft was not stored inline"));
        }
        let head = MessageHead {
            id,
            envelope: env,
            data,
        };
        r.journal
            .append(&Record::Arrived(head))
            .map_err(|e| e.to_string())?;
        failing.push_back((id, nrcpt as u32, i));
        if failing.len() > lag {
            if let Some(f) = failing.pop_front() {
                defer(&mut r.journal, f)?;
            }
        }
    }
    while let Some(f) = failing.pop_front() {
        defer(&mut r.journal, f)?;
    }
    // One group commit for everything: a sync per segment, one for the directory.
    let f0 = queue::fsync_count();
    r.journal.commit().map_err(|e| e.to_string())?;
    let segs = r.journal.segments();
    let bytes: u64 = segs
        .iter()
        .filter_map(|&s| std::fs::metadata(queue::segment_path(&jdir, s)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "deferred spool {}: {n} messages ({} MB of journal in {} segments, {} fsyncs) in {:.1} s; \
         next attempts {}..{} (now {now}); first id {}",
        a.dir.display(),
        bytes >> 20,
        segs.len(),
        queue::fsync_count() - f0,
        t0.elapsed().as_secs_f64(),
        now + a.delay,
        now + a.delay + a.spread.max(1) - 1,
        first.map_or_else(|| "-".to_string(), |id| id.to_string())
    );
    Ok(())
}

fn main() {
    let res = parse_args().and_then(|a| match a.cmd.as_str() {
        "replay" => replay_bench(&a),
        "deferred" => deferred_spool(&a),
        _ => accept(&a),
    });
    if let Err(e) = res {
        eprintln!("spool-bench: {e}");
        std::process::exit(1);
    }
}
