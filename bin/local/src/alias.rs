//! aliases(5) expansion: a local name to the destinations it stands for.
//!
//! Values are comma-separated (commas inside double quotes do not split):
//! a local name (expanded again), `\name` (a mailbox, not expanded),
//! `user@domain` (local again when the domain is ours, else remote),
//! `|command`, `/file`, `:include:/path` (one item or more per line, `#` comments; read through
//! a closure). A name that lists itself means
//! its own mailbox, as in Postfix. Any other cycle, or nesting deeper than
//! [`MAX_DEPTH`], is a 5.4.6 loop. Duplicates are delivered once. The
//! lookup is a closure so tests need no files; nothing here logs.
//!
//! Commands and files carry the rights they run with, as in Postfix: the
//! owner of the alias table that listed them, or when that is root the
//! owner of the `:include:` file they came from, else none (uid 0, which
//! local turns into `default_privs`). A `.forward` starts with its user's.

use crate::mailbox::Failure;
use mail::StatusCode;

/// How deep aliases may nest.
pub const MAX_DEPTH: usize = 20;

/// Where a command or file destination was found, for
/// `allow_mail_to_commands` and `allow_mail_to_files`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// In an alias table.
    Alias,
    /// In a `:include:` file.
    Include,
    /// In a user's `.forward` file.
    Forward,
}

/// Where an alias leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A local user's mailbox (the login name).
    User(String),
    /// An address on another host.
    Remote(String),
    /// `|command`: the command line, where it was found, whose rights it
    /// runs with (0: nobody's, so `default_privs`).
    Command(String, Origin, u32),
    /// `/file`: the path, where it was found, whose rights it is written with.
    File(String, Origin, u32),
}

impl Target {
    /// The target as a line of local's delivered-targets record: what it
    /// names, in a fixed form (not where it was found, nor whose rights),
    /// so that a record survives changes to this type.
    pub fn key(&self) -> String {
        let (kind, what) = match self {
            Target::User(u) => ("user", u),
            Target::Remote(r) => ("remote", r),
            Target::Command(c, ..) => ("command", c),
            Target::File(f, ..) => ("file", f),
        };
        format!("{kind}:{}", what.replace(['\r', '\n'], " "))
    }
}

/// Reads a `:include:` file: its text and its owner's uid.
pub type Include<'a> = &'a dyn Fn(&str) -> Result<(String, u32), Failure>;

/// How expansion reaches the outside world.
pub struct Sources<'a> {
    /// An alias table lookup: the value and the uid owning its table.
    pub lookup: &'a dyn Fn(&str) -> Option<(String, u32)>,
    /// Whether `user@domain` stays on this host (domain in lower case).
    pub local_domain: &'a dyn Fn(&str) -> bool,
    /// Reads a `:include:` file.
    pub include: Include<'a>,
}

/// Expands a list of items (a `.forward` file's lines) found under `name`,
/// with the rights of `uid`.
pub fn expand_list(
    name: &str,
    text: &str,
    origin: Origin,
    uid: u32,
    src: &Sources<'_>,
) -> Result<Vec<Target>, Failure> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut out = Vec::new();
    items(
        name,
        &lines.join(","),
        (origin, uid),
        &mut Vec::new(),
        &mut out,
        src,
    )?;
    Ok(out)
}

/// Expands `name` (already folded to lower case).
pub fn expand(name: &str, src: &Sources<'_>) -> Result<Vec<Target>, Failure> {
    let mut out = Vec::new();
    walk(name, &mut Vec::new(), &mut out, src)?;
    let mut seen = Vec::new();
    out.retain(|t| {
        let fresh = !seen.contains(t);
        if fresh {
            seen.push(t.clone());
        }
        fresh
    });
    Ok(out)
}

fn walk(
    name: &str,
    path: &mut Vec<String>,
    out: &mut Vec<Target>,
    src: &Sources<'_>,
) -> Result<(), Failure> {
    let Some((value, owner)) = (src.lookup)(name) else {
        out.push(Target::User(name.to_string()));
        return Ok(());
    };
    items(name, &value, (Origin::Alias, owner), path, out, src)
}

