//! A filesystem that fills (D30).
