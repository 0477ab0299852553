//! A private test network of Linux network namespaces: a bridge in our
//! own namespace, and hosts (a namespace each, joined to the bridge by a
//! veth pair) with addresses in 10.77.N.0/24, where N is this network's
//! number, unique among the networks alive on the machine.
//!
//! The bridge itself has 10.77.N.1, so the test process reaches every
//! host directly (smtp-source to an instance, the sink's wake-up). A host
//! can own a *shared source address* (10.78.N.2, on its loopback) that
//! several hosts bind at once, as Halon's instances all choose any
//! `localip` of the egress proxies: its namespace translates it (nftables
//! SNAT) to the host's own address on the way out, so that replies come
//! back to the right host and a server sees which host connected.
//!
//! The network is claimed by creating its bridge (`slbrN`, which fails if
//! another test holds N) whose alias names the owning process; a network
//! left by a killed test run is removed when its number is claimed again.
//! Dropping a [`Net`] removes its veths, namespaces and bridge; drop the
//! processes running in it first. Needs root, ip(8) and nft(8); without
//! them, [`Net::claim`] fails the test saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The test network; see the module header.
pub struct Net {
    /// Its number: the third octet of its addresses.
    pub n: u8,
    bridge: String,
    namespaces: Vec<String>,
    links: Vec<String>,
}

/// Runs `ip ARGS`, failing the test with its error.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip(8) (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Runs `ip ARGS`, ignoring failure (teardown).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Removes whatever a network numbered `n` left (a run killed before its
/// guard could drop it).
fn remove_stale(n: u8) {
    let prefix = format!("sl{n}-");
    if let Ok(names) = std::fs::read_dir("/run/netns") {
        for e in names.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                ip_quiet(&["netns", "del", &name]);
            }
        }
    }
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let own = format!("sl{n}h");
    for line in out.lines() {
        if let Some(name) = line.split(": ").nth(1) {
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with(&own) {
                ip_quiet(&["link", "del", name]);
            }
        }
    }
    ip_quiet(&["link", "del", &format!("slbr{n}")]);
}

/// The pid named by a bridge's alias (`sluice-test pid=N`).
fn owner(bridge: &str) -> Option<i32> {
    let out = Command::new("ip")
        .args(["-o", "link", "show", bridge])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("alias sluice-test pid=")? + "alias sluice-test pid=".len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Net {
    /// Claims a free network number and makes its bridge.
    pub fn claim() -> Net {
        crate::require_root("it makes network namespaces, veth pairs and a bridge");
        for tool in ["ip", "nft", "nsenter"] {
            let found = Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {tool}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                found,
                "{tool} is not installed (scripts/test installs iproute2, nftables and util-linux)"
            );
        }
        // Tests of one process start at different numbers, processes at
        // numbers spread by their pid.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let me = std::process::id();
        let start = me.wrapping_mul(37) + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for i in 0..200u32 {
            let n = (20 + (start.wrapping_add(i) % 200)) as u8;
            let bridge = format!("slbr{n}");
            let made = Command::new("ip")
                .args(["link", "add", &bridge, "type", "bridge"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !made {
                // A bridge without its alias yet is being made by another
                // test: only one whose owner is gone is stale.
                if owner(&bridge).is_some_and(|pid| !crate::running(pid)) {
                    remove_stale(n);
                }
                continue;
            }
            ip(&[
                "link",
                "set",
                &bridge,
                "alias",
                &format!("sluice-test pid={me}"),
            ]);
            let net = Net {
                n,
                bridge: bridge.clone(),
                namespaces: Vec::new(),
                links: Vec::new(),
            };
            ip(&["addr", "add", &format!("10.77.{n}.1/24"), "dev", &bridge]);
            ip(&["link", "set", &bridge, "up"]);
            return net;
        }
        panic!("no free test network number (every 10.77.N.0/24 in 20..220 is in use)");
    }

    /// Address `h` of this network (10.77.N.h).
    pub fn addr(&self, h: u8) -> String {
        format!("10.77.{}.{h}", self.n)
    }

    /// The shared source address hosts may own (10.78.N.2).
    pub fn shared_source(&self) -> String {
        format!("10.78.{}.2", self.n)
    }

    /// The `ip netns` name of host `h`.
    pub fn ns(&self, h: u8) -> String {
        format!("sl{}-{h}", self.n)
    }

    /// The file of host `h`'s namespace (for setns and nsenter).
    pub fn ns_path(&self, h: u8) -> PathBuf {
        Path::new("/run/netns").join(self.ns(h))
    }

    /// Makes host `h`: a namespace with loopback up and `eth0` on the
    /// bridge with address `h`, its default route through the bridge.
    pub fn host(&mut self, h: u8) -> String {
        let ns = self.ns(h);
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let outer = format!("sl{}h{h}", self.n);
        let inner = format!("sl{}h{h}p", self.n);
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        self.links.push(outer.clone());
        ip(&["link", "set", &outer, "master", &self.bridge, "up"]);
        ip(&["link", "set", &inner, "netns", &ns]);
        ip(&["-n", &ns, "link", "set", &inner, "name", "eth0"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", self.addr(h)),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "route", "add", "default", "via", &self.addr(1)]);
        ns
    }

    /// Gives host `h` address `extra` of this network too.
    pub fn add_addr(&self, h: u8, extra: u8) {
        ip(&[
            "-n",
            &self.ns(h),
            "addr",
            "add",
            &format!("{}/24", self.addr(extra)),
            "dev",
            "eth0",
        ]);
    }

    /// Gives host `h` the shared source address, translated to its own
    /// address on the way out (see the module header).
    pub fn own_shared_source(&self, h: u8) {
        let ns = self.ns(h);
        let shared = self.shared_source();
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{shared}/32"),
            "dev",
            "lo",
        ]);
        let rules = format!(
            "add table ip sluice_test\n\
             add chain ip sluice_test post {{ type nat hook postrouting priority 100 ; }}\n\
             add rule ip sluice_test post ip saddr {shared} snat to {}\n",
            self.addr(h)
        );
        let mut nft = self
            .exec(h, "nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nft(8) runs");
        use std::io::Write;
        nft.stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        let out = nft.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "nft in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// A command for `program` run in host `h`'s namespace, as root.
    pub fn exec(&self, h: u8, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.ns_path(h).display()))
            .arg("--")
            .arg(program);
        cmd
    }

    /// dnsmasq on port 53 of host `h` (its address `h`) with `records`
    /// only (`--mx-host=…`, `--host-record=…`); killed when dropped.
    pub fn dnsmasq(&self, h: u8, records: &[&str]) -> crate::Kill {
        let bin = "/usr/sbin/dnsmasq";
        assert!(
            Path::new(bin).exists(),
            "{bin} is not installed (scripts/test installs dnsmasq-base)"
        );
        // nsenter does not fork for a network namespace: the child is dnsmasq.
        let child = self
            .exec(h, bin)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--pid-file=",
                "--local=/test/",
                "--local-ttl=60",
                "--user=root",
                "--port=53",
            ])
            .arg(format!("--listen-address={}", self.addr(h)))
            .args(records)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dnsmasq");
        let kill = crate::Kill(child);
        let addr = self.addr(h);
        crate::wait_for(10, "dnsmasq listening", || {
            std::net::TcpStream::connect((addr.as_str(), 53))
                .ok()
                .map(drop)
        });
        kill
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for l in self.links.drain(..) {
            ip_quiet(&["link", "del", &l]);
        }
        for ns in self.namespaces.drain(..) {
            ip_quiet(&["netns", "del", &ns]);
        }
        ip_quiet(&["link", "del", &self.bridge]);
    }
}
