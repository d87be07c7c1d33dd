//! Mutations of a valid record, each with what it must do to the answer: leave the record
//! valid, or make it fail with a given entry (decisions.md "Validation messages", D6-D8, D13,
//! D23, D24), or make the whole request a structure failure (D27's nesting limit).
//!
//! Every mutation targets a slot of the clean record and claims its path; a later mutation
//! whose path overlaps a claimed one is skipped, so no mutation can undo another's verdict.

use super::json::{J, Seg, pointer};
use super::slots::Slot;
use super::valid::DATE_PATTERN;
use super::{numbers, strings};
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub enum Op {
    WrongType(usize, usize),
    Null(usize),
    RemoveRequired(usize),
    RemoveOptional(usize),
    EmptyString(usize),
    Unknown(usize, usize, usize),
    Duplicate(usize, bool),
    BadNumber(usize, String),
    Renotate(usize, usize),
    BadChar(usize, usize, usize),
    Multibyte(usize, usize),
    TooLong(usize, usize),
    BadDate(usize, usize),
    BadEnum(usize, usize),
    BadPattern(usize, usize),
    BadIban(usize, usize),
    BadBic(usize, usize),
    NoAccountId(usize),
    BreakSum(usize),
    EmptyArray(usize),
    Nest(usize, bool),
    Flood(usize),
    NotObject(usize),
}

/// An entry the answer must contain for the record: its path and its error text (or the
/// text's start, where the rest depends on other fields).
#[derive(Clone, Debug, PartialEq)]
pub struct Expect {
    pub path: String,
    pub error: String,
    pub prefix: bool,
}

/// What the mutations of one record add up to.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub invalid: bool,
    pub expects: Vec<Expect>,
    /// Nested past 64 levels: the request is a structure failure (D27).
    pub too_deep: bool,
}

const UNKNOWN_NAMES: [&str; 7] = ["x_unknown", "x/y~z", "ünknown", "Code", "code ", "", "$ref"];

pub fn type_msg(found: &str, allowed: &str) -> String {
    format!(
        "instance type ({found}) does not match any allowed primitive type (allowed: [\"{allowed}\"])"
    )
}

pub struct Ctx<'a> {
    pub record: &'a mut J,
    claimed: Vec<Vec<Seg>>,
    pub out: Outcome,
}

impl Ctx<'_> {
    pub fn free(&self, path: &[Seg]) -> bool {
        self.claimed
            .iter()
            .all(|c| !(c.starts_with(path) || path.starts_with(c)))
    }

    pub fn fail(&mut self, path: &[Seg], error: String) {
        self.fail_at(pointer(path), error, false);
    }

    pub fn fail_at(&mut self, path: String, error: String, prefix: bool) {
        self.out.invalid = true;
        self.out.expects.push(Expect {
            path,
            error,
            prefix,
        });
    }

    pub fn set(&mut self, path: &[Seg], v: J) {
        *self.record.at_mut(path).expect("slot exists") = v;
    }

    pub fn str_at(&self, path: &[Seg]) -> String {
        match self.record.at(path) {
            Some(J::Str(s)) => s.clone(),
            other => panic!("string slot holds {other:?}"),
        }
    }
}

/// Applies `ops` to `record`, whose slots (taken before any change) are `slots`.
pub fn apply(record: &mut J, slots: &[Slot], ops: &[Op]) -> Outcome {
    let mut cx = Ctx {
        record,
        claimed: Vec::new(),
        out: Outcome::default(),
    };
    for op in ops {
        one(&mut cx, slots, op);
    }
    bank_account_identity(&mut cx, slots);
    cx.out
}

/// D13: a bank account whose iban and account_number were both emptied or retyped by the
/// mutations has no identity left, whichever ops did it.
fn bank_account_identity(cx: &mut Ctx, slots: &[Slot]) {
    const MESSAGE: &str = "bank account needs an iban or an account_number";
    let mut accounts: Vec<&[Seg]> = slots
        .iter()
        .filter(|s| s.guarded)
        .map(|s| &s.path[..s.path.len() - 1])
        .collect();
    accounts.dedup();
    for account in accounts {
        let Some(J::Obj(_)) = cx.record.at(account) else {
            continue;
        };
        let Some(obj) = cx.record.at(account) else {
            continue;
        };
        let has = |k: &str| matches!(obj.get(k), Some(J::Str(s)) if !s.is_empty());
        let pointer = pointer(account);
        let said = cx
            .out
            .expects
            .iter()
            .any(|e| e.path == pointer && e.error == MESSAGE);
        if !has("iban") && !has("account_number") && !said {
            cx.fail(account, MESSAGE.into());
        }
    }
}

/// The slot `sel` picks among those `fits` and still free.
fn pick<'s>(
    cx: &Ctx,
    slots: &'s [Slot],
    sel: usize,
    fits: impl Fn(&Slot) -> bool,
) -> Option<&'s Slot> {
    let fit: Vec<&Slot> = slots
        .iter()
        .filter(|s| fits(s) && cx.free(&s.path))
        .collect();
    (!fit.is_empty()).then(|| fit[sel % fit.len()])
}

