//! Every interface over real HTTP: fixtures accepted and turned into schema-valid XML, and each
//! validation rule of the schemas (required, unknown, types, null, enums, dates, decimals,
//! maximum lengths) answered with the exact texts of decisions.md ("Validation messages", D1-D3,
//! D6-D9, D13).
//!
//! The cases are derived from the shipped JSON Schemas, so a field added to a schema is tested
//! without touching this file. One service per test function; the interfaces are looped inside.

mod support;

mod accepted;
mod literal;
mod offline;
mod paths;
mod shape;
mod values;
