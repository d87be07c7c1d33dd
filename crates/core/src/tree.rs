//! A read-only view of a parsed JSON value, so the code that judges and writes a record (the
//! number rules, the XML-unsafe characters, the custom formats, the queue key and the XML)
//! runs unchanged on both trees a record can be parsed into: serde_json's `Value` (the
//! reference path, validated by boon) and the fast path's borrowed [`crate::validate::fast`]
//! tree. One piece of code per rule is what keeps the two paths' answers identical (D14).

use serde_json::{Map, Value};

/// What a JSON value is, borrowed from its tree.
pub enum Ref<'v, T: Tree + 'v> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number's text as received (D6, D23).
    Number(&'v str),
    /// A string, unescaped.
    String(&'v str),
    /// An array's items.
    Array(&'v [T]),
    /// An object's members.
    Object(&'v T::Object),
}

/// A JSON value in some tree.
pub trait Tree: Sized {
    /// The tree's object type.
    type Object: Members<Self> + ?Sized;

    /// What this value is.
    fn get_ref(&self) -> Ref<'_, Self>;

    /// A member of an object (`None` for a non-object or a missing member).
    fn member(&self, name: &str) -> Option<&Self> {
        match self.get_ref() {
            Ref::Object(o) => o.get(name),
            _ => None,
        }
    }

    /// The string, if this is one.
    fn as_str(&self) -> Option<&str> {
        match self.get_ref() {
            Ref::String(s) => Some(s),
            _ => None,
        }
    }
}

/// The members of an object, in document order.
pub trait Members<T> {
    /// The member called `name`.
    fn get(&self, name: &str) -> Option<&T>;

    /// How many members there are.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` on every member in document order.
    fn each<'s>(&'s self, f: impl FnMut(&'s str, &'s T))
    where
        T: 's;
}

impl Tree for Value {
    type Object = Map<String, Value>;

    fn get_ref(&self) -> Ref<'_, Self> {
        match self {
            Value::Null => Ref::Null,
            Value::Bool(b) => Ref::Bool(*b),
            Value::Number(n) => Ref::Number(n.as_str()),
            Value::String(s) => Ref::String(s),
            Value::Array(items) => Ref::Array(items),
            Value::Object(map) => Ref::Object(map),
        }
    }
}

impl Members<Value> for Map<String, Value> {
    fn get(&self, name: &str) -> Option<&Value> {
        Map::get(self, name)
    }

    fn len(&self) -> usize {
        Map::len(self)
    }

    fn each<'s>(&'s self, mut f: impl FnMut(&'s str, &'s Value))
    where
        Value: 's,
    {
        for (k, v) in self {
            f(k, v);
        }
    }
}
