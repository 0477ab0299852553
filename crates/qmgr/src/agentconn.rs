//! Connection ids between qmgr's scheduler and the delivery agents.
//!
//! The scheduler hands a connection's id out again as soon as it forgets
//! the connection; the agent forgets it only once its own side is done
//! (the QUIT after a `Close`, the unsolicited `Closed` after a failure).
//! Used on the wire, a reused id made the agent refuse a new connection
//! ("connection 6 already exists") and made a late `Closed` end the
//! scheduler's new connection of the same id (`UnknownConnection`). So
//! the agent is given its own ids, never reused while qmgr runs, and an
//! answer about a connection the scheduler has forgotten is dropped here:
//! the scheduler has already put that connection's work back in its queues.
//!
//! Sans-IO: [`AgentConns::handle`] forgets a connection before the event
//! that ends it reaches the scheduler, so that an id the scheduler reuses
//! inside that very call is never confused with the old one.

use std::collections::HashMap;

use sched::{ConnId, Event, SchedError, Scheduler, Time};

/// The agent's name of a connection: its transport and the wire id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wire {
    /// The transport (which agent).
    pub transport: String,
    /// The id the agent knows the connection by.
    pub id: u64,
}

/// Both names of every connection the scheduler and an agent share.
#[derive(Debug, Default)]
pub struct AgentConns {
    next: u64,
    by_conn: HashMap<ConnId, Wire>,
    by_wire: HashMap<Wire, ConnId>,
}

impl AgentConns {
    /// A fresh wire id for the scheduler's new connection `conn`.
    pub fn open(&mut self, conn: ConnId, transport: &str) -> u64 {
        self.forget(conn);
        self.next += 1;
        let wire = Wire {
            transport: transport.to_string(),
            id: self.next,
        };
        self.by_wire.insert(wire.clone(), conn);
        self.by_conn.insert(conn, wire);
        self.next
    }

    /// The agent's name for `conn`.
    pub fn wire(&self, conn: ConnId) -> Option<&Wire> {
        self.by_conn.get(&conn)
    }

    /// The scheduler's connection that wire id `id` of `transport` names,
    /// if the scheduler still has it.
    pub fn resolve(&self, transport: &str, id: u64) -> Option<ConnId> {
        self.by_wire
            .get(&Wire {
                transport: transport.to_string(),
                id,
            })
            .copied()
    }

    /// Forgets `conn` (the scheduler closed it, or is about to forget it);
    /// its wire name, to send the agent a `Close`.
    pub fn forget(&mut self, conn: ConnId) -> Option<Wire> {
        let wire = self.by_conn.remove(&conn)?;
        self.by_wire.remove(&wire);
        Some(wire)
    }

    /// Every connection of `transport`'s agent.
    pub fn of_transport(&self, transport: &str) -> Vec<ConnId> {
        let mut v: Vec<ConnId> = self
            .by_conn
            .iter()
            .filter(|(_, w)| w.transport == transport)
            .map(|(c, _)| *c)
            .collect();
        v.sort_unstable();
        v
    }

    /// Feeds `ev` to the scheduler, forgetting first the connection it ends.
    pub fn handle(
        &mut self,
        sched: &mut Scheduler,
        now: Time,
        ev: Event,
    ) -> Result<(), SchedError> {
        if let Some(c) = ends(&ev) {
            self.forget(c);
        }
        sched.handle(now, ev)
    }
}

/// The connection that the scheduler forgets when it takes `ev`.
fn ends(ev: &Event) -> Option<ConnId> {
    match ev {
        Event::ConnectionFailed { conn, .. }
        | Event::ConnectionLost { conn, .. }
        | Event::ConnectionClosed { conn } => Some(*conn),
        Event::DeliveryDone {
            conn,
            conn_failed: true,
            ..
        } => Some(*conn),
        _ => None,
    }
}

#[cfg(test)]
#[path = "agentconn_tests.rs"]
mod tests;
