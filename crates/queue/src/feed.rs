//! The outcome feed (D48): every change of a record's state that a client would want to
//! hear of (delivered, rejected, quarantined, superseded), appended in the transaction that
//! makes the change, listed per client, oldest first, from a cursor.
//!
//! A record's outcome is written with the record's origin (request id, index, client), which
//! the item carries from the request that queued it; a record queued without a receipt
//! (`[receipts] retention_days = 0`) has no origin and no outcome. A version replaced while
//! it was on its way is listed superseded when it is replaced; its receipt later says
//! delivered if the platform took it (D18), and the feed does not repeat that.
//!
//! A page reads each state with its own statement, so all of them are bounded by one place
//! read first: a statement that saw a later commit than another could otherwise list an
//! outcome past one the other missed.
//!
//! Positions: SQLite numbers outcomes as its one writer commits them (the bound is the
//! highest number). PostgreSQL's nodes
//! commit in any order, so an outcome's place is its transaction id, then its number, and a
//! reader is shown only what transactions older than every one still running wrote
//! (`pg_snapshot_xmin`): whatever commits later has a greater place than anything shown, so
//! a cursor never passes a change still to come. One bound serves every state a page reads.
//!
//! Each state is read through an index of its own (client, state, place), so asking for the
//! rare rejections does not wade through the many deliveries.

use crate::receipt::ReceiptState;

/// A place in the feed: after this outcome. SQLite's has no transaction id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    /// PostgreSQL's transaction id of the outcome (`xid8`); `None` on SQLite.
    pub tx: Option<u64>,
    /// The outcome's number.
    pub seq: u64,
}

impl Position {
    /// The cursor clients pass back (`after`): opaque to them, `s<seq>` or `p<tx>.<seq>`.
    pub fn cursor(&self) -> String {
        match self.tx {
            None => format!("s{}", self.seq),
            Some(tx) => format!("p{tx}.{}", self.seq),
        }
    }

    /// A cursor [`Position::cursor`] wrote; `None` for any other text.
    pub fn parse(cursor: &str) -> Option<Self> {
        let digits = |t: &str| {
            (!t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok())
                .flatten()
        };
        if let Some(seq) = cursor.strip_prefix('s') {
            return Some(Self {
                tx: None,
                seq: digits(seq)?,
            });
        }
        let (tx, seq) = cursor.strip_prefix('p')?.split_once('.')?;
        Some(Self {
            tx: Some(digits(tx)?),
            seq: digits(seq)?,
        })
    }
}

/// One change of a record's state, as the feed lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Its place in the feed.
    pub position: Position,
    /// The request that queued the record (D4).
    pub request_id: String,
    /// The record's index in that request.
    pub index: u32,
    /// Its queue key (D15).
    pub key: String,
    /// The interface id.
    pub interface: String,
    /// What became of it.
    pub state: ReceiptState,
    /// The platform's or the queue's reason, for rejected and quarantined.
    pub reason: Option<String>,
    /// When (unix ms).
    pub at_ms: u64,
}

/// What a client asks of the feed.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Whose records.
    pub client: &'a str,
    /// The states wanted (any of delivered, rejected, quarantined, superseded).
    pub states: &'a [ReceiptState],
    /// Only this interface's (its id).
    pub interface: Option<&'a str>,
    /// After this place.
    pub after: Option<Position>,
    /// At most this many.
    pub limit: usize,
}

/// A page of the feed and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The outcomes, oldest first.
    pub outcomes: Vec<Outcome>,
    /// Where to go on from: after the last outcome listed, or where the request started
    /// when it listed none (the feed's end for now).
    pub next: Position,
}

/// A page from what an engine read for each state of `request` (each at most `limit`
/// outcomes after the cursor, oldest first): merged by place and cut at `limit`. Every
/// outcome up to the last one listed was read, whatever its state, as each state's first
/// `limit` were. `origin` is the engine's place before any outcome.
pub fn merge(request: &Request<'_>, read: Vec<Outcome>, origin: Position) -> Page {
    let mut all = read;
    all.sort_by_key(|o| o.position);
    all.dedup_by_key(|o| o.position);
    all.truncate(request.limit);
    let next = all
        .last()
        .map(|o| o.position)
        .or(request.after)
        .unwrap_or(origin);
    Page {
        outcomes: all,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_nothing_else_is_one() {
        for p in [
            Position { tx: None, seq: 0 },
            Position { tx: None, seq: 42 },
            Position {
                tx: Some(7),
                seq: u64::MAX,
            },
        ] {
            assert_eq!(Position::parse(&p.cursor()), Some(p));
        }
        for bad in [
            "",
            "s",
            "s-1",
            "s1.2",
            "p1",
            "p.1",
            "p1.",
            "x1",
            "s+1",
            "s 1",
            "s1 ",
            "p1.2.3",
            "s99999999999999999999999",
            "s18446744073709551616",
        ] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
    }
}
