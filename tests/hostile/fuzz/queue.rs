//! The queue as it must be after each answer (D15, D16), and the XML of what was accepted:
//! schema-valid (D19) and carrying every value of the record exactly (D6, D23).

use super::case::{Case, queue_key};
use super::dec::Dec;
use super::json::{J, Style};
use super::oracle::ensure;
use super::valid::resolve;
use crate::common::Items;
use crate::common::{TestApp, schema, xml_invalid};
use ap_intake::shape::Shape;
use quick_xml::events::Event;
use serde_json::Value;
use std::collections::HashMap;

/// What the queue holds: key -> (interface, XML), kept by replaying every answered request.
#[derive(Default)]
pub struct Model {
    items: HashMap<Vec<u8>, (String, String)>,
    /// A check failed: the model may be wrong, so it is read back from the queue.
    pub stale: bool,
}

impl Model {
    pub fn resync(&mut self, app: &TestApp) {
        self.items = app
            .store()
            .items()
            .unwrap()
            .into_iter()
            .map(|(k, i)| (k.as_bytes().to_vec(), (i.interface, i.xml)))
            .collect();
        self.stale = false;
    }

    /// Every item of the queue, compared with the model.
    pub fn matches_all(&self, app: &TestApp) -> Result<(), String> {
        let items = app.store().items().unwrap();
        ensure!(
            items.len() == self.items.len(),
            "queue holds {} items, want {}",
            items.len(),
            self.items.len()
        );
        for (k, item) in items {
            let want = self.items.get(k.as_bytes());
            ensure!(
                want == Some(&(item.interface.clone(), item.xml.clone())),
                "{k}: queued {} {}, want {want:?}",
                item.interface,
                item.xml
            );
        }
        Ok(())
    }
}

