//! `sluice map query TABLE KEY...`: look keys up in a table, like `postmap -q`.
//!
//! TABLE is a `type:name` reference as in main.cf (`$name` expanded from
//! main.cf when it loads; `hash:`, `lmdb:` and `texthash:` all read the
//! source text). With one key the value alone is printed, as postmap
//! does; with several, `key<TAB>value` lines. Exit status: 0 when every key
//! was found, 1 when one was not or the table cannot be opened (with file
//! and line on stderr).

use std::io::Write;
use std::path::Path;

/// Looks `keys` up in `table` and prints the values; see the module docs.
pub fn map_query(dir: &Path, table: &str, keys: &[String]) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    map_query_to(&mut stdout.lock(), &mut stderr.lock(), dir, table, keys)
}

/// [`map_query`] writing to the given streams (for tests).
pub fn map_query_to(
    out: &mut dyn Write,
    err: &mut dyn Write,
    dir: &Path,
    table: &str,
    keys: &[String],
) -> i32 {
    // $config_directory and friends, when main.cf is there to say.
    let spec = match config::Config::load(dir, &[]) {
        Ok(l) => l
            .config
            .expand_text(table)
            .unwrap_or_else(|_| table.to_string()),
        Err(_) => table.to_string(),
    };
    let t = match tables::open_str(&spec) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "sluice: fatal: {e}");
            return 1;
        }
    };
    for w in t.warnings() {
        let _ = writeln!(err, "sluice: warning: {w}");
    }
    let mut code = 0;
    for key in keys {
        match t.lookup(key) {
            Some(v) if keys.len() == 1 => {
                let _ = writeln!(out, "{v}");
            }
            Some(v) => {
                let _ = writeln!(out, "{key}\t{v}");
            }
            None => code = 1,
        }
    }
    code
}
