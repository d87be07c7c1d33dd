//! The admin socket's messages as they cross it (D22, D37): one line of JSON each way, a
//! command and its answer. They are spelled here, apart from [`super::Request`] and
//! [`super::Response`] (what the commands and the service work with) and from the queue's
//! types, so that a renamed field in the queue or the report changes nothing on the socket;
//! `status --json` prints the same payloads (`status/wire.rs` for the report).
//!
//! Every line carries `"version"`, the protocol's version, as its first member. Version 1 is
//! the protocol as it was before it carried one, plus that member: a line without it (from an
//! `ap-intake` or a running service of an earlier release) is read as version 1, and a
//! command without it is answered without it, the only form such an `ap-intake` reads. A
//! line of a higher version than [`VERSION`] is refused, with a message naming both
//! versions: a service answers such a command with an error, a command reports such an
//! answer (and does not fall back to the data directory, which the running service holds).

use crate::queue;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of the protocol this release writes, and the highest it reads.
pub const VERSION: u32 = 1;

/// A command. Its fields carry no numbers: serde reads an internally tagged enum through a
/// buffer, which does not hand back numbers as serde_json's `arbitrary_precision` (on for the
/// whole workspace, for money) gives them to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// The status report.
    Status,
    /// Keys in a state, of one interface (identifier) or all.
    Keys {
        /// The state.
        state: State,
        /// Interface identifier.
        interface: Option<String>,
    },
    /// One item, with its XML.
    Show {
        /// The key in operator form.
        key: String,
    },
    /// Put a rejected or quarantined record back in the queue.
    Requeue {
        /// The key in operator form.
        key: String,
    },
    /// Put every record in a state back.
    RequeueAll {
        /// The state.
        state: State,
    },
    /// Remove a rejected or quarantined record for good.
    Drop {
        /// The key in operator form.
        key: String,
    },
    /// The receipts of a request id (D38).
    Receipts {
        /// The request id.
        request_id: String,
    },
    /// The audit trail from a time on (D50).
    Audit {
        /// Unix ms.
        since_ms: u64,
    },
    /// Queue kept delivered versions again (D49).
    Replay(super::replay::Asked),
    /// Adds an audit record in the sender's name (D50).
    Note {
        /// The action.
        action: String,
        /// Its arguments.
        args: Value,
        /// What it changed.
        changed: Value,
    },
}

/// An answer: an object with one member named after its kind (besides `version`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// The status report, as `status --json` prints it.
    Status(crate::status::wire::Report),
    /// Pending keys, in operator form.
    Keys(Vec<String>),
    /// Rejected or quarantined keys and why each is parked.
    Parked(Vec<Parked>),
    /// One item, or `null`.
    Item(Option<Item>),
    /// How many records went back in the queue.
    Requeued(u64),
    /// Whether the record was removed.
    Dropped(bool),
    /// A request id's receipts.
    Receipts(Vec<Receipt>),
    /// The audit trail (D50), oldest first.
    Audit(Vec<super::audit::Entry>),
    /// An audit record was added (always true: an object, as every answer is).
    Noted(bool),
    /// What a replay did (D49).
    Replayed(super::replay::Done),
    /// The command failed.
    Error(String),
}

/// Where a queued item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for delivery.
    Pending,
    /// Refused by the platform (D18).
    Rejected,
    /// Could not be read back (D29).
    Quarantined,
}

/// A parked record (`status rejected --json`, `status quarantined --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// The key in operator form.
    pub key: String,
    /// The platform's answer, or why it was quarantined.
    pub reason: String,
}

/// One queued record (`status show KEY --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// The interface the latest version came through.
    pub interface: String,
    /// Grows with every upsert of the key.
    pub version: u64,
    /// Pending, rejected or quarantined.
    pub state: State,
    /// When the key became pending (unix ms).
    pub queued_at_ms: u64,
    /// When the latest version was stored (unix ms).
    pub updated_at_ms: u64,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// The last delivery failure or the platform's rejection.
    pub last_error: Option<String>,
    /// The record's XML element (D19).
    pub xml: String,
}