/// Checks the queue after `case` was answered with `accepted` records queued.
pub fn check(
    app: &TestApp,
    case: &Case,
    accepted: &[usize],
    model: &mut Model,
) -> Result<(), String> {
    let iface = case.iface;
    let schema = schema(iface);
    let shape = Shape::from_schema(&schema);
    let lead: Vec<(&str, &str)> = if iface.needs_accounting_type {
        vec![("accountingType", "PROJECT")]
    } else {
        vec![]
    };
    let mut latest: HashMap<Vec<u8>, usize> = HashMap::new();
    for &i in accepted {
        let key = queue_key(iface, &schema, &case.records[i]).ok_or("a valid record has no key")?;
        let value: Value = serde_json::from_str(&case.records[i].text(Style::default())).unwrap();
        let xml = ap_intake::xml::record(&shape, iface.xml_record, &lead, &value);
        model
            .items
            .insert(key.as_bytes().to_vec(), (iface.id.to_string(), xml));
        latest.insert(key.as_bytes().to_vec(), i);
    }
    // D16: each key holds the last accepted occurrence; refused records changed nothing.
    for record in &case.records {
        let Some(key) = queue_key(iface, &schema, record) else {
            continue;
        };
        let got = app.store().get(&key).unwrap().map(|i| (i.interface, i.xml));
        let want = model.items.get(key.as_bytes());
        ensure!(got.as_ref() == want, "{key}: queued {got:?}, want {want:?}");
    }
    let count = app.store().items().unwrap().len();
    ensure!(
        count == model.items.len(),
        "queue holds {count} items, want {}",
        model.items.len()
    );
    let mut xmls = Vec::new();
    for (key, i) in &latest {
        let xml = &model.items[key].1;
        let root =
            parse(xml).map_err(|e| format!("record {i}: XML not well-formed ({e}): {xml}"))?;
        let mut kids = root.kids.as_slice();
        if let Some((t, rest)) = lead.first().zip(kids.split_first()) {
            ensure!(
                rest.0.name == t.0 && rest.0.text == t.1,
                "lead element: {xml}"
            );
            kids = rest.1;
        }
        same_object(&schema, &schema, &case.records[*i], kids, "")
            .map_err(|e| format!("record {i}: {e}\n{xml}"))?;
        xmls.push(xml.clone());
    }
    if !xmls.is_empty() {
        let doc = ap_intake::xml::document(iface, &xmls);
        let xsd = iface.schema.replace(".json", ".xsd");
        if let Some(why) = xml_invalid(&doc, &xsd) {
            return Err(format!(
                "XML does not validate against {xsd}: {why}\n{}",
                String::from_utf8_lossy(&doc)
            ));
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct El {
    name: String,
    text: String,
    kids: Vec<El>,
}

/// An XML element tree, read as a conforming parser would (line ends normalised, references
/// resolved).
fn parse(xml: &str) -> Result<El, String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack = vec![El::default()];
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(e) => stack.push(El {
                name: e.name().as_ref().to_string(),
                ..El::default()
            }),
            Event::Empty(e) => stack.last_mut().unwrap().kids.push(El {
                name: e.name().as_ref().to_string(),
                ..El::default()
            }),
            Event::End(_) => {
                let done = stack.pop().unwrap();
                stack.last_mut().ok_or("unbalanced")?.kids.push(done);
            }
            Event::Text(t) => stack.last_mut().unwrap().text.push_str(&t.xml10_content()),
            Event::CData(t) => stack.last_mut().unwrap().text.push_str(&t.xml10_content()),
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref().map_err(|e| e.to_string())? {
                    Some(c) => c,
                    None => match &*r.xml10_content() {
                        "amp" => '&',
                        "lt" => '<',
                        "gt" => '>',
                        "quot" => '"',
                        "apos" => '\'',
                        other => return Err(format!("unknown entity &{other};")),
                    },
                };
                stack.last_mut().unwrap().text.push(c);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let mut top = stack.pop().ok_or("unbalanced")?;
    ensure!(stack.is_empty() && top.kids.len() == 1, "not one element");
    Ok(top.kids.pop().unwrap())
}

/// Every member of `record` is in `kids` with its exact value.
fn same_object(
    root: &Value,
    node: &Value,
    record: &J,
    kids: &[El],
    at: &str,
) -> Result<(), String> {
    let node = resolve(root, node);
    let J::Obj(members) = record else {
        return Err(format!("{at} is not an object"));
    };
    for (k, v) in members {
        let prop = resolve(root, &node["properties"][k]);
        let path = format!("{at}/{k}");
        let el = kids
            .iter()
            .find(|e| e.name == *k)
            .ok_or(format!("no element for {path}"))?;
        match v {
            J::Str(s) if s.is_empty() => {
                let want = match (prop["default"].as_str(), prop["x-fallback"].as_str()) {
                    (Some(d), _) => d.to_string(),
                    (None, Some(f)) => match record.get(f) {
                        Some(J::Str(s)) => s.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                };
                ensure!(
                    el.text == want,
                    "{path}: blank written as {:?}, want {want:?}",
                    el.text
                );
            }
            J::Str(s) => ensure!(el.text == *s, "{path}: {s:?} written as {:?}", el.text),
            J::Num(t) => {
                let plain = el
                    .text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-');
                let integer = prop["type"] == "integer";
                ensure!(
                    plain && (!integer || !el.text.contains('.')),
                    "{path}: {t} written as {:?}, not in plain {} notation (D23)",
                    el.text,
                    if integer { "integer" } else { "decimal" }
                );
                let same = Dec::parse(&el.text)
                    .zip(Dec::parse(t))
                    .is_some_and(|(a, b)| a.same_value(&b));
                ensure!(
                    same,
                    "{path}: {t} written as {:?}, another value (D6)",
                    el.text
                );
                if let Some(want) = written(t, prop) {
                    ensure!(
                        el.text == want,
                        "{path}: {t} written as {:?}, want {want:?} (D23)",
                        el.text
                    );
                }
            }
            J::Arr(items) => {
                let item = prop["x-xml-item"].as_str().unwrap_or("item");
                ensure!(
                    el.kids.len() == items.len() && el.kids.iter().all(|e| e.name == item),
                    "{path}: {} items written as {:?}",
                    items.len(),
                    el.kids.iter().map(|e| &e.name).collect::<Vec<_>>()
                );
                for (i, (v, e)) in items.iter().zip(&el.kids).enumerate() {
                    same_object(root, &prop["items"], v, &e.kids, &format!("{path}/{i}"))?;
                }
            }
            J::Obj(_) => same_object(root, prop, v, &el.kids, &path)?,
            other => return Err(format!("{path}: {other:?} in a valid record")),
        }
    }
    Ok(())
}

/// The exact XML text of a number where D23 fixes it: integers in canonical form (`15.000` ->
/// `15`, `-0` -> `0`); decimals without an exponent as received, less the fraction's trailing
/// zeros beyond the field's places (`1.500` -> `1.50` for money). `None` for decimals written
/// with an exponent, whose plain form D23 leaves open beyond the value.
fn written(t: &str, prop: &Value) -> Option<String> {
    if prop["type"] == "integer" {
        let d = Dec::parse(t)?;
        return Some(d.canonical_integer());
    }
    if t.contains(['e', 'E']) {
        return None;
    }
    let places = super::valid::places(prop) as usize;
    let Some((int, frac)) = t.split_once('.') else {
        return Some(t.to_string());
    };
    let keep = frac.trim_end_matches('0').len().max(places.min(frac.len()));
    Some(if keep == 0 {
        int.to_string()
    } else {
        format!("{int}.{}", &frac[..keep])
    })
}
