//! The wire format, through hickory-proto: build queries, read answers.
//!
//! Queries ask for recursion and carry EDNS0 with a 1232-byte payload
//! (the DNS flag day 2020 value, which avoids IP fragmentation). With
//! DNSSEC on (`smtp_dns_support_level = dnssec`) they also set the DO bit
//! and the AD bit (RFC 6840 5.7), so that a validating resolver says in
//! its answer's AD bit whether it validated it. Reading an
//! answer follows its CNAME chain from the name asked, collects the
//! records of the type asked at the end of the chain, and takes the TTL
//! (the smallest one; for negative answers the SOA minimum, RFC 2308).
//! A message that does not decode is an error, never a panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

/// The EDNS0 UDP payload size we advertise.
pub const EDNS_PAYLOAD: u16 = 1232;

/// The record types the resolver asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QType {
    /// IPv4 addresses.
    A,
    /// IPv6 addresses.
    Aaaa,
    /// Mail exchangers.
    Mx,
    /// Text records (MTA-STS and TLSRPT policies).
    Txt,
    /// DANE TLSA records (RFC 6698).
    Tlsa,
}

impl QType {
    fn record_type(self) -> RecordType {
        match self {
            QType::A => RecordType::A,
            QType::Aaaa => RecordType::AAAA,
            QType::Mx => RecordType::MX,
            QType::Txt => RecordType::TXT,
            QType::Tlsa => RecordType::TLSA,
        }
    }
}

/// One record of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Data {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// An MX: preference and exchange (lower case, no trailing dot; `""` is the root).
    Mx(u16, String),
    /// A TXT record: its character-strings joined, as RFC 8461 and RFC
    /// 8460 read them (not valid UTF-8 is replaced, never an error).
    Txt(String),
    /// A TLSA record: certificate usage, selector, matching type, data.
    Tlsa(u8, u8, u8, Vec<u8>),
}

/// What a response said, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Records (possibly none: NODATA) at the end of the CNAME chain.
    Records {
        /// The name the records belong to (differs from the query's after a CNAME).
        name: String,
        /// The records of the type asked.
        data: Vec<Data>,
        /// Seconds the answer may be cached.
        ttl: u32,
        /// The AD bit.
        authentic: bool,
    },
    /// NXDOMAIN, with the negative TTL.
    NxDomain {
        /// Seconds the denial may be cached.
        ttl: u32,
    },
    /// The answer was cut: ask again over TCP.
    Truncated,
    /// SERVFAIL, REFUSED and the like: try another server.
    ServerError(String),
}

/// Builds a query message; `dnssec` asks for the AD bit (DO and AD set).
pub(crate) fn query(id: u16, name: &str, qtype: QType, dnssec: bool) -> Option<Vec<u8>> {
    let mut n = Name::from_utf8(name).ok()?;
    n.set_fqdn(true);
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.metadata.authentic_data = dnssec;
    m.add_query(Query::query(n, qtype.record_type()));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    edns.set_dnssec_ok(dnssec);
    m.set_edns(edns);
    m.to_vec().ok()
}

/// Checks that a name can be asked for (used before anything is sent).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && Name::from_utf8(name).is_ok()
}

/// The DNS id of a message, if it is long enough to have one.
pub(crate) fn message_id(payload: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*payload.first()?, *payload.get(1)?]))
}

/// Lower case, no trailing dot: how names are compared and cached.
pub(crate) fn norm(name: &str) -> String {
    name.trim_end_matches('.').to_lowercase()
}

fn name_str(n: &Name) -> String {
    norm(&n.to_utf8())
}