/// A request's receipt as operators' commands receive it (D38); `status request --json`
/// prints the clients' form instead (`status/receipt.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The request's id.
    pub request_id: String,
    /// The API key that sent it (empty in sandbox).
    pub api_key: String,
    /// When it was received (unix ms).
    pub received_at_ms: u64,
    /// The interface id.
    pub interface: String,
    /// Each record it queued, by index.
    pub records: Vec<ReceiptRecord>,
}

/// One record of a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptRecord {
    /// Its index in the request's `record` array.
    pub index: u32,
    /// Its queue key.
    pub key: String,
    /// Where it stands.
    pub state: ReceiptState,
    /// When it reached that state (unix ms), where known.
    pub updated_at_ms: Option<u64>,
    /// Why it is rejected or quarantined.
    pub reason: Option<String>,
}

/// Where one record of a receipt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptState {
    /// Queued, not yet taken by the platform.
    Pending,
    /// The platform accepted it.
    Delivered,
    /// The platform refused it.
    Rejected,
    /// It could not be read back.
    Quarantined,
    /// A later record with the same key replaced it before delivery.
    Superseded,
}

/// Why a line cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// A version this release does not know.
    #[error(
        "admin protocol version {0} is unknown to ap-intake {version}, which reads version {VERSION} and earlier",
        version = env!("CARGO_PKG_VERSION")
    )]
    Version(String),
    /// Not a message of the protocol.
    #[error("{0}")]
    Malformed(#[from] serde_json::Error),
}

/// `message` as one line of the protocol: its JSON with `"version"` first (unless
/// `versioned` is false: the answer to a command without one), and a newline.
pub fn to_line<T: Serialize>(message: &T, versioned: bool) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(message)?;
    if let (true, Value::Object(members)) = (versioned, &mut value) {
        members.shift_insert(0, "version".into(), VERSION.into());
    }
    let mut line = serde_json::to_vec(&value)?;
    line.push(b'\n');
    Ok(line)
}

/// A message read from a line.
#[derive(Debug)]
pub struct Received<T> {
    /// The message.
    pub message: T,
    /// Whether the line said its version (a line of an earlier release does not).
    pub versioned: bool,
}

/// The message of a line: version 1 when it has no `"version"`, refused when its version is
/// not one this release reads.
pub fn from_line<T: DeserializeOwned>(line: &str) -> Result<Received<T>, LineError> {
    let mut value: Value = serde_json::from_str(line)?;
    let version = value
        .as_object_mut()
        .and_then(|m| m.shift_remove("version"));
    if let Some(version) = &version {
        match version.as_u64() {
            Some(v) if (1..=u64::from(VERSION)).contains(&v) => {}
            _ => return Err(LineError::Version(version.to_string())),
        }
    }
    Ok(Received {
        message: serde_json::from_value(value)?,
        versioned: version.is_some(),
    })
}

impl From<queue::State> for State {
    fn from(s: queue::State) -> Self {
        match s {
            queue::State::Pending => Self::Pending,
            queue::State::Rejected => Self::Rejected,
            queue::State::Quarantined => Self::Quarantined,
        }
    }
}

impl From<State> for queue::State {
    fn from(s: State) -> Self {
        match s {
            State::Pending => Self::Pending,
            State::Rejected => Self::Rejected,
            State::Quarantined => Self::Quarantined,
        }
    }
}