/// Expands the items of `value`, found under `name` (an alias or
/// `:include:path`) with the rights of `uid`.
fn items(
    name: &str,
    value: &str,
    (origin, uid): (Origin, u32),
    path: &mut Vec<String>,
    out: &mut Vec<Target>,
    src: &Sources<'_>,
) -> Result<(), Failure> {
    if path.len() >= MAX_DEPTH {
        return Err(Failure::bounce(
            StatusCode::known(5, 4, 6),
            format!("alias expansion of {} nests too deeply", path[0]),
        ));
    }
    path.push(name.to_string());
    for item in tables::split_alias_value(value) {
        if let Some(cmd) = item.strip_prefix('|') {
            out.push(Target::Command(cmd.trim().to_string(), origin, uid));
        } else if let Some(file) = item.strip_prefix(":include:") {
            let key = format!(":include:{}", file.trim());
            if path.contains(&key) {
                return Err(Failure::bounce(
                    StatusCode::known(5, 4, 6),
                    format!("alias expansion loop: {} -> {key}", path.join(" -> ")),
                ));
            }
            let (text, owner) = (src.include)(file.trim())?;
            // In a root-owned list the file lends its owner's rights; in a
            // list with rights already it changes nothing, so nobody gets
            // another user's rights by naming that user's file.
            let rights = if uid == 0 { owner } else { uid };
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            items(
                &key,
                &lines.join(","),
                (Origin::Include, rights),
                path,
                out,
                src,
            )?;
        } else if item.starts_with('/') {
            out.push(Target::File(item, origin, uid));
        } else if let Some(user) = item.strip_prefix('\\') {
            out.push(Target::User(user.to_lowercase()));
        } else {
            let local = match item.rsplit_once('@') {
                Some((lp, dom)) if (src.local_domain)(&dom.to_lowercase()) => lp.to_lowercase(),
                Some(_) => {
                    out.push(Target::Remote(item));
                    continue;
                }
                None => item.to_lowercase(),
            };
            if local == name {
                out.push(Target::User(local));
            } else if path.contains(&local) {
                return Err(Failure::bounce(
                    StatusCode::known(5, 4, 6),
                    format!("alias expansion loop: {} -> {local}", path.join(" -> ")),
                ));
            } else {
                walk(&local, path, out, src)?;
            }
        }
    }
    path.pop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Target::*;

    fn run(table: &[(&str, &str)], name: &str) -> Result<Vec<Target>, Failure> {
        // "owned" is a user's alias; everything else is root's.
        let lookup = |k: &str| {
            table
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(n, v)| (v.to_string(), if *n == "owned" { 1000 } else { 0 }))
        };
        let include = |p: &str| match p {
            "/etc/mail/list" => Ok((
                "# the list\nalice\n\n|/bin/list, /var/list\n".to_string(),
                500,
            )),
            "/etc/mail/self" => Ok((":include:/etc/mail/self".to_string(), 0)),
            _ => Err(Failure::defer(
                StatusCode::known(4, 3, 0),
                format!("cannot read {p}"),
            )),
        };
        expand(
            name,
            &Sources {
                lookup: &lookup,
                local_domain: &|d: &str| d == "mx.test.example",
                include: &include,
            },
        )
    }

    #[test]
    fn values_split_outside_quotes() {
        assert_eq!(tables::split_alias_value(" a, b ,,c "), ["a", "b", "c"]);
        assert_eq!(
            tables::split_alias_value("\"|cat > /x, y\", bob"),
            ["|cat > /x, y", "bob"]
        );
        assert!(tables::split_alias_value("").is_empty());
    }

    #[test]
    fn expansion_table() {
        let t = [
            ("postmaster", "root"),
            ("root", "alice, bob@Mx.Test.Example"),
            ("bob", "\\bob, |/usr/bin/vacation bob"),
            ("self", "self, carol"),
            (
                "team",
                "alice, alice, dave@remote.example, /var/log/mail.txt",
            ),
            ("inc", ":include:/etc/mail/list"),
            ("selfinc", ":include:/etc/mail/self"),
            ("badinc", ":include:/nowhere"),
            ("owned", ":include:/etc/mail/list, |/bin/own"),
        ];
        assert_eq!(run(&t, "nobody").unwrap(), [User("nobody".into())]);
        assert_eq!(
            run(&t, "postmaster").unwrap(),
            [
                User("alice".into()),
                User("bob".into()),
                Command("/usr/bin/vacation bob".into(), Origin::Alias, 0)
            ]
        );
        assert_eq!(
            run(&t, "self").unwrap(),
            [User("self".into()), User("carol".into())]
        );
        assert_eq!(
            run(&t, "team").unwrap(),
            [
                User("alice".into()),
                Remote("dave@remote.example".into()),
                File("/var/log/mail.txt".into(), Origin::Alias, 0)
            ]
        );
        assert_eq!(
            run(&t, "inc").unwrap(),
            [
                User("alice".into()),
                Command("/bin/list".into(), Origin::Include, 500),
                File("/var/list".into(), Origin::Include, 500)
            ]
        );
        // A user's list keeps its owner's rights through a file of another.
        assert_eq!(
            run(&t, "owned").unwrap(),
            [
                User("alice".into()),
                Command("/bin/list".into(), Origin::Include, 1000),
                File("/var/list".into(), Origin::Include, 1000),
                Command("/bin/own".into(), Origin::Alias, 1000)
            ]
        );
        assert_eq!(run(&t, "selfinc").unwrap_err().status.to_string(), "5.4.6");
        assert_eq!(run(&t, "badinc").unwrap_err().status.class(), 4);
    }

    #[test]
    fn loops_are_detected() {
        let t = [("a", "b"), ("b", "c"), ("c", "a")];
        let e = run(&t, "a").unwrap_err();
        assert_eq!(e.status.to_string(), "5.4.6");
        assert!(e.text.contains("a -> b -> c -> a"), "{}", e.text);
        let names: Vec<String> = (0..30).map(|i| format!("n{i}")).collect();
        let deep: Vec<(&str, &str)> = names
            .windows(2)
            .map(|w| (w[0].as_str(), w[1].as_str()))
            .collect();
        assert_eq!(run(&deep, "n0").unwrap_err().status.to_string(), "5.4.6");
    }
}
