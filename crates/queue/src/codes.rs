//! The queue's meaning in stored numbers, written once for both engines: the codes of
//! `item.state` and `settled.state`, what a receipt line's stored facts say (D38), and the
//! steps receipts are pruned in. An engine stores and reads these numbers; only this file
//! says what they mean, so the two cannot come to disagree.

use crate::receipt::ReceiptState;
use crate::{Backoff, State, Stats};

impl State {
    /// Every state, in the order of their codes.
    pub const ALL: [State; 3] = [State::Pending, State::Rejected, State::Quarantined];

    /// Its code in the `item.state` column.
    pub const fn code(self) -> i16 {
        match self {
            State::Pending => 0,
            State::Rejected => 1,
            State::Quarantined => 2,
        }
    }

    /// The state a stored code stands for; `None` for a code no version of ap-intake writes
    /// (a damaged row, or one a newer version wrote), which the engines quarantine (D29).
    pub fn from_code(code: i64) -> Option<State> {
        State::ALL.into_iter().find(|s| i64::from(s.code()) == code)
    }

    /// Its name, as counters, logs and `status` say it.
    pub const fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Rejected => "rejected",
            State::Quarantined => "quarantined",
        }
    }
}

// The codes as SQL text, for statements written whole at compile time
// (`concat!("... WHERE state = ", pending!())`): a statement uses a partial index only when it
// names the index's condition literally, and a cached statement is keyed by its text. The
// engines write no state number of their own (`tests/it/tidy.rs` fails on one), and the test
// below ties each to its `State`.

/// `item.state` of a pending item, as SQL text.
macro_rules! pending {
    () => {
        "0"
    };
}
/// `item.state` of a rejected item, as SQL text.
macro_rules! rejected {
    () => {
        "1"
    };
}
/// `item.state` of a quarantined item, as SQL text.
macro_rules! quarantined {
    () => {
        "2"
    };
}
/// The parked states (rejected, quarantined) as an SQL list.
macro_rules! parked {
    () => {
        "(1, 2)"
    };
}
/// Every state as an SQL list: a row whose state is not in it is damaged.
macro_rules! known_states {
    () => {
        "(0, 1, 2)"
    };
}
/// `outcome.state` of a version a later one replaced before it was delivered (D48); the
/// other outcomes keep the codes of their states ([`outcome_code`]).
macro_rules! superseded {
    () => {
        "4"
    };
}
/// What the `last_error` of a quarantined item starts with.
macro_rules! quarantined_prefix {
    () => {
        "quarantined: "
    };
}
/// The `counter.kind` an item in the state column `$col` is counted under, as an SQL
/// expression: its state's [`State::name`]; NULL for a code no version writes (D29), which no
/// counter counts until the sweep at start has quarantined it.
macro_rules! counter_kind {
    ($col:literal) => {
        concat!(
            "CASE ",
            $col,
            " WHEN ",
            $crate::codes::pending!(),
            " THEN 'pending' WHEN ",
            $crate::codes::rejected!(),
            " THEN 'rejected' WHEN ",
            $crate::codes::quarantined!(),
            " THEN 'quarantined' END"
        )
    };
}
pub(crate) use {
    counter_kind, known_states, parked, pending, quarantined, quarantined_prefix, rejected,
    superseded,
};

/// The `counter.kind` of deliveries: not a state (a delivered item is gone), the number of
/// items that left the queue delivered.
pub const DELIVERED_KIND: &str = "delivered";

impl Stats {
    /// An interface's stats from its `counter` rows, (kind, n): the rows of a kind are summed
    /// (PostgreSQL keeps one per database session, `pg/counts.rs`); a kind without any is 0.
    pub fn counted(
        rows: &[(String, i64)],
        oldest_pending_ms: Option<u64>,
        backoff: Backoff,
    ) -> Self {
        let count = |kind: &str| {
            let n: i64 = rows.iter().filter(|(k, _)| k == kind).map(|(_, n)| n).sum();
            u64::try_from(n).unwrap_or(0)
        };
        Self {
            pending: count(State::Pending.name()),
            rejected: count(State::Rejected.name()),
            quarantined: count(State::Quarantined.name()),
            delivered: count(DELIVERED_KIND),
            oldest_pending_ms,
            backoff,
        }
    }
}

