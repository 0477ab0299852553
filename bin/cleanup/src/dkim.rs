//! cleanup's side of DKIM signing: which messages are signed, with which
//! key, and the signature's place in the message file.
//!
//! A message is signed when its origin is one `dkim_signing_origins`
//! lists and the signing table has a key for its From: address or domain.
//! The signature is started once the header block is final (with what
//! cleanup added), and its bytes are reserved at the front of the draft;
//! the body is hashed as it is written; at End the signature is made and
//! written into the reserved place. A signing table that names a key the
//! key table lacks is logged and the message goes unsigned.

use ::dkim::{from_address, Canon, Keys, Settings, Signing};
use daemon::msg_warn;
use ipc::cleanup::Origin;
use mail::{Envelope, QueueId};

/// The DKIM configuration, keys loaded.
#[derive(Debug)]
pub struct Dkim {
    keys: Keys,
    settings: Settings,
    origins: Vec<String>,
}

impl Dkim {
    /// From main.cf; `None` when nothing is signed. A key that cannot be
    /// read is an error naming the table, key name and file.
    pub fn from_config(cfg: &config::Config) -> Result<Option<Dkim>, String> {
        let Some(keys) = Keys::open(&cfg.maps("dkim_signing_table"), &cfg.maps("dkim_key_table"))?
        else {
            return Ok(None);
        };
        let canon = cfg.str("dkim_canonicalization").to_ascii_lowercase();
        let (h, b) = canon.split_once('/').unwrap_or(("relaxed", "relaxed"));
        let c = |s: &str| {
            if s == "simple" {
                Canon::Simple
            } else {
                Canon::Relaxed
            }
        };
        Ok(Some(Dkim {
            keys,
            settings: Settings {
                header_canon: c(h),
                body_canon: c(b),
                signed: cfg.list("dkim_signed_headers"),
                oversigned: cfg.list("dkim_oversigned_headers"),
            },
            origins: cfg
                .list("dkim_signing_origins")
                .iter()
                .map(|o| o.to_ascii_lowercase())
                .collect(),
        }))
    }

    /// Whether main.cf configures signing (then a reload retires cleanup).
    pub fn configured(cfg: &config::Config) -> bool {
        !cfg.maps("dkim_signing_table").is_empty()
    }

    fn origin_signs(&self, origin: &Origin, env: &Envelope) -> bool {
        self.origins.iter().any(|o| match o.as_str() {
            "all" => true,
            "mynetworks" => matches!(
                origin,
                Origin::Smtp {
                    mynetworks: true,
                    ..
                }
            ),
            "sasl_authenticated" => env.auth.is_some(),
            "local" => matches!(origin, Origin::Local { .. }),
            _ => false,
        })
    }

    /// The signature to make over a message with this final header block
    /// (fields with CRLF, no empty line), if it is to be signed.
    pub fn start(
        &self,
        id: QueueId,
        origin: &Origin,
        env: &Envelope,
        header_block: &[u8],
        time: u64,
    ) -> Option<Signing> {
        if !self.origin_signs(origin, env) {
            return None;
        }
        let from = from_address(header_block)?;
        match self.keys.lookup(&from) {
            Ok(Some(spec)) => Some(Signing::start(
                spec.clone(),
                &self.settings,
                header_block,
                time,
            )),
            Ok(None) => None,
            Err(e) => {
                msg_warn!("{id}: not signed: {e}");
                None
            }
        }
    }
}
