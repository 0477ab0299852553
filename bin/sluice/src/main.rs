//! sluice(1): the postmaster's command.
//!
//! `start`, `stop`, `reload`, `status`, `top`, `check` and `config`, in the manner
//! of Postfix's `postfix` and `postconf` commands; `dkim keygen` as
//! opendkim-genkey; `sim`, the queue replayed under a proposed configuration. Exit codes a script can
//! rely on: 0 success, 1 failure (with a message on stderr), 2 bad usage,
//! 3 from `status` when the mail system is not running.
#![forbid(unsafe_code)]

mod aliases;
mod check;
mod cluster;
mod dkim;
mod lifecycle;
mod map;
mod mover;
mod policy;
mod queue;
mod route;
mod shape;
mod sim;
mod top;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// The Sluice mail system's control command.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about = "Control the Sluice mail system")]
struct Cli {
    /// The configuration directory (default: $SLUICE_CONFIG_DIR, else /etc/sluice).
    #[arg(short = 'c', long = "config-dir", global = true)]
    config_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start the mail system (master and its services).
    Start {
        /// Stay in the foreground, logging to stderr as well.
        #[arg(long)]
        foreground: bool,
    },
    /// Stop the mail system gracefully.
    Stop,
    /// Re-read main.cf and master.cf; restart only services whose definition changed.
    Reload,
    /// Open maillog_file again after logrotate has moved it (master and every daemon).
    Reopen,
    /// Show master, its services and their processes, and the queue's figures.
    Status {
        /// One JSON object, with the queue's sizes, rates and busiest destinations, for monitoring.
        #[arg(long)]
        json: bool,
    },
    /// A live view of the queue: sizes per transport and class, delivery rates, busiest destinations.
    Top {
        /// Print one frame and exit, without clearing the screen.
        #[arg(long)]
        once: bool,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// How many destinations to show.
        #[arg(long, default_value_t = 15)]
        destinations: u32,
    },
    /// Validate the configuration, directories, ownership and permissions.
    Check,
    /// Show where the router sends each address (like sendmail -bv).
    Route {
        /// Also look up the next hop's MX hosts and addresses.
        #[arg(long)]
        hosts: bool,
        /// Addresses to resolve.
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// Check the alias_maps files, like newaliases.
    Newaliases,
    /// Lookup tables, like postmap.
    Map {
        #[command(subcommand)]
        cmd: MapCmd,
    },
    /// Inspect and steer the mail queue.
    Queue {
        #[command(subcommand)]
        cmd: QueueCmd,
    },
    /// The traffic-shaping policy (policy_file) as qmgr applies it.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
    },
    /// DKIM keys.
    Dkim {
        #[command(subcommand)]
        cmd: DkimCmd,
    },
    /// The link to clusterd and this instance's share of the cluster's limits.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Run clusterd, the cluster's coordinator, in the foreground (without master).
    Clusterd,
    /// Replay the live queue in the simulator under the running and a proposed configuration.
    Sim {
        /// The proposed configuration directory (main.cf, master.cf, policy file).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Simulate at most this long (90s, 15m, 2h, 1d).
        #[arg(long, default_value = "1d")]
        duration: String,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Plot the queue draining under each configuration to this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Only take the snapshot and write it to FILE.
        #[arg(long, value_name = "FILE", conflicts_with = "from")]
        save: Option<PathBuf>,
        /// Replay the snapshot in FILE (from --save) instead of taking one.
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// Add N messages from SENDER to RECIPIENT, the first AT s after the snapshot, spread over OVER s.
        #[arg(long, value_name = "N,SENDER,RECIPIENT[,AT[,OVER]]")]
        add: Vec<String>,
    },
    /// Print or edit main.cf parameters, like postconf.
    Config {
        /// Only parameters set in main.cf.
        #[arg(short = 'n', conflicts_with = "defaults")]
        non_default: bool,
        /// Default values.
        #[arg(short = 'd')]
        defaults: bool,
        /// Parameter names to print, or name=value pairs to set in main.cf.
        args: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum DkimCmd {
    /// Make a signing key, write it to DIR/SELECTOR.private and print the DNS TXT record.
    Keygen {
        /// rsa or ed25519.
        #[arg(short = 'a', long, default_value = "rsa")]
        algorithm: String,
        /// RSA key size in bits.
        #[arg(short = 'b', long, default_value_t = 2048)]
        bits: u32,
        /// Where the key file goes.
        #[arg(short = 'D', long, default_value = ".")]
        directory: PathBuf,
        /// The signing domain (d=).
        domain: String,
        /// The selector (s=).
        selector: String,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// The coordinator, the instances, and per shared key the cluster's limit beside this instance's share and use.
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum MapCmd {
    /// Look keys up in a table (type:name), like postmap -q.
    Query {
        /// The table, e.g. hash:/etc/sluice/transport.
        table: String,
        /// Keys to look up.
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum QueueCmd {
    /// List queued messages, in mailq(1) format.
    List {
        /// One JSON object per message per line (like postqueue -j).
        #[arg(long)]
        json: bool,
    },
    /// The queue's shape by domain and age, as Postfix's qshape(1).
    Shape {
        /// By sender domain (messages) rather than recipient domain (recipients).
        #[arg(short = 's')]
        senders: bool,
        /// Add rows for parent domains.
        #[arg(short = 'p')]
        parents: bool,
        /// Width of the first age bucket, minutes.
        #[arg(short = 't', default_value_t = 5)]
        minutes: u64,
        /// Number of age buckets.
        #[arg(short = 'b', default_value_t = 10)]
        buckets: usize,
        /// Queue states to count: active, deferred, hold (default: active deferred).
        states: Vec<String>,
    },
    /// Make every deferred message due now.
    Flush,
    /// Show one message: envelope, recipients and their state, headers.
    Show {
        /// The queue id.
        id: String,
    },
    /// Put messages on hold: they are kept and not delivered.
    Hold(Select),
    /// Move messages to other instances' transferd (see transferd(8)):
    /// each keeps its envelope, retry time, expiry, hold and per-recipient
    /// state, and is removed here once the receiver has it.
    Move {
        /// Receiver (HOST:PORT, its transfer_listen); several are used in turn.
        #[arg(long = "to", required = true)]
        to: Vec<String>,
        /// At most N messages per SECONDS (N/SECONDS, e.g. 100/1).
        #[arg(long)]
        rate: Option<String>,
        /// Show a progress bar with the rate and what is left.
        #[arg(long)]
        progress: bool,
        /// Read a stopped instance's spool directory instead of the
        /// running queue (a disk from a dead host).
        #[arg(long = "from-spool")]
        from_spool: Option<PathBuf>,
        /// With --from-spool: the stopped instance's myhostname, so that
        /// transfers it had begun are recognised (default: this one's).
        #[arg(long = "from-name")]
        from_name: Option<String>,
        #[command(flatten)]
        sel: Select,
    },
    /// Release held messages.
    Release(Select),
    /// Delete messages, without a notice to anyone.
    Delete(Select),
    /// Deliver messages now, routing them afresh.
    Requeue(Select),
    /// Suspend delivery of mail with these policy field values, e.g.
    /// `localip=192.0.2.7 grouping=yahoo --for 2h`; prints the suspension's id.
    Suspend {
        /// FIELD=VALUE pairs (localip, grouping, tenantid, jobid,
        /// recipientdomain, remotemx, remoteip, transport).
        #[arg(required = true)]
        values: Vec<String>,
        /// For this long (30s, 10m, 2h); without it, until resumed.
        #[arg(long = "for")]
        for_time: Option<String>,
        /// A note shown with it.
        #[arg(long)]
        tag: Option<String>,
    },
    /// List the suspensions and back-offs in force.
    Suspensions,
    /// Lift a suspension or back-off by its id.
    Resume {
        /// Its id (from suspend or suspensions).
        id: u64,
    },
}

#[derive(Subcommand, Debug)]
enum PolicyCmd {
    /// Every policy key in use with its configured and current limits,
    /// connections and messages, and the suspensions and back-offs.
    Show {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Which messages an operation applies to: those matching every filter.
#[derive(clap::Args, Debug)]
struct Select {
    /// Messages from this envelope sender.
    #[arg(long)]
    sender: Option<String>,
    /// Messages with a pending recipient in this domain.
    #[arg(long)]
    domain: Option<String>,
    /// Messages of this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Messages of this job.
    #[arg(long)]
    job: Option<String>,
    /// Only deferred messages.
    #[arg(long)]
    deferred: bool,
    /// Only messages on hold.
    #[arg(long)]
    held: bool,
    /// Every message (held mail included); takes no ids or filters.
    #[arg(long)]
    all: bool,
    /// Queue ids (`ALL` alone, as postsuper's, is --all).
    ids: Vec<String>,
}

impl Select {
    fn selector(&self) -> Result<ipc::queuectl::Selector, String> {
        use ipc::queuectl::Selector;
        // A postmaster's `postsuper -d ALL`; any other name must be a queue
        // id, not silently match nothing.
        let all_named = self.ids.len() == 1 && self.ids[0] == "ALL";
        let ids = if all_named {
            Vec::new()
        } else {
            self.ids.clone()
        };
        for id in &ids {
            if id.parse::<mail::QueueId>().is_err() {
                return Err(format!("{id}: not a queue id"));
            }
        }
        let all = self.all || all_named;
        let sel = Selector {
            ids,
            sender: self.sender.clone(),
            domain: self.domain.clone(),
            tenant: self.tenant.clone(),
            job: self.job.clone(),
            deferred: self.deferred,
            held: self.held,
            all,
        };
        let filtered = Selector {
            all: false,
            ..sel.clone()
        };
        if all && filtered.is_given() {
            return Err("--all takes no queue ids or filters: name one or the other".into());
        }
        if !sel.is_given() {
            return Err(
                "name queue ids, or filters (--sender, --domain, --tenant, --job, --deferred, --held), or --all"
                    .into(),
            );
        }
        Ok(sel)
    }
}

fn main() {
    let cli = Cli::parse();
    let dir = cli
        .config_dir
        .or_else(|| std::env::var_os(ipc::status::CONFIG_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/sluice"));
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let code = match cli.cmd {
        Cmd::Start { foreground } => lifecycle::start(&dir, foreground),
        Cmd::Stop => lifecycle::stop(&dir),
        Cmd::Reload => lifecycle::reload(&dir),
        Cmd::Reopen => lifecycle::reopen(&dir),
        Cmd::Status { json } => lifecycle::status(&dir, json),
        Cmd::Top {
            once,
            interval,
            destinations,
        } => top::top(&dir, once, interval, destinations),
        Cmd::Check => check::check(&dir),
        Cmd::Cluster {
            cmd: ClusterCmd::Status { json },
        } => cluster::status(&dir, json),
        Cmd::Clusterd => cluster::clusterd(&dir),
        Cmd::Sim {
            config,
            duration,
            json,
            plot,
            save,
            from,
            add,
        } => sim::sim(
            &dir,
            sim::SimArgs {
                config,
                duration,
                json,
                plot,
                save,
                from,
                add,
            },
        ),
        Cmd::Route { hosts, addresses } => route::route(&dir, &addresses, hosts),
        Cmd::Newaliases => aliases::newaliases(&dir),
        Cmd::Map {
            cmd: MapCmd::Query { table, keys },
        } => map::map_query(&dir, &table, &keys),
        Cmd::Queue {
            cmd: QueueCmd::List { json },
        } => queue::list(&dir, json),
        Cmd::Queue {
            cmd:
                QueueCmd::Shape {
                    senders,
                    parents,
                    minutes,
                    buckets,
                    states,
                },
        } => queue::shape(
            &dir,
            shape::Options {
                senders,
                parents,
                minutes,
                buckets,
                states: if states.is_empty() {
                    vec!["active".into(), "deferred".into()]
                } else {
                    states
                },
            },
        ),
        Cmd::Queue {
            cmd: QueueCmd::Flush,
        } => queue::flush(&dir),
        Cmd::Queue {
            cmd: QueueCmd::Show { id },
        } => queue::show(&dir, &id),
        Cmd::Queue {
            cmd: QueueCmd::Hold(s),
        } => queue::operate(&dir, "hold", s.selector()),
        Cmd::Queue {
            cmd: QueueCmd::Release(s),
        } => queue::operate(&dir, "release", s.selector()),
        Cmd::Queue {
            cmd: QueueCmd::Delete(s),
        } => queue::operate(&dir, "delete", s.selector()),
        Cmd::Queue {
            cmd: QueueCmd::Requeue(s),
        } => queue::operate(&dir, "requeue", s.selector()),
        Cmd::Queue {
            cmd:
                QueueCmd::Move {
                    to,
                    rate,
                    progress,
                    from_spool,
                    from_name,
                    sel,
                },
        } => match sel.selector() {
            Ok(sel) => mover::run(
                &dir,
                mover::MoveArgs {
                    to,
                    sel,
                    rate,
                    progress,
                    from_spool,
                    from_name,
                },
            ),
            Err(e) => {
                eprintln!("sluice: {e}");
                2
            }
        },
        Cmd::Queue {
            cmd:
                QueueCmd::Suspend {
                    values,
                    for_time,
                    tag,
                },
        } => policy::suspend(&dir, &values, for_time.as_deref(), tag),
        Cmd::Queue {
            cmd: QueueCmd::Suspensions,
        } => policy::suspensions(&dir),
        Cmd::Queue {
            cmd: QueueCmd::Resume { id },
        } => policy::resume(&dir, id),
        Cmd::Policy {
            cmd: PolicyCmd::Show { json },
        } => policy::show(&dir, json),
        Cmd::Dkim {
            cmd:
                DkimCmd::Keygen {
                    algorithm,
                    bits,
                    directory,
                    domain,
                    selector,
                },
        } => dkim::keygen(&domain, &selector, &algorithm, bits, &directory),
        Cmd::Config {
            non_default,
            defaults,
            args,
        } => config_cmd(&dir, non_default, defaults, &args),
    };
    std::process::exit(code)
}

/// Reports an error the way every subcommand does.
pub fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("sluice: fatal: {msg}");
    1
}

/// Loads main.cf with master.cf's service names, printing warnings.
pub fn load_config(
    dir: &std::path::Path,
    quiet: bool,
) -> Result<(config::Config, Vec<config::ServiceDef>), String> {
    let services = config::load_master_cf(&dir.join("master.cf")).map_err(|e| e.to_string())?;
    let loaded = config::Config::load_with_master(dir, &services).map_err(|e| e.to_string())?;
    if !quiet {
        for w in &loaded.warnings {
            eprintln!("sluice: warning: {w}");
        }
    }
    Ok((loaded.config, services))
}

fn config_cmd(dir: &std::path::Path, non_default: bool, defaults: bool, args: &[String]) -> i32 {
    let services = config::load_master_cf(&dir.join("master.cf")).unwrap_or_default();
    let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    let assignments: Vec<(String, String)> = args
        .iter()
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    if !assignments.is_empty() {
        if assignments.len() != args.len() {
            return fail("mix of name=value edits and names to print");
        }
        return match config::edit_file(&dir.join("main.cf"), &assignments, &names) {
            Ok(warnings) => {
                for w in warnings {
                    eprintln!("sluice: warning: {w}");
                }
                0
            }
            Err(e) => fail(e),
        };
    }
    let cfg = match config::Config::load_with_master(dir, &services) {
        Ok(l) => {
            for w in &l.warnings {
                eprintln!("sluice: warning: {w}");
            }
            l.config
        }
        Err(e) => return fail(e),
    };
    let mode = if defaults {
        config::RenderMode::Defaults
    } else if non_default {
        config::RenderMode::NonDefault
    } else {
        config::RenderMode::All
    };
    if args.is_empty() {
        print!("{}", config::render(&cfg, mode));
        return 0;
    }
    let mut code = 0;
    for name in args {
        match config::render_one(&cfg, name, mode) {
            Ok(s) => print!("{s}"),
            Err(e) => {
                eprintln!("sluice: warning: {e}");
                code = 1;
            }
        }
    }
    code
}