/// The SQL list of every state code, `(0, 1, 2)`: a row whose state is not in it is damaged.
pub const KNOWN_STATES: &str = known_states!();

/// Why a row with an unknown state code is quarantined (D29); its `last_error` is this after
/// `quarantined: `.
pub fn unknown_state(shown: &str) -> String {
    format!("unknown state {shown}")
}

/// The `last_error` of an item quarantined for `why` (D29).
pub fn quarantined_because(why: &str) -> String {
    format!("{}{why}", quarantined_prefix!())
}

/// The reason a version dropped by an operator leaves in its receipt (D38): the item's last
/// error, and that it was dropped.
pub fn dropped_because(last_error: Option<&str>) -> String {
    format!("{}; dropped by an operator", last_error.unwrap_or("-"))
}

/// `settled.state` of a delivered version. A version an operator dropped keeps the code of
/// the state it was dropped from (rejected, quarantined).
pub const SETTLED_DELIVERED: i16 = 3;

/// The code of an outcome in the feed's `outcome.state` (D48): a rejected or quarantined
/// version keeps its state's code, a delivered one [`SETTLED_DELIVERED`]'s; pending is no
/// outcome.
pub fn outcome_code(state: ReceiptState) -> Option<i16> {
    match state {
        ReceiptState::Pending => None,
        ReceiptState::Rejected => Some(State::Rejected.code()),
        ReceiptState::Quarantined => Some(State::Quarantined.code()),
        ReceiptState::Delivered => Some(SETTLED_DELIVERED),
        ReceiptState::Superseded => superseded!().parse().ok(),
    }
}

/// The outcome a stored `outcome.state` stands for.
pub fn outcome_state(code: i64) -> Option<ReceiptState> {
    [
        ReceiptState::Rejected,
        ReceiptState::Quarantined,
        ReceiptState::Delivered,
        ReceiptState::Superseded,
    ]
    .into_iter()
    .find(|s| outcome_code(*s).map(i64::from) == Some(code))
}

