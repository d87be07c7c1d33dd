//! The summary line (D36): every minute with traffic, the requests answered by status; beside
//! it the refusals not logged one by one (D44) and the deliveries of that minute, each of which
//! is only a debug line of its own (D44).

use super::RequestLog;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often the summary line is written (while there is traffic).
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// `requests <period>: 202=1234 207=3 400=12`, or `None` without traffic.
pub fn summary_line(counts: &[(u16, u64)], period: &str) -> Option<String> {
    if counts.is_empty() {
        return None;
    }
    let mut line = format!("requests {period}:");
    for (status, n) in counts {
        line.push_str(&format!(" {status}={n}"));
    }
    Some(line)
}

/// Documents and records delivered since the last call (the metrics', wired in `service`).
pub type Deliveries = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

fn log_summary(log: &RequestLog, deliveries: &Deliveries, period: &str) {
    log.refusals.end_minute(period);
    if let Some(line) = summary_line(&log.take(), period) {
        tracing::info!("{line}");
    }
    // Each delivery is a debug line; at info this one line counts them (D44).
    let (documents, records) = deliveries();
    if documents > 0 {
        tracing::info!(documents, records, "platform deliveries {period}");
    }
}

/// The task writing the summary line every [`SUMMARY_EVERY`] with traffic.
pub struct Summary {
    task: JoinHandle<()>,
    log: Arc<RequestLog>,
    deliveries: Arc<Deliveries>,
}

impl Summary {
    /// Starts the task (inside a tokio runtime).
    pub fn start(log: Arc<RequestLog>, deliveries: Deliveries) -> Self {
        Self::every(log, deliveries, SUMMARY_EVERY)
    }

    fn every(log: Arc<RequestLog>, deliveries: Deliveries, every: Duration) -> Self {
        let period = if every == SUMMARY_EVERY {
            "in the last minute".to_string()
        } else {
            format!("in the last {} ms", every.as_millis())
        };
        let counted = Arc::clone(&log);
        let deliveries = Arc::new(deliveries);
        let delivered = Arc::clone(&deliveries);
        let task = tokio::spawn(async move {
            let start = tokio::time::Instant::now() + every;
            let mut ticks = tokio::time::interval_at(start, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                log_summary(&counted, &delivered, &period);
            }
        });
        Self {
            task,
            log,
            deliveries,
        }
    }

    /// Stops the task and writes what was counted since its last line (call it once the
    /// requests in flight are answered).
    pub fn stop(self) {
        self.task.abort();
        log_summary(&self.log, &self.deliveries, "since the last summary");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RequestLines;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    /// Captures what the summary task logs.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_summary_task_writes_a_line_only_for_periods_with_traffic() {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let log = Arc::new(RequestLog::new(RequestLines::Off));
        let text = || String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        runtime.block_on(async {
            let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let count = Arc::clone(&delivered);
            let deliveries: Deliveries = Box::new(move || {
                let n = count.swap(0, Ordering::Relaxed);
                (u64::from(n > 0), n)
            });
            let summary = Summary::every(Arc::clone(&log), deliveries, Duration::from_millis(100));
            log.answered(202, None);
            log.answered(400, None);
            delivered.store(7, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert!(
                text().contains("requests in the last 100 ms: 202=1 400=1"),
                "{}",
                text()
            );
            assert!(
                text().contains("platform deliveries in the last 100 ms documents=1 records=7"),
                "{}",
                text()
            );
            tokio::time::sleep(Duration::from_millis(300)).await; // periods without traffic
            assert_eq!(text().lines().count(), 2, "{}", text());
            log.answered(207, None);
            summary.stop();
        });
        let text = text();
        assert!(
            text.contains("requests since the last summary: 207=1"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 3, "{text}");
    }
}
