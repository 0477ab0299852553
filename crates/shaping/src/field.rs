//! The fields a policy counts by, the values of one connection, and a
//! key's name (a policy's fields and their values).

use std::fmt;

/// A field a policy can count by or test in a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// The local source address of the connection.
    LocalIp = 0,
    /// The grouping of the recipient's domain or MX host names.
    Grouping = 1,
    /// The message's tenant.
    TenantId = 2,
    /// The message's job (campaign).
    JobId = 3,
    /// The recipient's domain.
    RecipientDomain = 4,
    /// The remote MX host name connected to.
    RemoteMx = 5,
    /// The remote address connected to.
    RemoteIp = 6,
    /// The master.cf transport.
    Transport = 7,
}

/// Number of fields.
pub const FIELDS: usize = 8;

impl Field {
    /// Every field, in index order.
    pub const ALL: [Field; FIELDS] = [
        Field::LocalIp,
        Field::Grouping,
        Field::TenantId,
        Field::JobId,
        Field::RecipientDomain,
        Field::RemoteMx,
        Field::RemoteIp,
        Field::Transport,
    ];

    /// The name used in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            Field::LocalIp => "localip",
            Field::Grouping => "grouping",
            Field::TenantId => "tenantid",
            Field::JobId => "jobid",
            Field::RecipientDomain => "recipientdomain",
            Field::RemoteMx => "remotemx",
            Field::RemoteIp => "remoteip",
            Field::Transport => "transport",
        }
    }

    /// The field called `name` in the policy file.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Index into a [`Binding`].
    pub fn idx(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldSet(pub u8);

impl FieldSet {
    /// Adds a field.
    pub fn insert(&mut self, f: Field) {
        self.0 |= 1 << f.idx();
    }

    /// Whether the set holds `f`.
    pub fn contains(self, f: Field) -> bool {
        self.0 & (1 << f.idx()) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The field values of one connection or transaction; "" is "no value",
/// itself a value that all such mail shares (as tenant-less mail shares
/// one tenant key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Binding {
    /// Values indexed by [`Field::idx`].
    pub values: [Box<str>; FIELDS],
}

impl Binding {
    /// The value of `f`.
    pub fn get(&self, f: Field) -> &str {
        &self.values[f.idx()]
    }

    /// Sets the value of `f`.
    pub fn set(&mut self, f: Field, v: &str) {
        if *self.values[f.idx()] != *v {
            self.values[f.idx()] = v.into();
        }
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for field in Field::ALL {
            let v = self.get(field);
            if v.is_empty() {
                continue;
            }
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{field}={v}")?;
        }
        Ok(())
    }
}

/// A key: a policy's fields and their values in one binding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyName {
    /// The policy's fields.
    pub fields: Vec<Field>,
    /// Their values, in the same order.
    pub values: Vec<Box<str>>,
}

impl fmt::Display for KeyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.fields.iter().zip(&self.values).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bindings_print_what_is_set() {
        for f in Field::ALL {
            assert_eq!(Field::from_name(f.name()), Some(f));
        }
        assert_eq!(Field::from_name("localIP"), None);
        let mut b = Binding::default();
        b.set(Field::LocalIp, "127.0.0.2");
        b.set(Field::Grouping, "orange");
        assert_eq!(b.to_string(), "localip=127.0.0.2 grouping=orange");
        let mut s = FieldSet::default();
        s.insert(Field::JobId);
        assert!(s.contains(Field::JobId) && !s.contains(Field::TenantId));
    }
}
