//! A bare SMTP client for tests that time single replies or pipeline
//! commands exactly as written (swaks and smtplib do neither).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One client connection.
pub struct SmtpClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl SmtpClient {
    /// Connects to 127.0.0.1:`port`; returns the client and the greeting.
    pub fn connect(port: u16) -> (SmtpClient, String) {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to smtpd");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.set_nodelay(true).unwrap();
        let mut c = SmtpClient {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        };
        let greeting = c.reply();
        (c, greeting)
    }

    /// Sends raw bytes (one or more commands, CRLF included).
    pub fn send(&mut self, bytes: &str) {
        self.writer.write_all(bytes.as_bytes()).expect("write");
    }

    /// Reads one whole reply (every line of a multi-line one).
    pub fn reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).expect("read a reply");
            assert!(n > 0, "connection closed; replies so far: {all:?}");
            all.push_str(&line);
            if line.len() < 4 || line.as_bytes()[3] == b' ' {
                return all;
            }
        }
    }

    /// Sends one command and returns its reply and how long it took.
    pub fn timed(&mut self, command: &str) -> (String, Duration) {
        let start = Instant::now();
        self.send(&format!("{command}\r\n"));
        let r = self.reply();
        (r, start.elapsed())
    }

    /// Sends each command, asserting its reply starts with its code;
    /// the command whose reply took longest, and how long.
    pub fn slowest<'a>(&mut self, script: &[(&'a str, &str)]) -> (&'a str, Duration) {
        let mut slowest = ("", Duration::ZERO);
        for &(cmd, code) in script {
            let (r, took) = self.timed(cmd);
            assert!(r.starts_with(code), "{cmd}: {r}");
            if took > slowest.1 {
                slowest = (cmd, took);
            }
        }
        slowest
    }

    /// Sends a command and asserts its reply starts with `code`.
    pub fn expect(&mut self, command: &str, code: &str) -> String {
        let (r, _) = self.timed(command);
        assert!(r.starts_with(code), "{command}: {r}");
        r
    }
}
