//! The store under faults (D29, D30, D40): damaged files, a filesystem that fills, flushes
//! that fail. Each test runs the real binary or the real store on real files in a temp dir.

mod backup;
mod damage;
mod disk_full;
mod flaky;
mod flush;
mod slow;
mod socket;