impl From<&super::Request> for Request {
    fn from(r: &super::Request) -> Self {
        use super::Request as R;
        match r {
            R::Status => Self::Status,
            R::Keys { state, interface } => Self::Keys {
                state: (*state).into(),
                interface: interface.clone(),
            },
            R::Show { key } => Self::Show { key: key.clone() },
            R::Requeue { key } => Self::Requeue { key: key.clone() },
            R::RequeueAll { state } => Self::RequeueAll {
                state: (*state).into(),
            },
            R::Drop { key } => Self::Drop { key: key.clone() },
            R::Receipts { request_id } => Self::Receipts {
                request_id: request_id.clone(),
            },
            R::Audit { since_ms } => Self::Audit {
                since_ms: *since_ms,
            },
            R::Replay(asked) => Self::Replay(asked.clone()),
            R::Note {
                action,
                args,
                changed,
            } => Self::Note {
                action: action.clone(),
                args: args.clone(),
                changed: changed.clone(),
            },
        }
    }
}

impl From<Request> for super::Request {
    fn from(r: Request) -> Self {
        match r {
            Request::Status => Self::Status,
            Request::Keys { state, interface } => Self::Keys {
                state: state.into(),
                interface,
            },
            Request::Show { key } => Self::Show { key },
            Request::Requeue { key } => Self::Requeue { key },
            Request::RequeueAll { state } => Self::RequeueAll {
                state: state.into(),
            },
            Request::Drop { key } => Self::Drop { key },
            Request::Receipts { request_id } => Self::Receipts { request_id },
            Request::Audit { since_ms } => Self::Audit { since_ms },
            Request::Replay(asked) => Self::Replay(asked),
            Request::Note {
                action,
                args,
                changed,
            } => Self::Note {
                action,
                args,
                changed,
            },
        }
    }
}

impl From<&super::Response> for Response {
    fn from(r: &super::Response) -> Self {
        use super::Response as R;
        match r {
            R::Status(report) => Self::Status(report.into()),
            R::Keys(keys) => Self::Keys(keys.clone()),
            R::Parked(parked) => Self::Parked(parked.iter().map(Parked::from).collect()),
            R::Item(item) => Self::Item(item.as_ref().map(Item::from)),
            R::Requeued(n) => Self::Requeued(u64::try_from(*n).unwrap_or(u64::MAX)),
            R::Dropped(done) => Self::Dropped(*done),
            R::Receipts(receipts) => Self::Receipts(receipts.iter().map(Receipt::from).collect()),
            R::Audit(records) => Self::Audit(records.iter().map(Into::into).collect()),
            R::Noted => Self::Noted(true),
            R::Replayed(done) => Self::Replayed(done.clone()),
            R::Error(e) => Self::Error(e.clone()),
        }
    }
}

impl From<Response> for super::Response {
    fn from(r: Response) -> Self {
        match r {
            Response::Status(report) => Self::Status(report.into()),
            Response::Keys(keys) => Self::Keys(keys),
            Response::Parked(parked) => Self::Parked(parked.into_iter().map(Into::into).collect()),
            Response::Item(item) => Self::Item(item.map(Into::into)),
            Response::Requeued(n) => Self::Requeued(usize::try_from(n).unwrap_or(usize::MAX)),
            Response::Dropped(done) => Self::Dropped(done),
            Response::Receipts(receipts) => {
                Self::Receipts(receipts.into_iter().map(Into::into).collect())
            }
            Response::Audit(entries) => Self::Audit(entries.into_iter().map(Into::into).collect()),
            Response::Noted(_) => Self::Noted,
            Response::Replayed(done) => Self::Replayed(done),
            Response::Error(e) => Self::Error(e),
        }
    }
}

impl From<&super::ParkedRecord> for Parked {
    fn from(p: &super::ParkedRecord) -> Self {
        Self {
            key: p.key.clone(),
            reason: p.reason.clone(),
        }
    }
}

impl From<Parked> for super::ParkedRecord {
    fn from(p: Parked) -> Self {
        Self {
            key: p.key,
            reason: p.reason,
        }
    }
}

impl From<&queue::Item> for Item {
    fn from(i: &queue::Item) -> Self {
        Self {
            interface: i.interface.clone(),
            version: i.version,
            state: i.state.into(),
            queued_at_ms: i.queued_at_ms,
            updated_at_ms: i.updated_at_ms,
            attempts: i.attempts,
            last_error: i.last_error.clone(),
            xml: i.xml.clone(),
        }
    }
}

