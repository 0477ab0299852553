//! sluice.conf(5), generated from the parameter table.
//!
//! The page describes main.cf's syntax, `$name` expansion and per-transport
//! overrides, then lists every parameter with its type, default and
//! description. The checked-in `man/sluice.conf.5` is compared with this
//! output by a test; run the tests with `SLUICE_REGEN=1` to rewrite it.
//! Output is deterministic (no dates, no host names).

use crate::table::{self, ParamSpec};

/// Escapes text for roff: backslashes, and a leading `.` or `'` that would
/// otherwise be read as a request.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

const HEAD: &str = r#".TH SLUICE.CONF 5 "" "Sluice" "File Formats"
.SH NAME
sluice.conf \- Sluice main configuration parameters (main.cf)
.SH SYNOPSIS
.B /etc/sluice/main.cf
.br
.B sluice config
[\fB\-n\fR | \fB\-d\fR] [\fIname\fR ...]
.br
.B sluice config
\fIname\fB=\fIvalue\fR ...
.SH DESCRIPTION
Sluice reads its parameters from \fImain.cf\fR in the configuration
directory (\fB/etc/sluice\fR, or the directory given with \fB\-c\fR).
The syntax is that of Postfix:
.IP \(bu 2
Each parameter is set with \fIname\fB = \fIvalue\fR on a line that starts
with a non\-blank character. White space around the name and the value is
ignored. When a name is set more than once, the last line wins.
.IP \(bu 2
A line that starts with white space continues the previous line.
.IP \(bu 2
Blank lines, and lines whose first non\-blank character is \fB#\fR, are
ignored; they do not end a continued line. A \fB#\fR elsewhere is part of
the value.
.IP \(bu 2
A value may refer to other parameters as \fB$\fIname\fR, \fB${\fIname\fB}\fR
or \fB$(\fIname\fB)\fR; the reference is replaced by that parameter's
value when the value is used. \fB${\fIname\fB?\fItext\fB}\fR gives
\fItext\fR when \fIname\fR is not empty, \fB${\fIname\fB:\fItext\fB}\fR
gives \fItext\fR when it is empty, and
\fB${\fIname\fB?{\fItext1\fB}:{\fItext2\fB}}\fR chooses between the two.
\fB$$\fR is a literal dollar sign. A parameter that refers to itself,
directly or through others, is an error that names the loop.
.IP \(bu 2
Lists are separated by commas and/or white space; text inside
\fB{\fR ... \fB}\fR stays together, as in
\fBinline:{ a = b, c = d }\fR.
.PP
Unknown parameter names are reported as warnings with the file and line,
except names that another value refers to with \fB$\fR (user\-defined
parameters) and per\-transport overrides for services in master.cf.
A value that does not fit its parameter's type is refused with the file,
the line and the parameter, and Sluice does not start.
.SS Value types
.TP
.B integer
A decimal number.
.TP
.B boolean
\fByes\fR or \fBno\fR.
.TP
.B time
A number followed by one unit letter: \fBs\fR (seconds), \fBm\fR (minutes),
\fBh\fR (hours), \fBd\fR (days), \fBw\fR (weeks). Without a letter the
parameter's default unit applies.
.TP
.B size
A number of bytes, optionally followed by \fBk\fR, \fBm\fR or \fBg\fR
(multiples of 1024; a Sluice extension).
.TP
.B list of networks and tables
IPv4 and IPv6 addresses and networks (\fB127.0.0.0/8\fR, \fB::1\fR,
\fB[::1]/128\fR) and \fItype\fB:\fItable\fR lookup tables. Networks must
not have host bits set. \fB!\fIpattern\fR and \fB/\fIfile/name\fR entries
are not supported.
.TP
.B list of type:name tables
Lookup table references such as \fBhash:/etc/aliases\fR. \fBhash:\fR and
\fBlmdb:\fR tables are read from their source text file; Sluice uses no
Berkeley DB.
.SS Per\-transport overrides
Parameters marked \fIper\-transport\fR below may be set for one transport
(a master.cf service name) as \fItransport\fB_\fIname\fR, where a leading
\fBdefault_\fR of the name is dropped first: for example
\fBrelay_destination_concurrency_limit\fR overrides
\fBdefault_destination_concurrency_limit\fR for the \fBrelay\fR transport,
and \fBrelay_initial_destination_concurrency\fR overrides
\fBinitial_destination_concurrency\fR. The override is looked up before
the global value. master.cf \fB\-o\fR \fIname\fB=\fIvalue\fR options
override main.cf for one service.
.SH PARAMETERS
"#;

const TAIL: &str = r#".SH FILES
.TP
.B /etc/sluice/main.cf
Parameters.
.TP
.B /etc/sluice/master.cf
Service table.
.SH SEE ALSO
.BR sluice (1),
.BR master (8),
.BR sluice.policy (5),
.BR postconf (5)
"#;

fn entry(spec: &ParamSpec) -> String {
    let default = spec.default_doc();
    let mut s = format!(
        ".TP\n.BR {} \" = \" \"{}\"\n",
        roff(spec.name),
        roff(default).replace('"', "\\(dq")
    );
    s.push_str(&roff(spec.doc));
    s.push_str("\n.br\nType: ");
    s.push_str(&roff(&spec.ty.describe()));
    if spec.per_transport {
        s.push_str("; per\\-transport as \\fItransport\\fB_");
        s.push_str(&roff(spec.short_name()));
        s.push_str("\\fR");
    }
    if !spec.expand {
        s.push_str("; expanded at delivery time, not by the configuration");
    }
    s.push_str(".\n");
    s
}

/// The roff source of sluice.conf(5).
pub fn man_page() -> String {
    let mut specs: Vec<&ParamSpec> = table::params().collect();
    specs.sort_by_key(|s| s.name);
    let mut out = String::from(HEAD);
    for spec in specs {
        out.push_str(&entry(spec));
    }
    out.push_str(TAIL);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden file: fails when man/sluice.conf.5 is out of date.
    #[test]
    fn checked_in_page_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../man/sluice.conf.5");
        let page = man_page();
        if std::env::var_os("SLUICE_REGEN").is_some_and(|v| v == "1") {
            std::fs::write(&path, &page).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == page,
            "{} is out of date: run SLUICE_REGEN=1 cargo test -p config",
            path.display()
        );
    }

    #[test]
    fn every_parameter_is_documented() {
        let page = man_page();
        for spec in table::params() {
            assert!(
                page.contains(&format!(".BR {} ", roff(spec.name))),
                "{}",
                spec.name
            );
        }
        assert!(page.contains(".SH SEE ALSO"));
    }
}
