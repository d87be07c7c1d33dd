//! Damaged queue files (D29).
