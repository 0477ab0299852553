//! router(8) in a real instance: resolution from tables, pipelined
//! requests answered out of order, hosts() from dnsmasq on a loopback
//! port, and table reloads that keep the running tables when a new one is
//! broken. Nothing leaves 127.0.0.1.

use std::io::Write;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use ipc::router::{Class, Request, Response, Router};
use ipc::Client;
use sluice_suite::{dnsmasq, wait_for, Instance};

const ROUTER: &str = "router unix - - n - 1 router\n";

fn append_main(inst: &Instance, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(inst.etc().join("main.cf"))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn write(inst: &Instance, name: &str, text: &str) -> String {
    let p = inst.root().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn client(inst: &Instance) -> Client<Router> {
    let sock = inst.root().join("spool/private/router");
    wait_for(20, "router socket", || sock.exists().then_some(()));
    Client::<Router>::connect(&sock, Duration::from_secs(20)).expect("connect router")
}

fn resolve(c: &mut Client<Router>, address: &str) -> Response {
    c.call(&Request::Resolve {
        address: address.into(),
        smtputf8: false,
    })
    .expect("router answers")
}

fn first(r: Response) -> (String, String, String, Class, bool) {
    match r {
        Response::Resolved { routes, .. } => {
            let r = routes.into_iter().next().expect("at least one route");
            (r.address, r.transport, r.nexthop, r.class, r.unknown)
        }
        other => panic!("expected routes, got {other:?}"),
    }
}

/// An instance with a router, local domain example.test and a few tables.
fn site(extra: &str) -> Instance {
    let inst = Instance::new(ROUTER, "");
    let transport = write(
        &inst,
        "transport",
        "special.test smtp:[192.0.2.10]:2525\n.sub.test relay:\n",
    );
    let virtual_ = write(
        &inst,
        "virtual",
        "sales@example.test alice@example.test, bob@remote.test\n",
    );
    let users = write(&inst, "users", "alice ok\nMAILER-DAEMON ok\n");
    append_main(
        &inst,
        &format!(
            "myhostname = mx.example.test\nmydomain = example.test\nmydestination = $myhostname, $mydomain\n\
             relay_domains = relay.test\nrecipient_delimiter = +\ntransport_maps = hash:{transport}\n\
             virtual_alias_maps = texthash:{virtual_}\nlocal_recipient_maps = hash:{users}\n{extra}\n"
        ),
    );
    inst
}

#[test]
fn resolves_from_tables() {
    let mut inst = site("dns_servers = 127.0.0.1:9\n");
    inst.start();
    let mut c = client(&inst);
    assert_eq!(
        first(resolve(&mut c, "alice+tag@Example.TEST")),
        (
            "alice+tag@example.test".into(),
            "local".into(),
            "mx.example.test".into(),
            Class::Local,
            false
        )
    );
    assert!(
        first(resolve(&mut c, "ghost@example.test")).4,
        "unknown local user is flagged"
    );
    assert_eq!(
        first(resolve(&mut c, "x@special.test")).2,
        "[192.0.2.10]:2525"
    );
    assert_eq!(first(resolve(&mut c, "x@a.sub.test")).1, "relay");
    assert_eq!(first(resolve(&mut c, "x@relay.test")).3, Class::Relay);
    assert_eq!(
        first(resolve(&mut c, "x@far.test")),
        (
            "x@far.test".into(),
            "smtp".into(),
            "far.test".into(),
            Class::Default,
            false
        )
    );
    match resolve(&mut c, "sales@example.test") {
        Response::Resolved { class, routes } => {
            let a: Vec<&str> = routes.iter().map(|r| r.address.as_str()).collect();
            assert_eq!(a, ["alice@example.test", "bob@remote.test"]);
            // smtpd's relay check looks at the address as given.
            assert_eq!(class, Class::Local);
            assert_eq!(routes[1].class, Class::Default);
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "a\r\nb@example.test",
        "@example.test",
        "user@bad..test",
        "jöran@example.test",
    ] {
        match resolve(&mut c, bad) {
            Response::Failed { status } if status.is_permanent() => {
                let text = status.to_string();
                assert!(text.starts_with("5.1.3"), "{text}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn pipelined_requests_are_answered_out_of_order() {
    // A name server that never answers: the hosts request waits for its
    // timeout while everything sent after it is answered at once.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let extra = format!(
        "dns_servers = {}\ndns_timeout = 2s\ndns_attempts = 1\n",
        silent.local_addr().unwrap()
    );
    let mut inst = site(&extra);
    inst.start();
    let mut c = client(&inst);
    let t0 = Instant::now();
    let slow = c
        .send(&Request::Hosts {
            nexthop: "slow.test".into(),
        })
        .unwrap();
    let ids: Vec<u64> = (0..2000)
        .map(|i| {
            c.send(&Request::Resolve {
                address: format!("user{i}@far{i}.test"),
                smtputf8: false,
            })
            .unwrap()
        })
        .collect();
    for (i, id) in ids.iter().enumerate().rev() {
        let (addr, ..) = first(c.wait(*id).unwrap());
        assert_eq!(addr, format!("user{i}@far{i}.test"));
    }
    assert!(
        t0.elapsed() < Duration::from_millis(1900),
        "table answers did not wait for DNS: {:?}",
        t0.elapsed()
    );
    match c.wait(slow).unwrap() {
        Response::Failed { status } if status.is_transient() => {
            let text = status.to_string();
            assert!(text.contains("timed out"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() >= Duration::from_secs(2));
}

#[test]
fn hosts_from_dns() {
    let (_d, addr) = dnsmasq(&[
        "--mx-host=example.org.test,mx1.example.org.test,10",
        "--mx-host=example.org.test,mx2.example.org.test,20",
        "--host-record=mx1.example.org.test,192.0.2.1",
        "--host-record=mx2.example.org.test,192.0.2.2",
        "--mx-host=nullmx.test,.,0",
    ]);
    let mut inst = site(&format!("dns_servers = {addr}\ninet_protocols = ipv4\n"));
    inst.start();
    let mut c = client(&inst);
    // dnsmasq may still be starting: retry the first question briefly.
    let l = wait_for(10, "dnsmasq to answer", || {
        match c
            .call(&Request::Hosts {
                nexthop: "example.org.test".into(),
            })
            .unwrap()
        {
            Response::Hosts(l) => Some(l),
            _ => None,
        }
    });
    let hosts: Vec<(&str, u16)> = l
        .hosts
        .iter()
        .map(|h| (h.name.as_str(), h.preference))
        .collect();
    assert_eq!(
        hosts,
        [("mx1.example.org.test", 10), ("mx2.example.org.test", 20)]
    );
    assert_eq!(
        l.hosts[0].addrs,
        vec!["192.0.2.1".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(l.from_mx);
    match c
        .call(&Request::Hosts {
            nexthop: "nullmx.test".into(),
        })
        .unwrap()
    {
        Response::Failed { status } if status.is_permanent() => {
            let text = status.to_string();
            assert!(text.contains("nullMX"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    match c
        .call(&Request::Hosts {
            nexthop: "nxdomain.test".into(),
        })
        .unwrap()
    {
        Response::Failed { status } if status.is_permanent() => {
            let text = status.to_string();
            assert!(text.contains("NXDOMAIN"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    match c
        .call(&Request::Hosts {
            nexthop: "[192.0.2.7]:2525".into(),
        })
        .unwrap()
    {
        Response::Hosts(l) => assert_eq!((l.hosts[0].port, l.hosts[0].addrs.len()), (2525, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn reload_swaps_tables_and_keeps_them_when_broken() {
    let mut inst = site("dns_servers = 127.0.0.1:9\n");
    inst.start();
    let mut c = client(&inst);
    assert_eq!(
        first(resolve(&mut c, "x@special.test")).2,
        "[192.0.2.10]:2525"
    );
    write(&inst, "transport", "special.test smtp:[192.0.2.11]\n");
    assert_eq!(c.call(&Request::Reload).unwrap(), Response::Reloaded);
    assert_eq!(first(resolve(&mut c, "x@special.test")).2, "[192.0.2.11]");

    let bad = write(
        &inst,
        "transport",
        "special.test smtp:[192.0.2.12]\nbroken-line\n",
    );
    let pid = inst.wait_pid("router", &[]);
    sys::process::signal(pid, 1).unwrap();
    let line = inst.wait_log(10, "keeping the running tables");
    assert!(line.contains(&bad) && line.contains("line 2"), "{line}");
    assert_eq!(
        first(resolve(&mut c, "x@special.test")).2,
        "[192.0.2.11]",
        "the old tables still answer"
    );
    // An error transport's code that is none is refused the same way,
    // when the table is read, not bounced with the code as text.
    write(
        &inst,
        "transport",
        "special.test smtp:[192.0.2.13]\ngone.test error:5.1 moved away\n",
    );
    sys::process::signal(pid, 1).unwrap();
    let line = inst.wait_log(10, "bad value \"error:5.1 moved away\"");
    assert!(
        line.contains("line 2")
            && line.contains("enhanced status code must be class.subject.detail")
            && line.contains("keeping the running tables"),
        "{line}"
    );
    assert_eq!(
        first(resolve(&mut c, "x@special.test")).2,
        "[192.0.2.11]",
        "the old tables still answer"
    );
}

#[test]
fn bad_clients_are_dropped_and_others_served() {
    use std::io::Read;
    let mut inst =
        site("dns_servers = 127.0.0.1:9\nsmtp_host_lookup = native\ninet_protocols = ipv4\n");
    inst.start();
    let mut good = client(&inst);
    let sock = inst.root().join("spool/private/router");
    // Wrong version (6: a failed DANE lookup's status as text): refused,
    // connection closed, and the mismatch logged.
    let mut wrong = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    wrong
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    wrong
        .write_all(&ipc::encode(&ipc::Hello {
            protocol: "sluice-router".into(),
            version: 6,
        }))
        .unwrap();
    let mut buf = Vec::new();
    let _ = wrong.read_to_end(&mut buf);
    let reply: ipc::HelloReply = ipc::decode(&buf[4..]).unwrap();
    assert_eq!(
        reply,
        ipc::HelloReply::Refused {
            protocol: "sluice-router".into(),
            version: 7
        }
    );
    inst.wait_log(
        10,
        "protocol mismatch: wanted sluice-router 7, peer speaks sluice-router 6",
    );
    // Garbage after a good hello: dropped.
    let mut junk = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    junk.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    junk.write_all(&ipc::encode(&ipc::Hello::of::<Router>()))
        .unwrap();
    junk.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
    let mut buf = Vec::new();
    let _ = junk.read_to_end(&mut buf);
    // The well-behaved client is still served, native lookups included.
    assert_eq!(first(resolve(&mut good, "alice@example.test")).1, "local");
    match good
        .call(&Request::Hosts {
            nexthop: "[localhost]:2525".into(),
        })
        .unwrap()
    {
        Response::Hosts(l) => {
            assert_eq!(
                l.hosts[0].addrs,
                vec!["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
            );
            assert_eq!(l.hosts[0].port, 2525);
        }
        other => panic!("{other:?}"),
    }
    wait_for(10, "the warnings", || {
        let log = inst.log();
        (log.contains("protocol mismatch") && log.contains("undecodable")).then_some(())
    });
}

/// A missing alias_maps file, as QA met it: the router stays up, remote
/// mail goes out at once, a local recipient only the alias file could
/// vouch for gets 451 4.3.0 at RCPT, and once the file exists and sluice
/// reload has run, local mail is delivered. Before: the router exited at
/// each start ("fatal: local_recipient_maps ..."), RCPTs waited 10 s for
/// their 451 and remote mail sat in the active queue.
#[test]
fn a_missing_alias_file_defers_local_mail_and_lets_remote_mail_flow() {
    use sluice_suite::{free_port, instance_user, smtp_sink, swaks};
    use std::os::unix::fs::PermissionsExt;
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let port = free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n{ROUTER}local unix - n n - - local\n\
         smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let mut inst = Instance::new(&cf, "");
    let spool = inst.root().join("mail");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let aliases = inst.root().join("aliases");
    // local_recipient_maps keeps its default: unix:passwd.byname $alias_maps.
    append_main(
        &inst,
        &format!(
            "myhostname = mx.test.example\nmail_spool_directory = {}\nalias_maps = hash:{}\n\
             relayhost = [127.0.0.1]:{}\n",
            spool.display(),
            aliases.display(),
            sink.port
        ),
    );
    // sluice check names the alias_maps line (before: an error blaming
    // "main.cf (default value): parameter local_recipient_maps").
    let out = inst.sluice(&["check"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("main.cf, line ")
            && text.contains("parameter \"alias_maps\"")
            && !text.contains("local_recipient_maps"),
        "{text}"
    );
    inst.start();
    inst.wait_port(port);
    let server = format!("127.0.0.1:{port}");
    let send = |to: &str| swaks(&["--server", &server, "--from", "a@example.com", "--to", to]);

    let started = Instant::now();
    let (code, out) = send("far@remote.example");
    assert_eq!(code, 0, "{out}");
    let line = inst.wait_log(10, "to=<far@remote.example>, relay=127.0.0.1");
    assert!(line.contains("status=sent"), "{line}");
    let (code, out) = send("team@mx.test.example");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("451 4.3.0"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "no wait for a router that is down: {:?}",
        started.elapsed()
    );
    let log = inst.log();
    assert!(!log.contains("fatal"), "{log}");
    assert!(
        log.contains("warning: local_recipient_maps: ")
            && log.contains("local recipients are deferred"),
        "{log}"
    );

    let me = instance_user();
    std::fs::write(&aliases, format!("team: {me}\n")).unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "router reloaded", || {
        inst.log().contains("tables reloaded").then_some(())
    });
    let (code, out) = send("team@mx.test.example");
    assert_eq!(code, 0, "{out}");
    let line = inst.wait_log(
        20,
        &format!("to=<{me}@mx.test.example>, orig_to=<team@mx.test.example>"),
    );
    assert!(
        line.contains("status=sent (delivered to mailbox)"),
        "{line}"
    );
    assert!(std::fs::read_to_string(spool.join(&me))
        .unwrap()
        .contains("X-Mailer: swaks"));
}

/// An instance relaying to smtp-sink, with `extra` in main.cf.
fn relay_to_sink(sink_port: u16, extra: &str) -> (Instance, u16) {
    let port = sluice_suite::free_port();
    let cf = format!(
        "127.0.0.1:{port} inet n - n - - smtpd\nanvil unix - - n - 1 anvil\ncleanup unix - - n - 0 cleanup\n\
         qmgr unix - - n 300 1 qmgr\n{ROUTER}smtp unix - - n - - smtp\nrelay unix - - n - - smtp\n"
    );
    let inst = Instance::new(&cf, "");
    append_main(
        &inst,
        &format!("myhostname = mx.test.example\nrelayhost = [127.0.0.1]:{sink_port}\n{extra}"),
    );
    (inst, port)
}

/// A missing virtual_alias_maps file: Postfix consults the table for every
/// recipient, so every RCPT gets 451 4.3.0 (deferred, never bounced) while
/// the router keeps running; once the file exists and sluice reload has
/// run, mail flows. Before: "fatal: virtual_alias_maps: ..." at each start,
/// master throttled the router and every RCPT waited 10 s.
#[test]
fn a_missing_virtual_alias_file_defers_mail_until_it_exists() {
    use sluice_suite::{free_port, smtp_sink, swaks};
    let sink = smtp_sink(&format!("127.0.0.1:{}", free_port()), &[]);
    let (inst, port) = relay_to_sink(sink.port, "");
    let virt = inst.root().join("virtual");
    append_main(
        &inst,
        &format!("virtual_alias_maps = hash:{}\n", virt.display()),
    );
    let out = inst.sluice(&["check"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("main.cf, line ")
            && text.contains("parameter \"virtual_alias_maps\"")
            && text.contains("deferred"),
        "{text}"
    );
    let mut inst = inst;
    inst.start();
    inst.wait_port(port);
    let server = format!("127.0.0.1:{port}");
    let send = |to: &str| swaks(&["--server", &server, "--from", "a@example.com", "--to", to]);
    let started = Instant::now();
    for _ in 0..2 {
        let (code, out) = send("far@remote.example");
        assert_ne!(code, 0, "{out}");
        assert!(out.contains("451 4.3.0"), "{out}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "no wait for a router that is down: {:?}",
        started.elapsed()
    );
    let routers = inst.pids("router");
    assert_eq!(routers.len(), 1);
    let log = inst.log();
    assert!(!log.contains("fatal"), "{log}");
    assert!(
        log.contains("main.cf, line ")
            && log.contains("virtual_alias_maps: table hash:")
            && log.contains("deferred until it can be read"),
        "{log}"
    );

    std::fs::write(&virt, "alias@remote.example far@remote.example\n").unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "router reloaded", || {
        inst.log().contains("tables reloaded").then_some(())
    });
    assert_eq!(inst.pids("router"), routers, "the same router, reloaded");
    let (code, out) = send("alias@remote.example");
    assert_eq!(code, 0, "{out}");
    let line = inst.wait_log(
        20,
        "to=<far@remote.example>, orig_to=<alias@remote.example>",
    );
    assert!(line.contains("status=sent"), "{line}");
}

/// A transport_maps file that disappears under queued mail: the mail is
/// deferred ("transport_maps lookup error"), not bounced, and delivered
/// once the file is back and sluice reload has run. Before: the reload
/// kept the old tables, but the next start of the router was fatal.
#[test]
fn a_missing_transport_file_defers_queued_mail_until_it_exists() {
    use sluice_suite::{free_port, smtp_sink, swaks};
    let sink_port = free_port();
    let (mut inst, port) = relay_to_sink(
        sink_port,
        "minimal_backoff_time = 1s\nmaximal_backoff_time = 1s\nqueue_run_delay = 1s\n",
    );
    let transport = inst.root().join("transport");
    std::fs::write(&transport, "").unwrap();
    append_main(
        &inst,
        &format!("transport_maps = hash:{}\n", transport.display()),
    );
    inst.start();
    inst.wait_port(port);
    let server = format!("127.0.0.1:{port}");
    // Queued while the sink is down.
    let (code, out) = swaks(&[
        "--server",
        &server,
        "--from",
        "a@example.com",
        "--to",
        "far@remote.example",
    ]);
    assert_eq!(code, 0, "{out}");
    inst.wait_log(20, "to=<far@remote.example>, relay=none");
    std::fs::remove_file(&transport).unwrap();
    // A new router, as after a restart: it must start and defer.
    let routers = inst.pids("router");
    assert_eq!(routers.len(), 1);
    let _ = std::process::Command::new("kill")
        .arg(routers[0].to_string())
        .status();
    let sink = smtp_sink(&format!("127.0.0.1:{sink_port}"), &[]);
    let line = inst.wait_log(30, "transport_maps lookup error");
    assert!(line.contains("status=deferred"), "{line}");
    let log = inst.log();
    assert!(
        !log.contains("fatal") && !log.contains("status=bounced"),
        "{log}"
    );
    assert_eq!(sluice_suite::dumped(&sink), 0);

    std::fs::write(&transport, "").unwrap();
    assert!(inst.sluice(&["reload"]).status.success());
    wait_for(10, "router reloaded", || {
        inst.log().contains("tables reloaded").then_some(())
    });
    // The lookup failure waits ROUTE_RETRY (Postfix's 5 minutes) as any
    // deferral: sluice queue flush sends it now.
    assert!(inst.sluice(&["queue", "flush"]).status.success());
    let line = inst.wait_log(30, "to=<far@remote.example>, relay=127.0.0.1");
    assert!(line.contains("status=sent"), "{line}");
}
