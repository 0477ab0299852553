//! smtp(8)'s settings from main.cf, and the trust anchors read at start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use daemon::{msg_warn, Context};
use smtp_proto::client_session::{ClientConfig, ClientTls};

/// `smtp_tls_security_level`, as Postfix defines the levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsLevel {
    /// No STARTTLS.
    None,
    /// STARTTLS when offered, any certificate.
    May,
    /// STARTTLS required, any certificate.
    Encrypt,
    /// STARTTLS required, chain verified, names per `smtp_tls_verify_cert_match`.
    Verify,
    /// STARTTLS required, chain verified, names per `smtp_tls_secure_cert_match`.
    Secure,
    /// Opportunistic DANE: TLSA records where DNSSEC validated them, else `may`.
    Dane,
    /// Mandatory DANE: no delivery without usable validated TLSA records.
    DaneOnly,
}

impl TlsLevel {
    /// Whether the server's certificate must be verified.
    pub fn authenticates(self) -> bool {
        matches!(self, TlsLevel::Verify | TlsLevel::Secure)
    }
}

/// One `smtp_tls_*_cert_match` strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertMatch {
    /// The server's host name (the MX name or the relay's name).
    Hostname,
    /// The next-hop domain.
    Nexthop,
    /// Any name below the next-hop domain.
    DotNexthop,
}

/// Settings from main.cf.
pub struct Settings {
    /// The session engine's settings.
    pub client: ClientConfig,
    /// TLS client configuration when TLS may be used.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `smtp_tls_security_level`.
    pub tls_level: TlsLevel,
    /// Trust anchors to class server certificates with (always there for
    /// verify and secure; for may and encrypt only to log Trusted/Untrusted).
    pub roots: Option<Arc<rustls::RootCertStore>>,
    /// The names a certificate must match at this level.
    pub cert_match: Vec<CertMatch>,
    /// `myhostname`: what an LMTP server on a Unix socket is called in
    /// the logs and notices (`myhostname[path]`, as Postfix's lmtp).
    pub myhostname: String,
    /// `smtp_bind_address`.
    pub bind: Option<std::net::IpAddr>,
    /// `smtp_connect_timeout`.
    pub connect_timeout: Duration,
    /// `smtp_helo_timeout`.
    pub helo_timeout: Duration,
    /// `smtp_rcpt_timeout` (and MAIL).
    pub cmd_timeout: Duration,
    /// `smtp_data_xfer_timeout`.
    pub xfer_timeout: Duration,
    /// `smtp_data_done_timeout`.
    pub done_timeout: Duration,
    /// Where message files are.
    pub queue_root: PathBuf,
    /// The delivery log line's settings.
    pub logger: agent::Logger,
    /// Speak LMTP (lmtp(8)).
    pub lmtp: bool,
    /// `smtp_mta_sts`: apply the policies router(8) cached.
    pub mta_sts: bool,
    /// `smtp_proxy` (`<transport>_proxy`): the egress proxies; none for lmtp.
    pub proxies: Vec<std::net::SocketAddr>,
}

/// The parameters lmtp(8) reads in place of smtp(8)'s, as Postfix's
/// lmtp does.
const LMTP_NAMES: [(&str, &str); 9] = [
    ("smtp_helo_name", "lmtp_lhlo_name"),
    ("smtp_bind_address", "lmtp_bind_address"),
    ("smtp_connect_timeout", "lmtp_connect_timeout"),
    ("smtp_helo_timeout", "lmtp_lhlo_timeout"),
    ("smtp_rcpt_timeout", "lmtp_rcpt_timeout"),
    ("smtp_data_xfer_timeout", "lmtp_data_xfer_timeout"),
    ("smtp_data_done_timeout", "lmtp_data_done_timeout"),
    ("smtp_discard_ehlo_keywords", "lmtp_discard_lhlo_keywords"),
    ("smtp_line_length_limit", "lmtp_line_length_limit"),
];

