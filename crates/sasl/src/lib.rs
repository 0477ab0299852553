//! SASL for smtpd: the client side of Dovecot's authentication protocol.
//!
//! smtpd does not check passwords itself; as Postfix with
//! `smtpd_sasl_type = dovecot`, it relays the SASL exchange to Dovecot's
//! auth server over a Unix socket. [`dovecot::Client`] is that protocol,
//! sans-IO: bytes in, bytes out, events for the shell.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dovecot;

/// True when `s` is base64 as SASL exchanges carry it (RFC 4648 alphabet,
/// padding only at the end, a multiple of four long); the empty string is
/// valid (an empty response).
pub fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return false;
    }
    b[..b.len() - pad]
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_shapes() {
        for ok in ["", "AGFsaWNlAHNlY3JldA==", "YWxpY2U=", "YWJj", "+/+/"] {
            assert!(super::is_base64(ok), "{ok}");
        }
        for bad in [
            "YWxpY2U", "YW=jYQ==", "a===", "YW\tj", "YWJj\0", "éééé", "*",
        ] {
            assert!(!super::is_base64(bad), "{bad}");
        }
    }
}
