//! The nine interfaces, as data.
//!
//! Everything that differs between interfaces is in [`INTERFACES`]: paths, schema file,
//! primary key, XML element names and whether a batch is all-or-nothing. One handler serves
//! them all; adding a field to an interface means editing its schema file, not this table.

/// How the records of one request are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each record stands alone: valid ones are queued even when others fail (207).
    PerRecord,
    /// Any invalid record fails the whole request and nothing is queued (D3, payment
    /// confirmations).
    AllOrNothing,
}

/// Where a key part comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    /// A top-level field of the record; when absent or empty its schema `default` is used
    /// (organization defaults to `main`, D15).
    Field(&'static str),
    /// The `accountingType` query parameter of the request.
    AccountingType,
}

/// One POST interface.
#[derive(Debug)]
pub struct Interface {
    /// Stable identifier, used in the queue, logs, metrics and the platform delivery path.
    pub id: &'static str,
    /// The path clients POST to.
    pub path: &'static str,
    /// Further paths that serve the same interface (D12).
    pub aliases: &'static [&'static str],
    /// File name of the record's JSON Schema in `schemas/`.
    pub schema: &'static str,
    /// Key space in the queue. Interfaces whose records are the same platform object share one
    /// (D15): GL codes and non-inventory items, PO v1 and v2, receipts v1 and v2.
    pub key_space: &'static str,
    /// The parts of the primary key, in order (D15).
    pub key: &'static [KeyPart],
    /// Root element of a delivered XML document.
    pub xml_root: &'static str,
    /// Element of one record inside the root.
    pub xml_record: &'static str,
    /// Whether one invalid record fails the whole request.
    pub mode: Mode,
    /// Whether the request needs `?accountingType=` (checked against the configured types).
    pub needs_accounting_type: bool,
}

const ORG: KeyPart = KeyPart::Field("organization");

/// The interfaces of interface-spec.md, in its order.
pub static INTERFACES: [Interface; 9] = [
    Interface {
        id: "vendor-data-v1",
        path: "/vendor-data/v1",
        aliases: &[],
        schema: "vendor-data.json",
        key_space: "vendor",
        key: &[ORG, KeyPart::Field("code")],
        xml_root: "vendors",
        xml_record: "vendor",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "accounting-objects-v1",
        path: "/accounting-objects/v1",
        aliases: &[],
        schema: "accounting-objects.json",
        key_space: "accounting-object",
        key: &[KeyPart::AccountingType, ORG, KeyPart::Field("code")],
        xml_root: "accounting_objects",
        xml_record: "accounting_object",
        mode: Mode::PerRecord,
        needs_accounting_type: true,
    },
    Interface {
        id: "general-ledger-codes-v1",
        path: "/general-ledger-codes/v1",
        aliases: &[],
        schema: "general-ledger-codes.json",
        key_space: "gl-code",
        key: &[ORG, KeyPart::Field("code")],
        xml_root: "gl_codes",
        xml_record: "gl_code",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "non-inventory-items-v1",
        path: "/non-inventory-items/v1",
        aliases: &[],
        schema: "non-inventory-items.json",
        key_space: "gl-code",
        key: &[ORG, KeyPart::Field("code")],
        xml_root: "gl_codes",
        xml_record: "gl_code",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "purchase-orders-v1",
        path: "/purchase-orders/v1",
        aliases: &[],
        schema: "purchase-orders-v1.json",
        key_space: "purchase-order",
        key: &[ORG, KeyPart::Field("po_number")],
        xml_root: "purchase_orders_v1",
        xml_record: "purchase_order",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "purchase-orders-v2",
        path: "/purchase-orders/v2",
        aliases: &[],
        schema: "purchase-orders-v2.json",
        key_space: "purchase-order",
        key: &[ORG, KeyPart::Field("po_number")],
        xml_root: "purchase_orders_v2",
        xml_record: "purchase_order",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "goods-received-v1",
        path: "/goods-received/v1",
        aliases: &[],
        schema: "goods-received-v1.json",
        key_space: "goods-receipt",
        key: &[ORG, KeyPart::Field("grn_number")],
        xml_root: "goods_receipts_v1",
        xml_record: "goods_receipt",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "goods-received-v2",
        path: "/goods_received/v2",
        aliases: &["/goods-received/v2"],
        schema: "goods-received-v2.json",
        key_space: "goods-receipt",
        key: &[ORG, KeyPart::Field("grn_number")],
        xml_root: "goods_receipts_v2",
        xml_record: "goods_receipt",
        mode: Mode::PerRecord,
        needs_accounting_type: false,
    },
    Interface {
        id: "payment-confirmation-v1",
        path: "/payment-confirmation/v1",
        aliases: &[],
        schema: "payment-confirmation.json",
        key_space: "payment-confirmation",
        key: &[KeyPart::Field("softco_case_id")],
        xml_root: "payment_confirmations",
        xml_record: "payment_confirmation",
        mode: Mode::AllOrNothing,
        needs_accounting_type: false,
    },
];

/// The interface served at `path` (exact match: a trailing slash is another path, D5).
pub fn by_path(path: &str) -> Option<&'static Interface> {
    INTERFACES
        .iter()
        .find(|i| i.path == path || i.aliases.contains(&path))
}

/// The interface with identifier `id`.
pub fn by_id(id: &str) -> Option<&'static Interface> {
    INTERFACES.iter().find(|i| i.id == id)
}

/// The JSON Schema files compiled into the binary (D14), by file name.
pub fn builtin_schema(file: &str) -> Option<&'static str> {
    Some(match file {
        "vendor-data.json" => include_str!("../../../schemas/vendor-data.json"),
        "accounting-objects.json" => include_str!("../../../schemas/accounting-objects.json"),
        "general-ledger-codes.json" => include_str!("../../../schemas/general-ledger-codes.json"),
        "non-inventory-items.json" => include_str!("../../../schemas/non-inventory-items.json"),
        "purchase-orders-v1.json" => include_str!("../../../schemas/purchase-orders-v1.json"),
        "purchase-orders-v2.json" => include_str!("../../../schemas/purchase-orders-v2.json"),
        "goods-received-v1.json" => include_str!("../../../schemas/goods-received-v1.json"),
        "goods-received-v2.json" => include_str!("../../../schemas/goods-received-v2.json"),
        "payment-confirmation.json" => include_str!("../../../schemas/payment-confirmation.json"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interface_has_a_builtin_schema_and_unique_paths() {
        let mut paths = std::collections::HashSet::new();
        for i in &INTERFACES {
            assert!(builtin_schema(i.schema).is_some(), "{}", i.schema);
            assert!(paths.insert(i.path));
            for a in i.aliases {
                assert!(paths.insert(a));
            }
            assert_eq!(by_id(i.id).map(|x| x.path), Some(i.path));
        }
    }

    #[test]
    fn alias_and_trailing_slash() {
        // D12: the listed path and its alias; D5: a trailing slash is another path.
        assert_eq!(
            by_path("/goods-received/v2").map(|i| i.id),
            Some("goods-received-v2")
        );
        assert_eq!(
            by_path("/goods_received/v2").map(|i| i.id),
            Some("goods-received-v2")
        );
        assert!(by_path("/general-ledger-codes/v1/").is_none());
    }
}