fn one(cx: &mut Ctx, slots: &[Slot], op: &Op) {
    let slot = match *op {
        Op::WrongType(s, _) | Op::Null(s) => pick(cx, slots, s, |x| !x.path.is_empty()),
        Op::RemoveRequired(s) => pick(cx, slots, s, |x| x.required),
        Op::RemoveOptional(s) => pick(cx, slots, s, |x| x.is_field() && !x.required && !x.guarded),
        Op::EmptyString(s) | Op::BadChar(s, ..) => pick(cx, slots, s, |x| x.ty() == "string"),
        Op::Unknown(s, ..) => pick(cx, slots, s, |x| x.ty() == "object"),
        Op::Duplicate(s, _) => pick(cx, slots, s, Slot::is_field),
        Op::BadNumber(s, _) | Op::Renotate(s, _) => pick(cx, slots, s, |x| x.is_number()),
        Op::Multibyte(s, _) => pick(cx, slots, s, Slot::is_free_text),
        Op::TooLong(s, _) => pick(cx, slots, s, |x| x.max_len().is_some()),
        Op::BadDate(s, _) => pick(cx, slots, s, |x| x.pattern() == Some(DATE_PATTERN)),
        Op::BadEnum(s, _) => pick(cx, slots, s, |x| x.node.get("enum").is_some()),
        Op::BadPattern(s, _) => pick(cx, slots, s, |x| {
            x.pattern().is_some_and(|p| p != DATE_PATTERN)
        }),
        Op::BadIban(s, _) => pick(cx, slots, s, |x| x.format() == Some("iban")),
        Op::BadBic(s, _) => pick(cx, slots, s, |x| x.format() == Some("bic")),
        Op::NoAccountId(s) => pick(cx, slots, s, |x| x.format() == Some("bank-account")),
        Op::BreakSum(s) => pick(cx, slots, s, |x| x.coding),
        Op::EmptyArray(s) => pick(cx, slots, s, |x| x.ty() == "array"),
        Op::Nest(..) | Op::Flood(_) | Op::NotObject(_) => slots.first(),
    };
    let Some(slot) = slot else { return };
    let path = slot.path.clone();
    let name = match path.last() {
        Some(Seg::Key(k)) => k.clone(),
        _ => String::new(),
    };
    match op {
        Op::WrongType(_, p) => {
            let mut others = vec![
                J::Num("12".into()),
                J::Num("1.5".into()),
                J::Bool(true),
                J::str("12"),
                J::Arr(vec![]),
                J::Obj(vec![]),
            ];
            others.retain(|v| !slot.accepts_type(v.type_name()));
            let v = others[p % others.len()].clone();
            cx.fail(&path, type_msg(v.type_name(), slot.ty()));
            cx.set(&path, v);
        }
        Op::Null(_) => {
            cx.fail(&path, type_msg("null", slot.ty()));
            cx.set(&path, J::Null);
        }
        Op::RemoveRequired(_) | Op::RemoveOptional(_) => {
            let (parent, _) = path.split_at(path.len() - 1);
            cx.record.at_mut(parent).unwrap().remove(&name);
            if slot.required {
                cx.fail(&path, format!("required key [{name}] not found"));
            }
        }
        Op::Unknown(_, n, v) => {
            let key = UNKNOWN_NAMES[n % UNKNOWN_NAMES.len()];
            let mut at = path.clone();
            at.push(Seg::Key(key.into()));
            if !cx.free(&at) || cx.record.at(&path).and_then(|o| o.get(key)).is_some() {
                return;
            }
            let values = [
                J::str("surprise"),
                J::Num("1e99999999999".into()),
                J::Null,
                J::Arr(vec![J::Num("-1e-99999999999".into()); 3]),
                J::Obj(vec![("code".into(), J::str("x"))]),
            ];
            cx.record
                .at_mut(&path)
                .unwrap()
                .set(key, values[v % values.len()].clone());
            cx.fail(&at, format!("extraneous key [{key}] is not permitted"));
            cx.claimed.push(at);
            return;
        }
        Op::Duplicate(_, same) => {
            let (parent, _) = path.split_at(path.len() - 1);
            let v = if *same {
                cx.record.at(&path).unwrap().clone()
            } else {
                J::str("second")
            };
            if let Some(J::Obj(m)) = cx.record.at_mut(parent) {
                m.push((name.clone(), v));
            }
            cx.fail(&path, format!("duplicate key [{name}] is not permitted"));
        }
        Op::BadNumber(_, text) => numbers::bad_number(cx, slot, text),
        Op::Renotate(_, style) => {
            let J::Num(t) = cx.record.at(&path).unwrap().clone() else {
                unreachable!()
            };
            cx.set(&path, J::Num(numbers::renotate(&t, *style)));
        }
        Op::NoAccountId(_) => {
            let account = cx.record.at_mut(&path).unwrap();
            account.remove("iban");
            account.remove("account_number");
            cx.fail(
                &path,
                "bank account needs an iban or an account_number".into(),
            );
        }
        Op::EmptyArray(_) => {
            if slot.node["minItems"].as_u64().unwrap_or(0) > 0 {
                cx.fail(
                    &path,
                    "array is too short: must have at least 1 elements but instance has 0 elements"
                        .into(),
                );
            }
            cx.set(&path, J::Arr(vec![]));
        }
        Op::Nest(depth, objects) => {
            let key = "x_deep";
            let at = vec![Seg::Key(key.into())];
            if !cx.free(&at) || !matches!(cx.record, J::Obj(_)) {
                return;
            }
            let depth = [1, 20, 58, 59, 60, 61, 100, 1000][depth % 8];
            let mut v = J::Num("1".into());
            for _ in 0..depth {
                v = if *objects {
                    J::Obj(vec![("a".into(), v)])
                } else {
                    J::Arr(vec![v])
                };
            }
            cx.record.set(key, v);
            // The record sits at depth 5 of the body; the limit is 64 levels (D27).
            if 5 + depth > 64 {
                cx.out.too_deep = true;
            } else {
                cx.fail(&at, format!("extraneous key [{key}] is not permitted"));
            }
            cx.claimed.push(at);
            return;
        }
        Op::Flood(n) => {
            if !cx.free(&[Seg::Key("x_f0".into())]) || !matches!(cx.record, J::Obj(_)) {
                return;
            }
            let n = [20, 999, 1001, 1500][n % 4];
            for i in 0..n {
                cx.record.set(&format!("x_f{i}"), J::Num(i.to_string()));
            }
            cx.fail(
                &[Seg::Key("x_f0".into())],
                "extraneous key [x_f0] is not permitted".into(),
            );
            for i in 0..n {
                cx.claimed.push(vec![Seg::Key(format!("x_f{i}"))]);
            }
            return;
        }
        Op::NotObject(v) => {
            if !cx.free(&path) {
                return;
            }
            let others = [
                J::Num("2".into()),
                J::str("x"),
                J::Arr(vec![]),
                J::Null,
                J::Bool(true),
            ];
            let v = others[v % others.len()].clone();
            cx.fail(&path, type_msg(v.type_name(), "object"));
            *cx.record = v;
        }
        Op::EmptyString(_)
        | Op::BadChar(..)
        | Op::Multibyte(..)
        | Op::TooLong(..)
        | Op::BadDate(..)
        | Op::BadEnum(..)
        | Op::BadPattern(..)
        | Op::BadIban(..)
        | Op::BadBic(..) => strings::mutate(cx, slot, op),
        Op::BreakSum(_) => numbers::break_sum(cx, &path),
    }
    cx.claimed.push(path);
}

