//! Slab storage with typed ids.
//!
//! Mutually referring scheduler structures (messages, entries, destinations,
//! connections, hosts) live in slabs and name each other by small typed ids,
//! so that there are no `Rc<RefCell<_>>` cycles and iteration order is the
//! index order, which is deterministic.
//!
//! Panics: indexing with an id whose slot is free is a broken invariant and
//! panics naming the slab (`sched::slab`).
//! Limits: at most `u32::MAX` live items per slab.

use std::marker::PhantomData;

/// A typed index into a [`Slab`].
pub trait Id: Copy + Eq + Ord + std::fmt::Debug {
    /// Builds the id from a raw slot index.
    fn from_index(index: u32) -> Self;
    /// Returns the raw slot index.
    fn index(self) -> u32;
}

/// Declares a `u32` newtype id implementing [`Id`].
macro_rules! typed_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(pub u32);
        impl $crate::slab::Id for $name {
            fn from_index(index: u32) -> Self {
                $name(index)
            }
            fn index(self) -> u32 {
                self.0
            }
        }
    };
}
pub(crate) use typed_id;

/// A vector of optional slots with a free list, addressed by typed ids.
#[derive(Debug, Clone)]
pub struct Slab<I, T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
    _id: PhantomData<I>,
}

impl<I: Id, T> Default for Slab<I, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Id, T> Slab<I, T> {
    /// Creates an empty slab.
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            _id: PhantomData,
        }
    }

    /// Stores `value` and returns its id; freed slots are reused LIFO.
    pub fn insert(&mut self, value: T) -> I {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(value);
            return I::from_index(i);
        }
        let i = u32::try_from(self.slots.len()).expect("sched::slab: more than u32::MAX items");
        self.slots.push(Some(value));
        I::from_index(i)
    }

    /// Removes and returns the item; panics if the slot is free.
    pub fn remove(&mut self, id: I) -> T {
        let v = self.slots[id.index() as usize]
            .take()
            .unwrap_or_else(|| panic!("sched::slab: remove of free slot {id:?}"));
        self.free.push(id.index());
        self.len -= 1;
        v
    }

    /// Returns the item if the slot is live.
    pub fn get(&self, id: I) -> Option<&T> {
        self.slots.get(id.index() as usize).and_then(|s| s.as_ref())
    }

    /// Returns the item mutably if the slot is live.
    pub fn get_mut(&mut self, id: I) -> Option<&mut T> {
        self.slots
            .get_mut(id.index() as usize)
            .and_then(|s| s.as_mut())
    }

    /// True when the id names a live item.
    pub fn contains(&self, id: I) -> bool {
        self.get(id).is_some()
    }

    /// Number of live items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no item is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Live items in index order (deterministic).
    pub fn iter(&self) -> impl Iterator<Item = (I, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (I::from_index(i as u32), v)))
    }

    /// Bytes reserved by the slot vector (for memory accounting).
    pub fn reserved_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<T>>() + self.free.capacity() * 4
    }
}

impl<I: Id, T> std::ops::Index<I> for Slab<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        self.get(id)
            .unwrap_or_else(|| panic!("sched::slab: stale id {id:?}"))
    }
}

impl<I: Id, T> std::ops::IndexMut<I> for Slab<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        self.get_mut(id)
            .unwrap_or_else(|| panic!("sched::slab: stale id {id:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    typed_id!(
        /// Test id.
        TId
    );

    #[test]
    fn insert_remove_reuses_slots() {
        let mut s: Slab<TId, &str> = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(a), "a");
        assert!(!s.contains(a));
        let c = s.insert("c");
        assert_eq!(c, a, "free slot reused");
        assert_eq!(s[b], "b");
        assert_eq!(
            s.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            vec!["c", "b"]
        );
    }

    #[test]
    #[should_panic(expected = "sched::slab")]
    fn stale_index_panics() {
        let mut s: Slab<TId, u8> = Slab::new();
        let a = s.insert(1);
        s.remove(a);
        let _ = s[a];
    }
}
