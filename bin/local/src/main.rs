//! local(8): the Sluice local delivery agent.
//!
//! qmgr hands it transactions for local domains (the `sluice-delivery`
//! protocol, as smtp(8)); it resolves each recipient through aliases to
//! users, commands and files, and appends to the user's mbox (under
//! `mail_spool_directory`, or `home_mailbox`) or Maildir (`home_mailbox`
//! ending in `/`), as that user when run as root. It logs each delivery as
//! Postfix does (`to=<…>, relay=local, …, status=sent (delivered to
//! mailbox)`) and reports a result per recipient.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alias;
mod content;
mod deliver;
mod luser;
mod mailbox;
mod message;
mod pipe;
mod progress;
mod resubmit;
mod server;
mod targets;

/// Tests that touch files take this: the root test switches the whole
/// process's effective uid for a moment, which other threads would see.
#[cfg(test)]
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn main() {
    daemon::run(
        // A delivery may block (a command, a dotlock's retries): its
        // status line must not wait for the next delivery with it.
        daemon::Options {
            batch_log: false,
            ..daemon::Options::default()
        },
        |_ctx| Ok(()),
        |ctx, ()| {
            let local = server::LocalAgent::new(ctx)?;
            Ok(agent::AgentServer::serve(local, &ctx.args.service))
        },
    )
}