/// A mutation, with the selectors that pick its slot and variant.
pub fn op() -> impl Strategy<Value = Op> {
    let n = any::<usize>;
    prop_oneof![
        3 => (n(), n()).prop_map(|(a, b)| Op::WrongType(a, b)),
        2 => n().prop_map(Op::Null),
        3 => n().prop_map(Op::RemoveRequired),
        4 => n().prop_map(Op::RemoveOptional),
        3 => n().prop_map(Op::EmptyString),
        3 => (n(), n(), n()).prop_map(|(a, b, c)| Op::Unknown(a, b, c)),
        3 => (n(), any::<bool>()).prop_map(|(a, b)| Op::Duplicate(a, b)),
        6 => (n(), numbers::number_text()).prop_map(|(a, t)| Op::BadNumber(a, t)),
        6 => (n(), n()).prop_map(|(a, b)| Op::Renotate(a, b)),
        3 => (n(), n(), n()).prop_map(|(a, b, c)| Op::BadChar(a, b, c)),
        4 => (n(), n()).prop_map(|(a, b)| Op::Multibyte(a, b)),
        2 => (n(), n()).prop_map(|(a, b)| Op::TooLong(a, b)),
        3 => (n(), n()).prop_map(|(a, b)| Op::BadDate(a, b)),
        2 => (n(), n()).prop_map(|(a, b)| Op::BadEnum(a, b)),
        2 => (n(), n()).prop_map(|(a, b)| Op::BadPattern(a, b)),
        2 => (n(), n()).prop_map(|(a, b)| Op::BadIban(a, b)),
        2 => (n(), n()).prop_map(|(a, b)| Op::BadBic(a, b)),
        1 => n().prop_map(Op::NoAccountId),
        2 => n().prop_map(Op::BreakSum),
        2 => n().prop_map(Op::EmptyArray),
        1 => (n(), any::<bool>()).prop_map(|(a, b)| Op::Nest(a, b)),
        1 => n().prop_map(Op::Flood),
        1 => n().prop_map(Op::NotObject),
    ]
}
