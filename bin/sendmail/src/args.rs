//! sendmail's command line, with its historic spellings (`-oi`, `-bs`, `-f sender`
//! or `-fsender`), ignoring the options Postfix also ignores.

use std::path::PathBuf;

use mail::{Notify, Ret};

/// Longest `-V` envelope id Postfix's sendmail takes.
const MAX_ENVID: usize = 100;

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read a message from stdin and queue it (`-bm`, the default).
    Deliver,
    /// SMTP on stdin/stdout (`-bs`).
    Smtp,
    /// List the queue (`-bp`, mailq).
    ListQueue,
    /// Make deferred mail due (`-q`).
    Flush,
    /// Check and rebuild the aliases (`-bi`, newaliases).
    Newaliases,
}

/// Parsed arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The mode.
    pub mode: Mode,
    /// Take recipients from To:, Cc:, Bcc: (`-t`).
    pub from_headers: bool,
    /// A line with a single dot does not end the input (`-i`, `-oi`).
    pub ignore_dots: bool,
    /// Envelope sender (`-f`).
    pub sender: Option<String>,
    /// Full name for From: (`-F`).
    pub full_name: Option<String>,
    /// Configuration directory (`-C`).
    pub config_dir: Option<PathBuf>,
    /// Recipients on the command line.
    pub recipients: Vec<String>,
    /// NOTIFY for every recipient (`-N`).
    pub notify: Option<Notify>,
    /// RET (`-R`).
    pub ret: Option<Ret>,
    /// ENVID (`-V`).
    pub envid: Option<String>,
    /// Options ignored for a bad value, to print as warnings.
    pub warnings: Vec<String>,
}

impl Args {
    /// Parses the arguments of the program invoked as `name`: as Sendmail
    /// and Postfix, `mailq` is `sendmail -bp` and `newaliases` is
    /// `sendmail -bi` (the names the package links to sendmail).
    pub fn parse_as<I: IntoIterator<Item = String>>(name: &str, args: I) -> Result<Args, String> {
        let mode = match name {
            "mailq" => Mode::ListQueue,
            "newaliases" => Mode::Newaliases,
            _ => Mode::Deliver,
        };
        let mut a = Args {
            mode,
            from_headers: false,
            ignore_dots: false,
            sender: None,
            full_name: None,
            config_dir: None,
            recipients: Vec::new(),
            notify: None,
            ret: None,
            envid: None,
            warnings: Vec::new(),
        };
        let mut it = args.into_iter().peekable();
        while let Some(arg) = it.next() {
            if arg == "--" {
                a.recipients.extend(it.by_ref());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                a.recipients.push(arg);
                continue;
            }
            let mut value = |inline: &str, flag: &str| -> Result<String, String> {
                if !inline.is_empty() {
                    Ok(inline.to_string())
                } else {
                    it.next()
                        .ok_or_else(|| format!("option {flag} needs a value"))
                }
            };
            match arg.as_str() {
                "-t" => a.from_headers = true,
                "-i" | "-oi" => a.ignore_dots = true,
                "-bm" => a.mode = Mode::Deliver,
                "-bs" => a.mode = Mode::Smtp,
                "-bp" => a.mode = Mode::ListQueue,
                "-bi" | "-I" => a.mode = Mode::Newaliases,
                "-q" => a.mode = Mode::Flush,
                s if s.starts_with("-f") => a.sender = Some(value(&s[2..], "-f")?),
                s if s.starts_with("-r") => a.sender = Some(value(&s[2..], "-r")?),
                s if s.starts_with("-F") => a.full_name = Some(value(&s[2..], "-F")?),
                s if s.starts_with("-C") => {
                    a.config_dir = Some(PathBuf::from(value(&s[2..], "-C")?))
                }
                // A bad DSN value is ignored with a warning, as Postfix's
                // sendmail does: the message still goes, with defaults.
                s if s.starts_with("-N") => {
                    let v = value(&s[2..], "-N")?;
                    match parse_notify(&v) {
                        Some(n) => a.notify = Some(n),
                        None => a
                            .warnings
                            .push(format!("bad -N option value: '{v}' -- ignored")),
                    }
                }
                s if s.starts_with("-R") => {
                    let v = value(&s[2..], "-R")?;
                    match parse_ret(&v) {
                        Some(r) => a.ret = Some(r),
                        None => a
                            .warnings
                            .push(format!("bad -R option value: '{v}' -- ignored")),
                    }
                }
                s if s.starts_with("-V") => {
                    let v = value(&s[2..], "-V")?;
                    if v.len() > MAX_ENVID {
                        a.warnings
                            .push("too long -V option value -- ignored".into());
                    } else if v.is_empty() || !v.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                        // Postfix's sendmail also takes a TAB, which its
                        // smtpd and Sluice's refuse in ENVID (printable
                        // US-ASCII only): the relayed message would bounce.
                        a.warnings
                            .push("bad syntax in -V option value -- ignored".into());
                    } else {
                        a.envid = Some(v);
                    }
                }
                // Accepted and ignored, as by Postfix: delivery mode,
                // error mode, verbose, hop counts, old -o options.
                s if s.starts_with("-od")
                    || s.starts_with("-oe")
                    || s.starts_with("-om")
                    || s == "-v"
                    || s.starts_with("-oQ")
                    || s.starts_with("-oA")
                    || s.starts_with("-ob") => {}
                s if s.starts_with("-O") || s.starts_with("-B") || s.starts_with("-X") => {
                    if s.len() == 2 {
                        it.next();
                    }
                }
                s => return Err(format!("unsupported option {s}")),
            }
        }
        Ok(a)
    }
}

