//! The store under faults (D29, D30): damaged files, a filesystem that fills. Each test runs
//! the real binary or the real store on real files in a temp dir.

mod damage;
mod disk_full;
mod slow;
mod socket;