/// Reads a response to query `(id, name, qtype)`; `None` when it is not
/// one (wrong id, wrong question, not a response, undecodable).
pub(crate) fn read(payload: &[u8], id: u16, name: &str, qtype: QType) -> Option<Reply> {
    let m = Message::from_vec(payload).ok()?;
    if m.metadata.id != id || m.metadata.message_type != MessageType::Response {
        return None;
    }
    // A response without the question is accepted only for errors, which
    // some servers send bare; with a question, it must be ours.
    match m.queries.first() {
        Some(q) if q.query_type() != qtype.record_type() || name_str(q.name()) != norm(name) => {
            return None
        }
        None if m.metadata.response_code == ResponseCode::NoError => return None,
        _ => {}
    }
    if m.metadata.truncation {
        return Some(Reply::Truncated);
    }
    let neg_ttl = || {
        m.authorities
            .iter()
            .find_map(|r| match &r.data {
                RData::SOA(soa) => Some(soa.minimum.min(r.ttl)),
                _ => None,
            })
            // No SOA: RFC 2308 says not to cache; a short time still absorbs bursts.
            .unwrap_or(30)
    };
    match m.metadata.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Some(Reply::NxDomain { ttl: neg_ttl() }),
        other => return Some(Reply::ServerError(format!("{other}"))),
    }
    let mut current = norm(name);
    let mut ttl = u32::MAX;
    // Follow the chain inside this answer, bounded so that a CNAME loop in
    // a hostile answer ends.
    for _ in 0..16 {
        let next = m.answers.iter().find_map(|r| match &r.data {
            RData::CNAME(c) if name_str(&r.name) == current => Some((name_str(&c.0), r.ttl)),
            _ => None,
        });
        match next {
            Some((target, t)) if target != current => {
                ttl = ttl.min(t);
                current = target;
            }
            _ => break,
        }
    }
    let mut data = Vec::new();
    for r in &m.answers {
        if name_str(&r.name) != current {
            continue;
        }
        let d = match (&r.data, qtype) {
            (RData::A(a), QType::A) => Data::A(a.0),
            (RData::AAAA(a), QType::Aaaa) => Data::Aaaa(a.0),
            (RData::MX(mx), QType::Mx) => Data::Mx(mx.preference, name_str(&mx.exchange)),
            (RData::TXT(t), QType::Txt) => Data::Txt(
                t.txt_data
                    .iter()
                    .map(|c| String::from_utf8_lossy(c))
                    .collect(),
            ),
            (RData::TLSA(t), QType::Tlsa) => Data::Tlsa(
                t.cert_usage.into(),
                t.selector.into(),
                t.matching.into(),
                t.cert_data.clone(),
            ),
            _ => continue,
        };
        ttl = ttl.min(r.ttl);
        if !data.contains(&d) {
            data.push(d);
        }
    }
    if data.is_empty() {
        ttl = ttl.min(neg_ttl());
    }
    Some(Reply::Records {
        name: current,
        data,
        ttl,
        authentic: m.metadata.authentic_data,
    })
}

