//! The queue manager's links (to the router, to each transport's delivery
//! agent, to cleanup for notices) as its log lines name them, and the
//! event the loss of each is. The shell's links report a connection not
//! made, a request not written and a link that failed; the words are
//! here.

use std::fmt::Display;
use std::path::Path;

use crate::Event;

/// One of the queue manager's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link<'a> {
    /// To the router.
    Router,
    /// To this transport's delivery agent.
    Agent(&'a str),
    /// To cleanup, for notices.
    Cleanup,
}

impl Link<'_> {
    /// The line for a connection to `path` that could not be made.
    pub fn connect_failed(&self, path: &Path, e: &dyn Display) -> String {
        match self {
            Link::Router => format!("connect to router {}: {e}", path.display()),
            Link::Agent(_) => format!("connect to delivery agent {}: {e}", path.display()),
            Link::Cleanup => format!("connect to cleanup for notices: {e}"),
        }
    }

    /// The line for a request that could not be written, if one is
    /// logged (the router's and an agent's loss is said when it fails).
    pub fn send_failed(&self, e: &dyn Display) -> Option<String> {
        match self {
            Link::Cleanup => Some(self.failed(e)),
            Link::Router | Link::Agent(_) => None,
        }
    }

    /// The line for a link that failed.
    pub fn failed(&self, e: &dyn Display) -> String {
        match self {
            Link::Router => format!("router: {e}"),
            Link::Agent(name) => format!("delivery agent {name}: {e}"),
            Link::Cleanup => format!("cleanup link for notices: {e}"),
        }
    }

    /// What the link's loss is to the queue manager.
    pub fn lost(&self) -> Event {
        match self {
            Link::Router => Event::RouterLost,
            Link::Agent(name) => Event::AgentLost {
                transport: name.to_string(),
            },
            Link::Cleanup => Event::CleanupLost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_link_is_named_in_its_lines_and_its_loss_is_its_event() {
        let p = Path::new("/var/spool/sluice/private/relay");
        let e = "Connection refused";
        assert_eq!(
            Link::Router.connect_failed(Path::new("/q/private/router"), &e),
            "connect to router /q/private/router: Connection refused"
        );
        assert_eq!(
            Link::Agent("relay").connect_failed(p, &e),
            "connect to delivery agent /var/spool/sluice/private/relay: Connection refused"
        );
        assert_eq!(
            Link::Cleanup.connect_failed(p, &e),
            "connect to cleanup for notices: Connection refused"
        );
        assert_eq!(Link::Router.send_failed(&e), None);
        assert_eq!(Link::Agent("relay").send_failed(&e), None);
        assert_eq!(
            Link::Cleanup.send_failed(&"Broken pipe").as_deref(),
            Some("cleanup link for notices: Broken pipe")
        );
        assert_eq!(Link::Router.failed(&"reset"), "router: reset");
        assert_eq!(
            Link::Agent("relay").failed(&"reset"),
            "delivery agent relay: reset"
        );
        assert!(matches!(Link::Router.lost(), Event::RouterLost));
        assert!(matches!(Link::Cleanup.lost(), Event::CleanupLost));
        assert!(
            matches!(Link::Agent("relay").lost(), Event::AgentLost { transport } if transport == "relay")
        );
    }
}
