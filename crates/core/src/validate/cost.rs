//! What a body will cost in memory once parsed and checked, estimated from one pass over its
//! bytes before anything is built, so the request can be charged for it first (D27).

/// What a body will cost in memory once parsed, counted without parsing it (D27).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    /// Items in the body: values, and keys of object members, counted from the separators
    /// (`,` `:`) and brackets outside strings; an upper bound.
    pub items: usize,
    /// Items in the largest value at record depth (5): what one record's validation may
    /// report on.
    pub largest_record: usize,
}

/// Bytes of memory one item may take in the parsed tree: a value, or a member's key with its
/// slot in the object, with the slack of a growing object (measured between 20 and 80 on the
/// worst shapes: tests/hostile/budgets.rs).
pub const TREE_BYTES_PER_ITEM: usize = 160;

/// Bytes one item of a record may take while the record is checked, when every item breaks
/// rules: an empty PO v2 coding row `{}` is two items and seven missing fields, each a
/// validator error and a violation (measured up to 1,540 per item: tests/hostile/budgets.rs).
pub const CHECK_BYTES_PER_ITEM: usize = 2048;

/// The process holds at most about this many bytes for each byte charged to the budget
/// (D27: "within about 4x the budget"): a parsed body is charged a quarter of its estimated
/// peak.
pub const PEAK_PER_CHARGED_BYTE: usize = 4;

/// What an ordinary body is charged per byte once parsed (`Cost::charge`: 3.0 to 4.5 for the
/// fixtures of every interface, compact; less when pretty-printed): a request is admitted with
/// this much of its declared length reserved, so it rarely needs more while it holds part of
/// the budget (D27).
pub const ORDINARY_CHARGE_PER_BYTE: usize = 4;

impl Cost {
    /// The most a body of `len` bytes with this cost takes while it is parsed and checked:
    /// the body, its tree, and the reports on its largest record.
    pub fn peak(&self, len: usize) -> usize {
        len.saturating_add(self.items.saturating_mul(TREE_BYTES_PER_ITEM))
            .saturating_add(self.largest_record.saturating_mul(CHECK_BYTES_PER_ITEM))
    }

    /// What such a body is charged to the in-flight budget once it is parsed (D27): at least
    /// its own size, else a quarter of its peak.
    pub fn charge(&self, len: usize) -> usize {
        self.peak(len).div_ceil(PEAK_PER_CHARGED_BYTE).max(len)
    }
}

/// Counts a body's items in one pass over its bytes, skipping the insides of strings.
pub fn cost(body: &[u8]) -> Cost {
    let mut items = 1usize;
    let mut depth = 0usize;
    let mut record = 0usize;
    let mut largest_record = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Jump to the closing quote, over escapes.
                i += 1;
                while let Some(off) = body.get(i..).and_then(|r| memchr::memchr2(b'"', b'\\', r)) {
                    i += off;
                    if body[i] == b'\\' {
                        i += 2;
                    } else {
                        break;
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                items += 1;
                if depth == 5 {
                    record = 1;
                } else if depth > 5 {
                    record += 1;
                }
            }
            b']' | b'}' => {
                if depth == 5 {
                    largest_record = largest_record.max(record);
                }
                depth = depth.saturating_sub(1);
            }
            b',' | b':' => {
                items += 1;
                if depth >= 5 {
                    record += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Cost {
        items,
        largest_record: largest_record.max(record),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_counts_items_outside_strings() {
        let c =
            cost(br#"{"objects":{"object":{"record":[{"a":"x,y[{","b":[1,2,3]},{"c":"\"]"}]}}}"#);
        // items: root, objects, object, record array, 2 records, their members and elements
        assert!(c.items >= 9, "{c:?}");
        // The first record: its object, two keys, the array and its three numbers.
        assert_eq!(c.largest_record, 7);
        assert_eq!(cost(b"[1,1,1,1]").items, 5);
    }
}