#[cfg(test)]
pub(crate) mod build {
    //! Builds responses for tests.
    use super::*;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME, MX, SOA};
    use hickory_proto::rr::Record;

    /// A response to `query` with the given records and code.
    pub fn response(
        query: &[u8],
        rcode: ResponseCode,
        answers: Vec<(&str, u32, RData)>,
        soa_min: Option<u32>,
    ) -> Vec<u8> {
        let q = Message::from_vec(query).unwrap();
        let mut m = Message::response(q.metadata.id, OpCode::Query);
        m.metadata.response_code = rcode;
        m.add_queries(q.queries.iter().cloned());
        for (n, ttl, d) in answers {
            m.add_answer(Record::from_rdata(Name::from_utf8(n).unwrap(), ttl, d));
        }
        if let Some(min) = soa_min {
            let soa = SOA::new(
                Name::from_utf8("ns.test").unwrap(),
                Name::from_utf8("h.test").unwrap(),
                1,
                1,
                1,
                1,
                min,
            );
            m.add_authority(Record::from_rdata(
                Name::from_utf8("test").unwrap(),
                3600,
                RData::SOA(soa),
            ));
        }
        m.to_vec().unwrap()
    }

    /// An A record's data.
    pub fn a(ip: &str) -> RData {
        RData::A(A(ip.parse().unwrap()))
    }
    /// An AAAA record's data.
    pub fn aaaa(ip: &str) -> RData {
        RData::AAAA(AAAA(ip.parse().unwrap()))
    }
    /// An MX record's data.
    pub fn mx(pref: u16, host: &str) -> RData {
        RData::MX(MX::new(pref, Name::from_utf8(host).unwrap()))
    }
    /// A TXT record's data, from its character-strings.
    pub fn txt(parts: &[&str]) -> RData {
        RData::TXT(hickory_proto::rr::rdata::TXT::new(
            parts.iter().map(|p| p.to_string()).collect(),
        ))
    }
    /// A CNAME record's data.
    pub fn cname(host: &str) -> RData {
        RData::CNAME(CNAME(Name::from_utf8(host).unwrap()))
    }
    /// A TLSA record's data.
    pub fn tlsa(usage: u8, selector: u8, matching: u8, data: &[u8]) -> RData {
        RData::TLSA(hickory_proto::rr::rdata::TLSA::new(
            usage.into(),
            selector.into(),
            matching.into(),
            data.to_vec(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    #[test]
    fn reads_answers_chains_and_errors() {
        let q = query(7, "Example.TEST", QType::Mx, false).unwrap();
        let r = response(
            &q,
            ResponseCode::NoError,
            vec![
                ("example.test", 300, mx(10, "mx1.example.test")),
                ("example.test", 60, mx(20, "mx2.example.test.")),
            ],
            None,
        );
        assert_eq!(
            read(&r, 7, "example.test", QType::Mx),
            Some(Reply::Records {
                name: "example.test".into(),
                data: vec![
                    Data::Mx(10, "mx1.example.test".into()),
                    Data::Mx(20, "mx2.example.test".into())
                ],
                ttl: 60,
                authentic: false
            })
        );
        assert_eq!(read(&r, 8, "example.test", QType::Mx), None, "wrong id");
        assert_eq!(read(&r, 7, "other.test", QType::Mx), None, "wrong name");
        assert_eq!(read(&r, 7, "example.test", QType::A), None, "wrong type");
        assert_eq!(
            read(&q, 7, "example.test", QType::Mx),
            None,
            "a query is not a response"
        );

        // RFC 8461 3.1: a record split in character-strings is read joined.
        let q = query(3, "_mta-sts.example.test", QType::Txt, false).unwrap();
        let r = response(
            &q,
            ResponseCode::NoError,
            vec![
                (
                    "_mta-sts.example.test",
                    300,
                    txt(&["v=STSv1; ", "id=20260101;"]),
                ),
                ("_mta-sts.example.test", 300, txt(&["other"])),
            ],
            None,
        );
        assert_eq!(
            read(&r, 3, "_mta-sts.example.test", QType::Txt),
            Some(Reply::Records {
                name: "_mta-sts.example.test".into(),
                data: vec![
                    Data::Txt("v=STSv1; id=20260101;".into()),
                    Data::Txt("other".into())
                ],
                ttl: 300,
                authentic: false
            })
        );

        let q = query(1, "www.test", QType::A, false).unwrap();
        let r = response(
            &q,
            ResponseCode::NoError,
            vec![
                ("www.test", 100, cname("web.test")),
                ("web.test", 50, a("192.0.2.1")),
            ],
            None,
        );
        assert!(
            matches!(read(&r, 1, "www.test", QType::A), Some(Reply::Records { name, data, ttl: 50, .. }) if name == "web.test" && data == vec![Data::A("192.0.2.1".parse().unwrap())])
        );
        let r = response(&q, ResponseCode::NXDomain, vec![], Some(120));
        assert_eq!(
            read(&r, 1, "www.test", QType::A),
            Some(Reply::NxDomain { ttl: 120 })
        );
        let r = response(&q, ResponseCode::ServFail, vec![], None);
        assert!(matches!(
            read(&r, 1, "www.test", QType::A),
            Some(Reply::ServerError(_))
        ));
        let r = response(&q, ResponseCode::NoError, vec![], Some(90));
        assert!(
            matches!(read(&r, 1, "www.test", QType::A), Some(Reply::Records { data, ttl: 90, .. }) if data.is_empty())
        );
        let r = response(
            &q,
            ResponseCode::NoError,
            vec![("www.test", 1, cname("www.test"))],
            None,
        );
        assert!(
            read(&r, 1, "www.test", QType::A).is_some(),
            "a self-CNAME ends"
        );
        let q6 = query(2, "v6.test", QType::Aaaa, false).unwrap();
        let r = response(
            &q6,
            ResponseCode::NoError,
            vec![("v6.test", 5, aaaa("2001:db8::1"))],
            None,
        );
        assert!(
            matches!(read(&r, 2, "v6.test", QType::Aaaa), Some(Reply::Records { data, .. }) if data.len() == 1)
        );
    }

    #[test]
    fn dnssec_queries_ask_for_the_ad_bit_and_tlsa_is_read() {
        let plain = Message::from_vec(&query(3, "x.test", QType::Mx, false).unwrap()).unwrap();
        assert!(!plain.metadata.authentic_data);
        assert!(!plain.edns.as_ref().unwrap().flags().dnssec_ok);
        let name = "_25._tcp.mx.example.test";
        let q = query(4, name, QType::Tlsa, true).unwrap();
        let m = Message::from_vec(&q).unwrap();
        assert!(m.metadata.authentic_data, "AD set (RFC 6840 5.7)");
        assert!(m.edns.as_ref().unwrap().flags().dnssec_ok, "DO set");
        let mut r = Message::from_vec(&response(
            &q,
            ResponseCode::NoError,
            vec![(name, 300, tlsa(3, 1, 1, &[0xab; 32]))],
            None,
        ))
        .unwrap();
        r.metadata.authentic_data = true;
        assert_eq!(
            read(&r.to_vec().unwrap(), 4, name, QType::Tlsa),
            Some(Reply::Records {
                name: name.into(),
                data: vec![Data::Tlsa(3, 1, 1, vec![0xab; 32])],
                ttl: 300,
                authentic: true
            })
        );
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = read(&bytes, message_id(&bytes).unwrap_or(0), "x.test", QType::Mx);
        }
    }
}
