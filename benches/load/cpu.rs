//! CPU time by thread, from Linux's /proc: where a record's cost lands (the queue-write thread,
//! the checkpoint, everything else), and the bytes the queue-write thread wrote (the WAL). On a
//! machine whose speed drifts by the hour, CPU time and bytes per record are steadier figures
//! to compare two builds by than records per second.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Clock ticks per second of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const TICKS: u64 = 100;

/// CPU time used so far by a process, in all and by thread name; bytes written by the
/// queue-write thread.
pub struct Sample {
    process: Duration,
    threads: BTreeMap<String, Duration>,
    wal: u64,
}

/// The threads named apart in the report; the rest is counted together.
const NAMED: [&str; 2] = ["queue-write", "queue-checkpoin"];

impl Sample {
    /// CPU time of process `pid` (`None`: this process). Threads that ended are in the
    /// process's total only.
    pub fn of(pid: Option<u32>) -> Self {
        let dir = pid.map_or_else(|| "/proc/self".to_string(), |p| format!("/proc/{p}"));
        let process = std::fs::read_to_string(format!("{dir}/stat"))
            .ok()
            .and_then(|s| ticks(&s))
            .unwrap_or_default();
        let mut threads = BTreeMap::new();
        let mut wal = 0;
        for task in std::fs::read_dir(format!("{dir}/task"))
            .into_iter()
            .flatten()
        {
            let Ok(task) = task else { continue };
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let name = name.trim();
            if !NAMED.contains(&name) {
                continue;
            }
            *threads.entry(name.to_string()).or_default() += on_cpu(&path);
            if name == NAMED[0] {
                // `wchar`: bytes passed to write calls (SQLite's WAL frames, and the database
                // file when this thread checkpoints by itself).
                wal += std::fs::read_to_string(path.join("io"))
                    .ok()
                    .and_then(|s| {
                        let v = s.lines().find_map(|l| l.strip_prefix("wchar:"))?;
                        v.trim().parse::<u64>().ok()
                    })
                    .unwrap_or(0);
            }
        }
        Self {
            process,
            threads,
            wal,
        }
    }

    /// One line: microseconds of CPU per record since `earlier`, by thread.
    pub fn per_record(&self, earlier: &Sample, records: u64) -> String {
        if records == 0 {
            return "CPU per record: no record was stored".to_string();
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / records as f64;
        let total = self.process.saturating_sub(earlier.process);
        let mut named = Duration::ZERO;
        let mut line = String::from("CPU per record (us):");
        for name in NAMED {
            let now = self.threads.get(name).copied().unwrap_or_default();
            let then = earlier.threads.get(name).copied().unwrap_or_default();
            let used = now.saturating_sub(then);
            named += used;
            line += &format!(" {name} {:.1},", per(used));
        }
        line += &format!(
            " the rest {:.1}; in all {:.1}; queue-write wrote {} bytes per record",
            per(total.saturating_sub(named)),
            per(total),
            self.wal.saturating_sub(earlier.wal) / records
        );
        line
    }
}

/// Time a thread has spent on a CPU, from its /proc task directory (`/proc/thread-self` for
/// the caller): schedstat's first field, in nanoseconds.
pub fn on_cpu(task: &Path) -> Duration {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// utime + stime of a /proc/PID/stat line (fields 14 and 15, after the command in brackets).
fn ticks(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / TICKS))
}