/// The name of parameter `smtp_name` for smtp(8), or for lmtp(8) when `lmtp`.
fn param(smtp_name: &'static str, lmtp: bool) -> &'static str {
    LMTP_NAMES
        .iter()
        .find(|(s, _)| lmtp && *s == smtp_name)
        .map_or(smtp_name, |(_, l)| l)
}

/// `smtp_tls_security_level` of transport `service`.
pub fn tls_level(cfg: &config::Config, service: &str) -> TlsLevel {
    match cfg.transport(service).choice("smtp_tls_security_level") {
        "may" => TlsLevel::May,
        "encrypt" => TlsLevel::Encrypt,
        "verify" => TlsLevel::Verify,
        "secure" => TlsLevel::Secure,
        "dane" => TlsLevel::Dane,
        "dane-only" => TlsLevel::DaneOnly,
        _ => TlsLevel::None,
    }
}

/// Privileged initialisation (before any chroot): the trust anchors.
///
/// A CA file that cannot be read is fatal at verify and secure, where
/// nothing could be delivered without it; at may and encrypt it only costs
/// the Trusted/Untrusted distinction in the logs.
pub fn load_roots(ctx: &Context) -> Result<Option<Arc<rustls::RootCertStore>>, String> {
    let level = tls_level(&ctx.config, &ctx.args.service);
    let mta_sts = ctx.config.transport(&ctx.args.service).bool("smtp_mta_sts");
    if level == TlsLevel::None && !mta_sts {
        return Ok(None);
    }
    let file = ctx
        .config
        .transport(&ctx.args.service)
        .str("smtp_tls_CAfile");
    let path = if file.is_empty() {
        tls::SYSTEM_CA_FILE.to_string()
    } else {
        file
    };
    match tls::load_trust_anchors(std::path::Path::new(&path)) {
        Ok(r) => Ok(Some(r)),
        Err(e) if level.authenticates() => Err(format!(
            "smtp_tls_CAfile: {e} (needed by smtp_tls_security_level = {})",
            if level == TlsLevel::Verify {
                "verify"
            } else {
                "secure"
            }
        )),
        Err(e) if mta_sts => {
            msg_warn!("smtp_tls_CAfile: {e}: MTA-STS policies in enforce mode defer all mail");
            Ok(None)
        }
        Err(e) => {
            msg_warn!("smtp_tls_CAfile: {e}: server certificates are not checked");
            Ok(None)
        }
    }
}

impl Settings {
    /// Reads the settings of transport `service` (lmtp(8)'s names when `lmtp`).
    pub fn from(
        cfg: &config::Config,
        chrooted: bool,
        service: &str,
        roots: Option<Arc<rustls::RootCertStore>>,
        lmtp: bool,
    ) -> Result<Settings, String> {
        let t = cfg.transport(service);
        let n = |name| param(name, lmtp);
        let tls_level = tls_level(cfg, service);
        let mta_sts = t.bool("smtp_mta_sts");
        let tls = match tls_level {
            TlsLevel::None => ClientTls::Disabled,
            // Per connection, from the host's TLSA records (crate::dane).
            TlsLevel::May | TlsLevel::Dane | TlsLevel::DaneOnly => ClientTls::Opportunistic,
            _ => ClientTls::Required,
        };
        let dnssec = cfg.choice("smtp_dns_support_level") == "dnssec";
        if matches!(tls_level, TlsLevel::Dane | TlsLevel::DaneOnly) && !dnssec && !lmtp {
            // As Postfix: without validated DNS there are no TLSA records.
            msg_warn!(
                "{service}: smtp_tls_security_level = {} needs smtp_dns_support_level = dnssec: {}",
                t.choice("smtp_tls_security_level"),
                if tls_level == TlsLevel::Dane {
                    "TLS is opportunistic (may) for every host"
                } else {
                    "all mail is deferred"
                }
            );
        }
        let match_param = match tls_level {
            TlsLevel::Secure => "smtp_tls_secure_cert_match",
            _ => "smtp_tls_verify_cert_match",
        };
        // The values were checked at load against the table's words.
        let cert_match = t
            .list(match_param)
            .iter()
            .filter_map(|w| match w.to_ascii_lowercase().as_str() {
                "hostname" => Some(CertMatch::Hostname),
                "nexthop" => Some(CertMatch::Nexthop),
                "dot-nexthop" => Some(CertMatch::DotNexthop),
                _ => None,
            })
            .collect::<Vec<_>>();
        if tls_level.authenticates() && cert_match.is_empty() {
            return Err(format!(
                "{match_param} is empty: no certificate name could match"
            ));
        }
        let bind = cfg.str(n("smtp_bind_address"));
        let bind =
            if bind.is_empty() {
                None
            } else {
                Some(bind.parse().map_err(|_| {
                    format!("{} = {bind}: not an IP address", n("smtp_bind_address"))
                })?)
            };
        Ok(Settings {
            client: ClientConfig {
                helo_name: cfg.str(n("smtp_helo_name")),
                tls,
                discard_ehlo_keywords: t.list(n("smtp_discard_ehlo_keywords")),
                line_length_limit: usize::try_from(t.int(n("smtp_line_length_limit"))).unwrap_or(0),
                mime_output_conversion: !t.bool("disable_mime_output_conversion"),
                ..ClientConfig::default()
            },
            // Certificates are checked after the handshake (as Postfix
            // does), so that may and encrypt can still say what they got.
            // MTA-STS may want STARTTLS whatever the level says.
            tls: (tls != ClientTls::Disabled || mta_sts).then(tls::insecure_client_config),
            tls_level,
            roots,
            cert_match,
            myhostname: cfg.str("myhostname"),
            bind,
            connect_timeout: t.time(n("smtp_connect_timeout")),
            helo_timeout: t.time(n("smtp_helo_timeout")),
            cmd_timeout: t.time(n("smtp_rcpt_timeout")),
            xfer_timeout: t.time(n("smtp_data_xfer_timeout")),
            done_timeout: t.time(n("smtp_data_done_timeout")),
            queue_root: if chrooted {
                PathBuf::from("/")
            } else {
                PathBuf::from(cfg.str("queue_directory"))
            },
            logger: agent::Logger::from_config(cfg),
            lmtp: false,
            mta_sts,
            proxies: t.addrs("default_proxy"),
        })
    }

    /// The settings for LMTP when `lmtp`: LHLO and no TLS (a local
    /// mailbox server; Postfix's lmtp_tls_security_level is none too).
    pub fn speaking(mut self, lmtp: bool) -> Settings {
        if lmtp {
            self.lmtp = true;
            self.client.lmtp = true;
            self.client.tls = ClientTls::Disabled;
            self.tls = None;
            self.tls_level = TlsLevel::None;
            self.roots = None;
            self.mta_sts = false;
            // A mailbox server is this site's own: no egress proxy.
            self.proxies.clear();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(main_cf: &str, lmtp: bool) -> Settings {
        let loaded = config::Config::with_hostname("out.example")
            .with_text(main_cf, std::path::Path::new("main.cf"), &[])
            .unwrap();
        let service = if lmtp { "lmtp" } else { "smtp" };
        Settings::from(&loaded.config, false, service, None, lmtp)
            .unwrap()
            .speaking(lmtp)
    }

    #[test]
    fn lmtp_reads_the_lmtp_parameters() {
        let main = "smtp_helo_name = helo.example\nlmtp_lhlo_name = lhlo.example\n\
                    smtp_connect_timeout = 11s\nlmtp_connect_timeout = 7s\n\
                    lmtp_lhlo_timeout = 9s\nlmtp_rcpt_timeout = 8s\n\
                    lmtp_data_xfer_timeout = 6s\nlmtp_data_done_timeout = 5s\n\
                    lmtp_bind_address = 127.0.0.2\nlmtp_discard_lhlo_keywords = pipelining\n\
                    lmtp_line_length_limit = 300\n";
        let l = settings(main, true);
        assert_eq!(l.client.helo_name, "lhlo.example");
        assert_eq!(l.connect_timeout, Duration::from_secs(7));
        assert_eq!(l.helo_timeout, Duration::from_secs(9));
        assert_eq!(l.cmd_timeout, Duration::from_secs(8));
        assert_eq!(l.xfer_timeout, Duration::from_secs(6));
        assert_eq!(l.done_timeout, Duration::from_secs(5));
        assert_eq!(l.bind, Some("127.0.0.2".parse().unwrap()));
        assert_eq!(l.client.discard_ehlo_keywords, ["pipelining"]);
        assert_eq!(l.client.line_length_limit, 300);
        let s = settings(main, false);
        assert_eq!(s.client.line_length_limit, 998, "Postfix's default");
        assert_eq!(s.client.helo_name, "helo.example");
        assert_eq!(s.connect_timeout, Duration::from_secs(11));
        assert_eq!(s.bind, None);
        assert!(s.client.discard_ehlo_keywords.is_empty());
        assert!(s.proxies.is_empty());
        assert!(s.client.mime_output_conversion, "Postfix's default");
        assert!(
            !settings("disable_mime_output_conversion = yes\n", false)
                .client
                .mime_output_conversion
        );
        let proxied = "default_proxy = 127.0.0.1:3025\nsmtp_proxy = 127.0.0.1:3026 [::1]:3027\n";
        let s = settings(proxied, false);
        let want: Vec<std::net::SocketAddr> = vec![
            "127.0.0.1:3026".parse().unwrap(),
            "[::1]:3027".parse().unwrap(),
        ];
        assert_eq!(s.proxies, want, "smtp_proxy over default_proxy");
        assert!(settings(proxied, true).proxies.is_empty(), "lmtp uses none");
        let l = settings("", true);
        assert_eq!(l.client.helo_name, "out.example", "$myhostname by default");
        let bad = config::Config::with_hostname("out.example")
            .with_text(
                "lmtp_bind_address = nowhere\n",
                std::path::Path::new("main.cf"),
                &[],
            )
            .unwrap();
        let e = Settings::from(&bad.config, false, "lmtp", None, true)
            .err()
            .unwrap();
        assert_eq!(e, "lmtp_bind_address = nowhere: not an IP address");
    }
}
