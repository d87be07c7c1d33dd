//! One change to the sled queue: the item, the index entry that lists it and the counters,
//! inside one transaction over the four trees (layout in `mod.rs`).
//!
//! Counter changes and lot edits are collected while the change runs and written once at the
//! end: a delivery of 100 records from one lot rewrites the lot once, not 100 times.

use super::codec;
use super::layout::{self, Count};
use super::{Item, QueueKey, Sent, State};
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use std::cell::RefCell;
use std::collections::HashMap;

pub(super) type TxResult<T> = Result<T, ConflictableTransactionError<String>>;

/// The keys of one lot, as read (or created) in this transaction.
struct LotEdit {
    keys: Vec<Vec<u8>>,
    changed: bool,
}

/// The four trees, inside a transaction.
pub(super) struct Tx<'a> {
    pub items: &'a TransactionalTree,
    pub pending: &'a TransactionalTree,
    pub rejected: &'a TransactionalTree,
    pub meta: &'a TransactionalTree,
    deltas: RefCell<HashMap<Vec<u8>, i64>>,
    lots: RefCell<HashMap<Vec<u8>, LotEdit>>,
}

fn abort(reason: String) -> ConflictableTransactionError<String> {
    ConflictableTransactionError::Abort(reason)
}

impl<'a> Tx<'a> {
    pub fn new(
        items: &'a TransactionalTree,
        pending: &'a TransactionalTree,
        rejected: &'a TransactionalTree,
        meta: &'a TransactionalTree,
    ) -> Self {
        Self {
            items,
            pending,
            rejected,
            meta,
            deltas: RefCell::default(),
            lots: RefCell::default(),
        }
    }

    /// The item of a key and the lot that lists it (0 for a rejected item).
    pub fn item(&self, key: &QueueKey) -> TxResult<Option<(Item, u64)>> {
        match self.items.get(key.as_bytes())? {
            None => Ok(None),
            Some(bytes) => codec::decode(&bytes)
                .map(Some)
                .map_err(|e| abort(format!("item {key}: {e}"))),
        }
    }

    /// The item of a key if it is pending at the version sent.
    pub fn sent_item(&self, sent: &Sent) -> TxResult<Option<(Item, u64)>> {
        Ok(self
            .item(&sent.key)?
            .filter(|(i, _)| i.version == sent.version && i.state == State::Pending))
    }

    /// Stores an item without touching the indexes.
    pub fn put(&self, key: &QueueKey, item: &Item, lot: u64) -> TxResult<()> {
        self.items
            .insert(key.as_bytes(), codec::encode(item, lot))?;
        Ok(())
    }

    pub fn count(&self, interface: &str, count: Count, delta: i64) {
        *self
            .deltas
            .borrow_mut()
            .entry(layout::count_key(interface, count))
            .or_default() += delta;
    }

    /// Edits the keys of a lot. A `fresh` lot has an id no stored lot can have, so there is
    /// nothing to read.
    fn edit_lot(
        &self,
        entry: Vec<u8>,
        fresh: bool,
        edit: impl FnOnce(&mut Vec<Vec<u8>>),
    ) -> TxResult<()> {
        let mut lots = self.lots.borrow_mut();
        let lot = match lots.entry(entry) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let keys = match fresh {
                    true => Vec::new(),
                    false => match self.pending.get(v.key())? {
                        Some(bytes) => layout::decode_lot(&bytes).map_err(abort)?,
                        None => Vec::new(),
                    },
                };
                v.insert(LotEdit {
                    keys,
                    changed: false,
                })
            }
        };
        edit(&mut lot.keys);
        lot.changed = true;
        Ok(())
    }

    /// Takes an item out of whichever index lists it.
    pub fn unindex(&self, key: &QueueKey, item: &Item, lot: u64) -> TxResult<()> {
        match item.state {
            State::Pending => {
                let entry = layout::pending_key(&item.interface, item.queued_at_ms, lot);
                self.edit_lot(entry, false, |keys| {
                    keys.retain(|k| k.as_slice() != key.as_bytes())
                })?;
                self.count(&item.interface, Count::Pending, -1);
            }
            State::Rejected => {
                self.rejected
                    .remove(layout::rejected_key(&item.interface, key.as_bytes()))?;
                self.count(&item.interface, Count::Rejected, -1);
            }
        }
        Ok(())
    }

    /// Stores an item and lists it in the index of its state: a pending item in `lot`.
    pub fn index(&self, key: &QueueKey, item: &Item, lot: u64, fresh: bool) -> TxResult<()> {
        match item.state {
            State::Pending => {
                self.put(key, item, lot)?;
                let entry = layout::pending_key(&item.interface, item.queued_at_ms, lot);
                self.edit_lot(entry, fresh, |keys| keys.push(key.as_bytes().to_vec()))?;
                self.count(&item.interface, Count::Pending, 1);
            }
            State::Rejected => {
                self.put(key, item, 0)?;
                self.rejected
                    .insert(layout::rejected_key(&item.interface, key.as_bytes()), &[])?;
                self.count(&item.interface, Count::Rejected, 1);
            }
        }
        Ok(())
    }

    /// Writes the collected counter changes and lot edits.
    pub fn finish(&self) -> TxResult<()> {
        for (k, delta) in self.deltas.borrow().iter().filter(|(_, d)| **d != 0) {
            let now = layout::decode_u64(self.meta.get(k)?.as_deref());
            self.meta.insert(
                k.as_slice(),
                &now.saturating_add_signed(*delta).to_be_bytes(),
            )?;
        }
        for (entry, lot) in self.lots.borrow().iter().filter(|(_, l)| l.changed) {
            if lot.keys.is_empty() {
                self.pending.remove(entry.as_slice())?;
            } else {
                self.pending
                    .insert(entry.as_slice(), layout::encode_lot(&lot.keys))?;
            }
        }
        Ok(())
    }
}

/// At most this many keys share one lot, so that delivering part of a lot rewrites a small
/// entry.
const MAX_LOT: usize = 512;

/// The lots an upsert opens: records of one interface queued at one time share a lot of at
/// most [`MAX_LOT`] keys, named by the version of its first record.
#[derive(Default)]
pub(super) struct Lots<'a> {
    open: Vec<(&'a str, u64, u64, usize)>,
}

impl<'a> Lots<'a> {
    /// The lot of the next record: an open one of its interface and time with room, or a new
    /// one named by `version`.
    pub fn place(&mut self, interface: &'a str, queued_at_ms: u64, version: u64) -> u64 {
        let found = self
            .open
            .iter_mut()
            .find(|(i, q, _, n)| *i == interface && *q == queued_at_ms && *n < MAX_LOT);
        match found {
            Some((_, _, lot, n)) => {
                *n += 1;
                *lot
            }
            None => {
                self.open.push((interface, queued_at_ms, version, 1));
                version
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lots_group_by_interface_and_time_up_to_the_cap() {
        let mut lots = Lots::default();
        let placed: Vec<u64> = (1..=MAX_LOT as u64 + 1)
            .map(|v| lots.place("gl", 5, v))
            .collect();
        assert!(placed[..MAX_LOT].iter().all(|&l| l == 1));
        assert_eq!(
            placed[MAX_LOT],
            MAX_LOT as u64 + 1,
            "a full lot opens another"
        );
        assert_eq!(lots.place("vendors", 5, 900), 900, "another interface");
        assert_eq!(lots.place("gl", 4, 901), 901, "another time");
        assert_eq!(lots.place("gl", 5, 902), MAX_LOT as u64 + 1);
    }
}
