//! The command line master gives every daemon.
//!
//! Postfix's form: `-n service -t type [-u] [-c] [-v] [-o name=value]... [--] [args]`.
//! `-u` asks the daemon to drop to mail_owner, `-c` to chroot into the queue
//! directory (both only when started as root), `-o` overrides main.cf for
//! this service alone, as master.cf's `-o` does.

/// The parsed daemon arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonArgs {
    /// The master.cf service name (`-n`).
    pub service: String,
    /// `inet` or `unix` (`-t`).
    pub kind: String,
    /// Drop privileges to mail_owner (`-u`).
    pub unpriv: bool,
    /// Chroot into the queue directory (`-c`).
    pub chroot: bool,
    /// Verbose logging (`-v`).
    pub verbose: bool,
    /// main.cf overrides (`-o name=value`).
    pub overrides: Vec<(String, String)>,
    /// Service-specific arguments after the options.
    pub rest: Vec<String>,
}

/// Why the daemon command line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsError(pub String);

impl std::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl DaemonArgs {
    /// Parses arguments after the program name.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<DaemonArgs, ArgsError> {
        let mut a = DaemonArgs::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |flag: &str| {
                it.next()
                    .ok_or_else(|| ArgsError(format!("option {flag} needs a value")))
            };
            match arg.as_str() {
                "-n" => a.service = value("-n")?,
                "-t" => a.kind = value("-t")?,
                "-u" => a.unpriv = true,
                "-c" => a.chroot = true,
                "-v" => a.verbose = true,
                "-o" => {
                    let kv = value("-o")?;
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| ArgsError(format!("-o {kv}: expected name=value")))?;
                    a.overrides
                        .push((k.trim().to_string(), v.trim().to_string()));
                }
                "--" => {
                    a.rest.extend(it.by_ref());
                    break;
                }
                s if s.starts_with('-') => return Err(ArgsError(format!("unknown option {s}"))),
                _ => {
                    a.rest.push(arg);
                    a.rest.extend(it.by_ref());
                    break;
                }
            }
        }
        if a.service.is_empty() {
            return Err(ArgsError("missing -n service name".into()));
        }
        if a.kind.is_empty() {
            a.kind = "unix".into();
        }
        Ok(a)
    }

    /// The argument list that [`DaemonArgs::parse`] reads back as `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "-n".to_string(),
            self.service.clone(),
            "-t".into(),
            self.kind.clone(),
        ];
        if self.unpriv {
            v.push("-u".into());
        }
        if self.chroot {
            v.push("-c".into());
        }
        if self.verbose {
            v.push("-v".into());
        }
        for (k, val) in &self.overrides {
            v.push("-o".into());
            v.push(format!("{k}={val}"));
        }
        v.push("--".into());
        v.extend(self.rest.iter().cloned());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn round_trip_and_errors() {
        let a = DaemonArgs {
            service: "relay".into(),
            kind: "unix".into(),
            unpriv: true,
            chroot: true,
            verbose: false,
            overrides: vec![("smtp_helo_timeout".into(), "5s".into())],
            rest: s(&["-x", "y"]),
        };
        assert_eq!(DaemonArgs::parse(a.to_args()).unwrap(), a);
        assert!(DaemonArgs::parse(s(&["-t", "unix"])).is_err());
        assert!(DaemonArgs::parse(s(&["-n"])).is_err());
        assert!(DaemonArgs::parse(s(&["-n", "x", "-o", "novalue"])).is_err());
        assert!(DaemonArgs::parse(s(&["-n", "x", "-z"])).is_err());
        let b = DaemonArgs::parse(s(&["-n", "x", "arg1", "-o", "k=v"])).unwrap();
        assert_eq!(b.rest, s(&["arg1", "-o", "k=v"]));
        assert!(b.overrides.is_empty());
    }
}
