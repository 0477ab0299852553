//! A router that misbehaves on demand, bound where the instance's router
//! would be (`private/router`, with no router service in master.cf): it
//! speaks the real framing and handshake of `crates/ipc` and answers
//! `Resolve` (every address known) and `Rewrite` (nothing mapped) after a
//! delay, never, by closing the connection, or with a temporary failure. The real router cannot be
//! made slow or silent on demand; this is for those faults only.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipc::router::{Class, Request, Response, Rewrite, Route, Router};
use ipc::{decode, encode, FrameBuf, Hello, Tagged};

/// What the fake router does with each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers after this delay.
    After(Duration),
    /// Reads the request and never answers (the connection stays open).
    Never,
    /// Closes the connection on the request, without answering.
    Close,
    /// Answers at once that it cannot resolve now: a temporary
    /// [`FAILURE`] status, as when a table or DNS lookup behind it fails.
    Fail,
}

/// The status text of [`Behaviour::Fail`]'s answers.
pub const FAILURE: &str = "DNS server failure looking up mx.test.example";

/// The fake router: a listener thread and one thread per connection.
pub struct FakeRouter {
    behaviour: Arc<Mutex<Behaviour>>,
    requests: Receiver<Request>,
    connections: Arc<AtomicUsize>,
}

impl FakeRouter {
    /// Binds `socket` (removing nothing: it must not exist) and serves it.
    /// The socket is made writable by all, for an instance run as `nobody`.
    pub fn bind(socket: &Path, behaviour: Behaviour) -> FakeRouter {
        let listener = UnixListener::bind(socket).expect("bind the fake router socket");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777)).unwrap();
        let behaviour = Arc::new(Mutex::new(behaviour));
        let connections = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel();
        let (b, n) = (behaviour.clone(), connections.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                n.fetch_add(1, Ordering::SeqCst);
                let (b, tx) = (b.clone(), tx.clone());
                std::thread::spawn(move || serve(conn, &b, &tx));
            }
        });
        FakeRouter {
            behaviour,
            requests: rx,
            connections,
        }
    }

    /// Changes what it does with requests read from now on.
    pub fn set(&self, b: Behaviour) {
        *self.behaviour.lock().unwrap() = b;
    }

    /// Waits up to `secs` for the next request to arrive; panics without one.
    pub fn next_request(&self, secs: u64) -> Request {
        self.requests
            .recv_timeout(Duration::from_secs(secs))
            .expect("a request reaches the fake router")
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve(mut conn: UnixStream, behaviour: &Mutex<Behaviour>, seen: &Sender<Request>) {
    let mut frames = FrameBuf::new();
    let mut buf = [0u8; 4096];
    let mut greeted = false;
    // Answers are written from timer threads: one writer at a time.
    let writer = Arc::new(Mutex::new(conn.try_clone().expect("clone")));
    loop {
        let payload = match frames.next_frame() {
            Ok(Some(p)) => p,
            Ok(None) => match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    frames.push(&buf[..n]);
                    continue;
                }
            },
            Err(_) => return,
        };
        if !greeted {
            let hello: Hello = decode(&payload).expect("hello");
            let answer = hello.answer::<Router>();
            let _ = writer.lock().unwrap().write_all(&encode(&answer));
            greeted = true;
            continue;
        }
        let req: Tagged<Request> = decode(&payload).expect("a router request");
        let _ = seen.send(req.body.clone());
        let b = *behaviour.lock().unwrap();
        match b {
            Behaviour::Never => {}
            Behaviour::Close => {
                let _ = conn.shutdown(std::net::Shutdown::Both);
                return;
            }
            Behaviour::Fail => {
                let frame = encode(&Tagged {
                    id: req.id,
                    body: Response::Failed {
                        status: mail::Status::new(mail::StatusCode::known(4, 4, 3), FAILURE),
                    },
                });
                let _ = writer.lock().unwrap().write_all(&frame);
            }
            Behaviour::After(delay) => {
                let w = writer.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    let frame = encode(&Tagged {
                        id: req.id,
                        body: answer(req.body),
                    });
                    let _ = w.lock().unwrap().write_all(&frame);
                });
            }
        }
    }
}

/// The answer of a router whose tables list every address and map none.
fn answer(req: Request) -> Response {
    match req {
        Request::Resolve { address, .. } | Request::ResolveQueued { address, .. } => {
            let address = address.trim_matches(|c| c == '<' || c == '>').to_string();
            let domain = address.rsplit('@').next().unwrap_or("").to_string();
            Response::Resolved {
                class: Class::Local,
                routes: vec![Route {
                    address,
                    transport: "local".into(),
                    nexthop: domain,
                    error: None,
                    class: Class::Local,
                    unknown: false,
                    by_table: false,
                }],
            }
        }
        Request::Rewrite { addresses, .. } => Response::Rewritten {
            sender: Rewrite::Same,
            recipients: addresses.iter().map(|_| Rewrite::Same).collect(),
        },
        Request::Hosts { .. } | Request::Reload => Response::Failed {
            status: mail::Status::new(
                mail::StatusCode::SYSTEM_TEMP,
                "not served by the fake router",
            ),
        },
    }
}
