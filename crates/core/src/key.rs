//! Queue keys (D15): a key space and the record's primary-key parts.
//!
//! On disk a key is `space 0x00 part 0x00 part ...`. Parts cannot hold NUL: validation refuses
//! control characters in every string (XML cannot carry them), and [`QueueKey::new`] checks
//! again. Shown to operators as `space:part/part` with `%`, `/` and `:` percent-encoded.

use std::fmt;

/// The primary key of a queued record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey(Vec<u8>);

/// A key that cannot be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid queue key: {0}")]
pub struct KeyError(pub String);

impl QueueKey {
    /// The key of `parts` in `space`.
    pub fn new(space: &str, parts: &[&str]) -> Result<Self, KeyError> {
        let mut bytes =
            Vec::with_capacity(space.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>());
        bytes.extend_from_slice(space.as_bytes());
        for part in parts {
            if part.contains('\0') {
                return Err(KeyError(format!("{part:?} contains NUL")));
            }
            bytes.push(0);
            bytes.extend_from_slice(part.as_bytes());
        }
        Ok(Self(bytes))
    }

    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A key read back from storage.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }

    /// The key space (`gl-code`, `purchase-order`, ...).
    pub fn space(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }

    /// Parses the operator form `space:part/part`.
    pub fn parse(shown: &str) -> Result<Self, KeyError> {
        let (space, rest) = shown
            .split_once(':')
            .ok_or_else(|| KeyError(format!("{shown:?}: expected SPACE:PART/PART")))?;
        let parts: Vec<String> = rest
            .split('/')
            .map(|p| {
                percent_encoding::percent_decode_str(p)
                    .decode_utf8()
                    .map(|s| s.into_owned())
                    .map_err(|_| KeyError(format!("{p:?} is not UTF-8")))
            })
            .collect::<Result<_, _>>()?;
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        Self::new(space, &parts)
    }
}

const SHOWN: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b'%').add(b'/').add(b':');

impl fmt::Display for QueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut pieces = self.0.split(|&b| b == 0);
        let space = pieces.next().unwrap_or_default();
        f.write_str(&String::from_utf8_lossy(space))?;
        for (i, part) in pieces.enumerate() {
            f.write_str(if i == 0 { ":" } else { "/" })?;
            let part = String::from_utf8_lossy(part);
            write!(f, "{}", percent_encoding::utf8_percent_encode(&part, SHOWN))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_form_round_trips() {
        let k = QueueKey::new("gl-code", &["main", "40/00:a%"]).unwrap();
        assert_eq!(k.to_string(), "gl-code:main/40%2F00%3Aa%25");
        assert_eq!(QueueKey::parse(&k.to_string()).unwrap(), k);
        assert_eq!(k.space(), "gl-code");
    }

    #[test]
    fn parts_do_not_run_together() {
        let a = QueueKey::new("s", &["ab", "c"]).unwrap();
        let b = QueueKey::new("s", &["a", "bc"]).unwrap();
        assert_ne!(a, b);
        assert!(QueueKey::new("s", &["a\0b"]).is_err());
    }
}
