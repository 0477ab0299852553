//! sendmail's command line, with its historic spellings (`-oi`, `-bs`, `-f sender`
//! or `-fsender`), ignoring the options Postfix also ignores.

use std::path::PathBuf;

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
                // Accepted and ignored, as by Postfix: delivery mode,
                // error mode, verbose, hop counts, old -o options.
                s if s.starts_with("-od")
                    || s.starts_with("-oe")
                    || s.starts_with("-om")
                    || s == "-v"
                    || s.starts_with("-oQ")
                    || s.starts_with("-oA")
                    || s.starts_with("-ob") => {}
                s if s.starts_with("-O")
                    || s.starts_with("-B")
                    || s.starts_with("-N")
                    || s.starts_with("-R")
                    || s.starts_with("-V")
                    || s.starts_with("-X") =>
                {
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
}