/// A `-N` value: `never`, or a list of `success`, `delay`, `failure`
/// separated by commas or white space, in any case (Postfix's
/// dsn_notify_mask); `None` for anything else, `never` with another word
/// included.
fn parse_notify(v: &str) -> Option<Notify> {
    let (mut never, mut success, mut failure, mut delay) = (false, false, false, false);
    let mut any = false;
    for word in v
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
    {
        any = true;
        match word.to_ascii_lowercase().as_str() {
            "never" => never = true,
            "success" => success = true,
            "failure" => failure = true,
            "delay" => delay = true,
            _ => return None,
        }
    }
    match (any, never, success || failure || delay) {
        (true, true, false) => Some(Notify::Never),
        (true, false, true) => Some(Notify::On {
            success,
            failure,
            delay,
        }),
        _ => None,
    }
}

/// A `-R` value: `full` or `hdrs`, in any case.
fn parse_ret(v: &str) -> Option<Ret> {
    match v.to_ascii_lowercase().as_str() {
        "full" => Some(Ret::Full),
        "hdrs" => Some(Ret::Hdrs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Args, String> {
        Args::parse_as("sendmail", v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn historic_spellings() {
        let a = p(&["-oi", "-fme@x", "-F", "Me Myself", "-t", "--", "-odd@x"]).unwrap();
        assert!(a.ignore_dots && a.from_headers);
        assert_eq!(a.sender.as_deref(), Some("me@x"));
        assert_eq!(a.full_name.as_deref(), Some("Me Myself"));
        assert_eq!(a.recipients, ["-odd@x"]);
        assert_eq!(p(&["-bs"]).unwrap().mode, Mode::Smtp);
        assert_eq!(p(&["-bp"]).unwrap().mode, Mode::ListQueue);
        assert_eq!(p(&["-q"]).unwrap().mode, Mode::Flush);
        assert_eq!(p(&["-f", "", "a@b"]).unwrap().sender.as_deref(), Some(""));
        assert!(p(&["-f"]).is_err());
        assert!(p(&["-Z"]).is_err());
        assert_eq!(p(&["-odi", "-v", "a"]).unwrap().recipients, ["a"]);
        assert_eq!(p(&["-bi"]).unwrap().mode, Mode::Newaliases);
    }

    #[test]
    fn program_name_chooses_the_mode() {
        let none = || std::iter::empty::<String>();
        assert_eq!(
            Args::parse_as("mailq", none()).unwrap().mode,
            Mode::ListQueue
        );
        assert_eq!(
            Args::parse_as("newaliases", none()).unwrap().mode,
            Mode::Newaliases
        );
        assert_eq!(
            Args::parse_as("sendmail", none()).unwrap().mode,
            Mode::Deliver
        );
        // An option still wins over the name, as in Postfix.
        let q = Args::parse_as("mailq", ["-q".to_string()]).unwrap();
        assert_eq!(q.mode, Mode::Flush);
    }

    #[test]
    fn dsn_options() {
        let a = p(&["-N", "success,DELAY", "-Rhdrs", "-V", "env id 1", "r@x"]).unwrap();
        assert_eq!(
            a.notify,
            Some(Notify::On {
                success: true,
                failure: false,
                delay: true
            })
        );
        assert_eq!(a.ret, Some(Ret::Hdrs));
        assert_eq!(a.envid.as_deref(), Some("env id 1"));
        assert_eq!(a.recipients, ["r@x"]);
        assert!(a.warnings.is_empty());
        let a = p(&["-Nnever", "-R", "FULL", "r@x"]).unwrap();
        assert_eq!((a.notify, a.ret), (Some(Notify::Never), Some(Ret::Full)));
        assert_eq!(
            p(&["-N", "failure delay"]).unwrap().notify,
            Some(Notify::On {
                success: false,
                failure: true,
                delay: true
            })
        );
        // Bad values are ignored with a warning, as by Postfix; the value
        // is still taken from the next argument, not left as a recipient.
        for bad in [
            &["-N", "never,success", "r@x"][..],
            &["-N", "sometimes", "r@x"],
            &["-N", ",", "r@x"],
            &["-R", "body", "r@x"],
            &["-V", "a\x01b", "r@x"],
            &["-V", "a\tb", "r@x"],
            &["-V", "\u{e9}", "r@x"],
        ] {
            let a = p(bad).unwrap();
            assert_eq!(a.recipients, ["r@x"], "{bad:?}");
            assert_eq!((a.notify, a.ret, a.envid), (None, None, None), "{bad:?}");
            assert_eq!(a.warnings.len(), 1, "{bad:?}");
        }
        let long = "x".repeat(101);
        assert_eq!(p(&["-V", &long]).unwrap().warnings.len(), 1);
        assert_eq!(
            p(&["-V", &long[1..]]).unwrap().envid.as_deref(),
            Some(&long[1..])
        );
        assert!(p(&["-N"]).is_err() && p(&["-R"]).is_err() && p(&["-V"]).is_err());
    }
}
