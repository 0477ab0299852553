//! Listening addresses of inet services.

use std::net::SocketAddr;
use std::path::Path;

use config::{inet_addresses, parse_master_cf, AddressProblem, Config, ConfigError};

fn config(main_cf: &str) -> Config {
    Config::with_hostname("mail.example.com")
        .with_text(main_cf, Path::new("/etc/sluice/main.cf"), &[])
        .unwrap()
        .config
}

fn addrs(service: &str, main_cf: &str) -> Result<Vec<String>, ConfigError> {
    let text = format!("{service} inet n - n - - smtpd\n");
    let def = parse_master_cf(&text, Path::new("master.cf"))
        .unwrap()
        .remove(0);
    inet_addresses(&def, &config(main_cf)).map(|v| v.iter().map(SocketAddr::to_string).collect())
}

#[test]
fn address_forms() {
    for (service, main_cf, want) in [
        ("2525", "", &["0.0.0.0:2525", "[::]:2525"][..]),
        ("smtp", "", &["0.0.0.0:25", "[::]:25"]),
        ("submission", "inet_protocols = ipv4", &["0.0.0.0:587"]),
        ("smtps", "inet_protocols = ipv6", &["[::]:465"]),
        ("127.0.0.1:2525", "", &["127.0.0.1:2525"]),
        ("[::1]:2525", "", &["[::1]:2525"]),
        ("localhost:2525", "", &["127.0.0.1:2525", "[::1]:2525"]),
        ("localhost:smtp", "inet_protocols = ipv4", &["127.0.0.1:25"]),
        ("*:2525", "inet_protocols = ipv4", &["0.0.0.0:2525"]),
        (
            "2525",
            "inet_interfaces = loopback-only",
            &["127.0.0.1:2525", "[::1]:2525"],
        ),
        (
            "2525",
            "inet_interfaces = 192.0.2.1, [2001:db8::1] 192.0.2.1",
            &["192.0.2.1:2525", "[2001:db8::1]:2525"],
        ),
        (
            "2525",
            "inet_interfaces = localhost\ninet_protocols = ipv4",
            &["127.0.0.1:2525"],
        ),
    ] {
        assert_eq!(
            addrs(service, main_cf).unwrap(),
            want,
            "{service} / {main_cf}"
        );
    }
}

#[test]
fn address_errors() {
    for (service, main_cf, want) in [
        ("0", "", AddressProblem::UnknownPort("0".into())),
        ("65536", "", AddressProblem::UnknownPort("65536".into())),
        (
            "no-such-port",
            "",
            AddressProblem::UnknownPort("no-such-port".into()),
        ),
        (
            "mail.example.com:25",
            "",
            AddressProblem::HostName("mail.example.com".into()),
        ),
        ("::1:25", "", AddressProblem::Syntax("::1:25".into())),
        ("[::1]25", "", AddressProblem::Syntax("[::1]25".into())),
        (":25", "", AddressProblem::Syntax(":25".into())),
        (
            "[::1]:25",
            "inet_protocols = ipv4",
            AddressProblem::ProtocolDisabled("::1".into()),
        ),
        (
            "25",
            "inet_interfaces = eth0",
            AddressProblem::HostName("eth0".into()),
        ),
    ] {
        match addrs(service, main_cf) {
            Err(ConfigError::Address {
                problem,
                service: s,
                line,
                ..
            }) => {
                assert_eq!((problem, s.as_str(), line), (want, service, 1), "{service}")
            }
            other => panic!("{service}: {other:?}"),
        }
    }
    let err = addrs("mail.example.com:25", "").unwrap_err().to_string();
    assert_eq!(
        err,
        "/etc/sluice/master.cf, line 1: service \"mail.example.com:25\": host name \"mail.example.com\" is not allowed here: use an address"
    );
}