impl From<Item> for queue::Item {
    fn from(i: Item) -> Self {
        Self {
            interface: i.interface,
            version: i.version,
            state: i.state.into(),
            queued_at_ms: i.queued_at_ms,
            updated_at_ms: i.updated_at_ms,
            attempts: i.attempts,
            last_error: i.last_error,
            xml: i.xml,
        }
    }
}

impl From<&queue::receipt::Receipt> for Receipt {
    fn from(r: &queue::receipt::Receipt) -> Self {
        Self {
            request_id: r.request_id.clone(),
            api_key: r.api_key.clone(),
            received_at_ms: r.received_at_ms,
            interface: r.interface.clone(),
            records: r.records.iter().map(ReceiptRecord::from).collect(),
        }
    }
}

impl From<Receipt> for queue::receipt::Receipt {
    fn from(r: Receipt) -> Self {
        Self {
            request_id: r.request_id,
            api_key: r.api_key,
            received_at_ms: r.received_at_ms,
            interface: r.interface,
            records: r.records.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<&queue::receipt::ReceiptRecord> for ReceiptRecord {
    fn from(r: &queue::receipt::ReceiptRecord) -> Self {
        Self {
            index: r.index,
            key: r.key.clone(),
            state: r.state.into(),
            updated_at_ms: r.updated_at_ms,
            reason: r.reason.clone(),
        }
    }
}

impl From<ReceiptRecord> for queue::receipt::ReceiptRecord {
    fn from(r: ReceiptRecord) -> Self {
        Self {
            index: r.index,
            key: r.key,
            state: r.state.into(),
            updated_at_ms: r.updated_at_ms,
            reason: r.reason,
        }
    }
}

impl From<queue::receipt::ReceiptState> for ReceiptState {
    fn from(s: queue::receipt::ReceiptState) -> Self {
        use queue::receipt::ReceiptState as S;
        match s {
            S::Pending => Self::Pending,
            S::Delivered => Self::Delivered,
            S::Rejected => Self::Rejected,
            S::Quarantined => Self::Quarantined,
            S::Superseded => Self::Superseded,
        }
    }
}

impl From<ReceiptState> for queue::receipt::ReceiptState {
    fn from(s: ReceiptState) -> Self {
        match s {
            ReceiptState::Pending => Self::Pending,
            ReceiptState::Delivered => Self::Delivered,
            ReceiptState::Rejected => Self::Rejected,
            ReceiptState::Quarantined => Self::Quarantined,
            ReceiptState::Superseded => Self::Superseded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::receipt::{Receipt as QueueReceipt, ReceiptRecord as QueueRecord};

    fn round_trip(r: &super::super::Response) -> super::super::Response {
        let line = to_line(&Response::from(r), true).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert!(text.starts_with(r#"{"version":1,"#), "{text}");
        from_line::<Response>(&text).unwrap().message.into()
    }

    /// Every answer crosses the socket and comes back as it was, numbers included.
    #[test]
    fn every_answer_goes_to_the_wire_and_back_whole() {
        use super::super::{ParkedRecord, Response as R};
        let item = queue::Item {
            interface: "general-ledger-codes-v1".into(),
            version: u64::MAX,
            state: queue::State::Quarantined,
            queued_at_ms: 1,
            updated_at_ms: 2,
            attempts: 3,
            last_error: Some("e".into()),
            xml: "<r/>".into(),
        };
        let receipt = QueueReceipt {
            request_id: "id".into(),
            api_key: "k".into(),
            received_at_ms: 4,
            interface: "vendor-data-v1".into(),
            records: vec![QueueRecord {
                index: 5,
                key: "vendor:main/V".into(),
                state: queue::receipt::ReceiptState::Superseded,
                updated_at_ms: Some(6),
                reason: None,
            }],
        };
        let answers = [
            R::Keys(vec!["gl-code:main/A".into()]),
            R::Parked(vec![ParkedRecord {
                key: "gl-code:main/B".into(),
                reason: "HTTP 400".into(),
            }]),
            R::Item(Some(item)),
            R::Item(None),
            R::Requeued(7),
            R::Dropped(true),
            R::Receipts(vec![receipt]),
            R::Audit(vec![queue::audit::AuditRecord {
                id: "ab".into(),
                at_ms: 8,
                actor: "maria".into(),
                uid: Some(1001),
                action: "drop".into(),
                args: r#"{"key":"k"}"#.into(),
                changed: r#"{"dropped":true}"#.into(),
            }]),
            R::Noted,
            R::Replayed(super::super::replay::Done {
                queued: vec!["gl-code:main/A".into()],
                left_alone: vec!["gl-code:main/B".into()],
                not_kept: vec![],
                dry_run: true,
            }),
            R::Error("boom".into()),
        ];
        for answer in answers {
            assert_eq!(round_trip(&answer), answer);
        }
    }

    /// Every command too, and a command without a version reads as version 1.
    #[test]
    fn every_command_goes_to_the_wire_and_back_whole() {
        use super::super::Request as R;
        let commands = [
            R::Status,
            R::Keys {
                state: queue::State::Rejected,
                interface: Some("vendor-data-v1".into()),
            },
            R::Show { key: "k".into() },
            R::Requeue { key: "k".into() },
            R::RequeueAll {
                state: queue::State::Quarantined,
            },
            R::Drop { key: "k".into() },
            R::Receipts {
                request_id: "id".into(),
            },
            R::Audit { since_ms: 9 },
            R::Note {
                action: "backup".into(),
                args: serde_json::json!({"file": "/tmp/x"}),
                changed: serde_json::json!({"pending": 1}),
            },
            R::Replay(super::super::replay::Asked {
                since_ms: 1,
                until_ms: Some(2),
                interface: Some("vendor-data-v1".into()),
                keys: vec!["vendor:main/V".into()],
                dry_run: false,
            }),
        ];
        for command in commands {
            let line = to_line(&Request::from(&command), true).unwrap();
            let read = from_line::<Request>(std::str::from_utf8(&line).unwrap()).unwrap();
            assert!(read.versioned);
            assert_eq!(super::super::Request::from(read.message), command);
        }
        let old = from_line::<Request>(r#"{"command":"requeue_all","state":"rejected"}"#).unwrap();
        assert!(!old.versioned);
        assert_eq!(
            old.message,
            Request::RequeueAll {
                state: State::Rejected
            }
        );
    }

    /// A service of an earlier release reads a versioned command: its commands (as they were
    /// then) ignore a member they do not know.
    #[test]
    fn an_earlier_service_reads_a_versioned_command() {
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(tag = "command", rename_all = "snake_case")]
        enum Earlier {
            Status,
            Keys {
                state: State,
                interface: Option<String>,
            },
        }
        let line = to_line(&Request::Status, true).unwrap();
        let read: Earlier = serde_json::from_slice(&line).unwrap();
        assert_eq!(read, Earlier::Status);
        let line = to_line(
            &Request::Keys {
                state: State::Pending,
                interface: None,
            },
            true,
        )
        .unwrap();
        let read: Earlier = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            read,
            Earlier::Keys {
                state: State::Pending,
                interface: None
            }
        );
    }

    /// A version above this release's, or one that is no version at all, is refused.
    #[test]
    fn unknown_versions_are_refused() {
        for line in [
            r#"{"version":2,"error":"x"}"#,
            r#"{"version":0,"error":"x"}"#,
            r#"{"version":"1","error":"x"}"#,
            r#"{"version":1.5,"error":"x"}"#,
        ] {
            match from_line::<Response>(line) {
                Err(e @ LineError::Version(_)) => {
                    assert!(e.to_string().contains("reads version 1 and earlier"), "{e}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }
}
