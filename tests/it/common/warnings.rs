//! Warnings logged by the product in this test binary, captured by a global tracing
//! subscriber, so a test can find the ones that name its own platform, record or data
//! directory.

use std::fmt::Write;
use std::sync::{Mutex, Once};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static INIT: Once = Once::new();

struct Capture;
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == Level::WARN {
            let mut text = Text(String::new());
            event.record(&mut text);
            LINES.lock().unwrap().push(text.0);
        }
    }
}

/// Installs the capture (once per test binary).
pub fn capture() {
    INIT.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
            .expect("no other global subscriber in this test binary");
    });
}

/// The warnings logged so far whose text holds every one of `needles`.
pub fn matching(needles: &[&str]) -> Vec<String> {
    LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .cloned()
        .collect()
}
