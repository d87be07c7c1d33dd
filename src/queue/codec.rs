//! The stored form of an [`Item`]: a small binary header and the XML as it is, so storing and
//! delivering a record costs no JSON escaping or parsing (BENCHMARKS.md).
//!
//! ```text
//! 1   format (1)
//! 1   state (0 pending, 1 rejected)
//! 8   version            8   lot                8   queued_at_ms
//! 8   updated_at_ms      4   attempts
//! 1   interface length   n   interface
//! 4   last_error length (u32::MAX for none)     n   last_error
//! ..  xml (to the end)
//! ```
//! Integers are big-endian. `lot` names the pending-index entry that lists the item (0 when
//! it is rejected); it belongs to the storage, not to [`Item`].

use super::{Item, State};

const FORMAT: u8 = 2;
const NONE: u32 = u32::MAX;

/// Encodes an item and its lot.
pub fn encode(item: &Item, lot: u64) -> Vec<u8> {
    let error = item.last_error.as_deref();
    let mut out =
        Vec::with_capacity(48 + item.interface.len() + error.map_or(0, str::len) + item.xml.len());
    out.push(FORMAT);
    out.push(match item.state {
        State::Pending => 0,
        State::Rejected => 1,
    });
    out.extend_from_slice(&item.version.to_be_bytes());
    out.extend_from_slice(&lot.to_be_bytes());
    out.extend_from_slice(&item.queued_at_ms.to_be_bytes());
    out.extend_from_slice(&item.updated_at_ms.to_be_bytes());
    out.extend_from_slice(&item.attempts.to_be_bytes());
    let iface = &item.interface.as_bytes()[..item.interface.len().min(255)];
    out.push(iface.len() as u8);
    out.extend_from_slice(iface);
    match error {
        Some(e) => {
            let e = &e.as_bytes()[..e.len().min(NONE as usize - 1)];
            out.extend_from_slice(&(e.len() as u32).to_be_bytes());
            out.extend_from_slice(e);
        }
        None => out.extend_from_slice(&NONE.to_be_bytes()),
    }
    out.extend_from_slice(item.xml.as_bytes());
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().map_err(|_| "u64")?,
        ))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().map_err(|_| "u32")?,
        ))
    }

    fn text(&mut self, n: usize) -> Result<String, String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }
}

/// Decodes an item and its lot; the error says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<(Item, u64), String> {
    let mut r = Reader(bytes);
    match r.take(1)?[0] {
        FORMAT => {}
        other => return Err(format!("unknown item format {other}")),
    }
    let state = match r.take(1)?[0] {
        0 => State::Pending,
        1 => State::Rejected,
        other => return Err(format!("unknown state {other}")),
    };
    let version = r.u64()?;
    let lot = r.u64()?;
    let queued_at_ms = r.u64()?;
    let updated_at_ms = r.u64()?;
    let attempts = r.u32()?;
    let n = r.take(1)?[0] as usize;
    let interface = r.text(n)?;
    let last_error = match r.u32()? {
        NONE => None,
        n => Some(r.text(n as usize)?),
    };
    let xml = r.text(r.0.len())?;
    let item = Item {
        interface,
        version,
        state,
        queued_at_ms,
        updated_at_ms,
        attempts,
        last_error,
        xml,
    };
    Ok((item, lot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_round_trip() {
        let mut item = Item {
            interface: "general-ledger-codes-v1".into(),
            version: 42,
            state: State::Rejected,
            queued_at_ms: 1,
            updated_at_ms: 2,
            attempts: 3,
            last_error: Some("HTTP 400: ä".into()),
            xml: "<gl_code><code>1</code></gl_code>".into(),
        };
        assert_eq!(decode(&encode(&item, 0)), Ok((item.clone(), 0)));
        item.last_error = None;
        item.state = State::Pending;
        assert_eq!(decode(&encode(&item, 7)), Ok((item.clone(), 7)));
        assert!(decode(&encode(&item, 7)[..20]).is_err());
        assert!(decode(&[9]).is_err());
    }
}