/// A time in unix milliseconds as the engines store it (a signed 64-bit integer).
pub fn stored_ms(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Now, as the engines store a time.
pub fn stored_now() -> i64 {
    stored_ms(crate::now_ms())
}

/// Receipts of at most this many requests go in one pruning step, so that pruning a busy
/// week never holds the writer (or a PostgreSQL transaction) long.
pub const PRUNE_REQUESTS: i64 = 50;

/// `settled` rows removed in one pruning step, for the same reason.
pub const PRUNE_SETTLED: i64 = 5000;

/// What the store holds about one record of a receipt: the `settled` row of its version,
/// and the item that holds its key now.
#[derive(Debug, Default)]
pub struct LineFacts {
    /// The version's `settled` row: its code, when (unix ms), the reason.
    pub settled: Option<(i64, Option<u64>, Option<String>)>,
    /// The key's item now: whether it is the line's version, its state code, when it got
    /// there (unix ms), its last error.
    pub current: Option<(bool, i64, Option<u64>, Option<String>)>,
}

/// Where a receipt's record stands, since when, and the reason of a rejected or quarantined
/// one (D38): a settled version is delivered or was dropped from the state it names; the
/// key's current version is in its state; any other version was replaced (D16).
pub fn receipt_line(facts: LineFacts) -> (ReceiptState, Option<u64>, Option<String>) {
    let parked = |code: i64| match State::from_code(code) {
        Some(State::Rejected) => Some(ReceiptState::Rejected),
        Some(State::Quarantined) => Some(ReceiptState::Quarantined),
        _ => None,
    };
    let (state, at, reason) = match facts {
        LineFacts {
            settled: Some((code, at, reason)),
            ..
        } => (parked(code).unwrap_or(ReceiptState::Delivered), at, reason),
        LineFacts {
            current: Some((true, code, at, reason)),
            ..
        } => {
            // A code no version writes is quarantined at the next start (D29).
            let state = match State::from_code(code) {
                Some(State::Pending) => ReceiptState::Pending,
                _ => parked(code).unwrap_or(ReceiptState::Quarantined),
            };
            (state, at, reason)
        }
        LineFacts {
            current: Some((false, _, at, _)),
            ..
        } => (ReceiptState::Superseded, at, None),
        LineFacts { current: None, .. } => (ReceiptState::Superseded, None, None),
    };
    let reason = match state {
        ReceiptState::Rejected | ReceiptState::Quarantined => reason,
        _ => None,
    };
    (state, at, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_in_sql_are_the_states_codes() {
        assert_eq!(pending!(), State::Pending.code().to_string());
        assert_eq!(rejected!(), State::Rejected.code().to_string());
        assert_eq!(quarantined!(), State::Quarantined.code().to_string());
        let parked = format!(
            "({}, {})",
            State::Rejected.code(),
            State::Quarantined.code()
        );
        assert_eq!(parked!(), parked);
        assert_eq!(
            quarantined_because("x"),
            format!("{}x", quarantined_prefix!())
        );
    }

    #[test]
    fn each_state_is_counted_under_its_name_and_an_unknown_code_under_none() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        let kind = |code: i64| -> Option<String> {
            db.query_row(concat!("SELECT ", counter_kind!("?1")), [code], |r| {
                r.get(0)
            })
            .unwrap()
        };
        for s in State::ALL {
            assert_eq!(kind(i64::from(s.code())).as_deref(), Some(s.name()));
            assert_ne!(s.name(), DELIVERED_KIND);
        }
        assert_eq!(kind(i64::from(SETTLED_DELIVERED)), None);
        assert_eq!(kind(-1), None);
    }

    #[test]
    fn every_state_reads_back_from_its_code_and_no_other_code_is_a_state() {
        for s in State::ALL {
            assert_eq!(State::from_code(i64::from(s.code())), Some(s));
        }
        let listed: Vec<String> = State::ALL.iter().map(|s| s.code().to_string()).collect();
        assert_eq!(KNOWN_STATES, format!("({})", listed.join(", ")));
        for code in [-1, 3, 7, i64::MAX] {
            assert_eq!(State::from_code(code), None, "{code}");
        }
        assert!(i64::from(SETTLED_DELIVERED) > i64::from(State::Quarantined.code()));
    }

    #[test]
    fn every_outcome_has_a_code_of_its_own_and_reads_back_from_it() {
        use ReceiptState::*;
        let mut codes = Vec::new();
        for s in [Rejected, Quarantined, Delivered, Superseded] {
            let code = outcome_code(s).unwrap();
            assert_eq!(outcome_state(i64::from(code)), Some(s));
            codes.push(code);
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), 4);
        assert_eq!(outcome_code(Pending), None);
        assert_eq!(outcome_state(i64::from(State::Pending.code())), None);
        assert_eq!(superseded!(), outcome_code(Superseded).unwrap().to_string());
    }

    #[test]
    fn a_receipt_line_reads_its_settled_row_first_then_the_current_item() {
        let why = || Some("why".to_string());
        let settled = |code| LineFacts {
            settled: Some((code, Some(5), why())),
            current: Some((true, 0, Some(9), None)),
        };
        assert_eq!(
            receipt_line(settled(i64::from(SETTLED_DELIVERED))),
            (ReceiptState::Delivered, Some(5), None)
        );
        assert_eq!(
            receipt_line(settled(1)),
            (ReceiptState::Rejected, Some(5), why())
        );
        let now = |same, code| LineFacts {
            settled: None,
            current: Some((same, code, Some(9), why())),
        };
        assert_eq!(
            receipt_line(now(true, 0)),
            (ReceiptState::Pending, Some(9), None)
        );
        assert_eq!(
            receipt_line(now(true, 2)),
            (ReceiptState::Quarantined, Some(9), why())
        );
        assert_eq!(
            receipt_line(now(true, 7)),
            (ReceiptState::Quarantined, Some(9), why())
        );
        assert_eq!(
            receipt_line(now(false, 1)),
            (ReceiptState::Superseded, Some(9), None)
        );
        assert_eq!(
            receipt_line(LineFacts::default()),
            (ReceiptState::Superseded, None, None)
        );
    }
}
