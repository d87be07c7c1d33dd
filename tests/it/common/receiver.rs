//! A real HTTP listener standing in for the AP platform: records every request and answers
//! with a handler the test can change at any time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request the platform received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `(status, extra headers, body)`.
pub type Answer = (u16, Vec<(String, String)>, String);
type Handler = Arc<dyn Fn(&Received) -> Answer + Send + Sync>;

pub struct Receiver {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<(Received, u16)>>>,
    handler: Arc<Mutex<Handler>>,
    stop: Arc<AtomicBool>,
}

pub fn ok() -> Answer {
    (200, vec![], "ok".into())
}

impl Receiver {
    /// Starts answering 200 to everything.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let r = Self {
            addr,
            log: Arc::default(),
            handler: Arc::new(Mutex::new(Arc::new(|_: &Received| ok()))),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (log, handler, stop) = (
            Arc::clone(&r.log),
            Arc::clone(&r.handler),
            Arc::clone(&r.stop),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (log, handler) = (Arc::clone(&log), Arc::clone(&handler));
                std::thread::spawn(move || serve(conn, &log, &handler));
            }
        });
        r
    }

    /// The platform URL to configure.
    pub fn url(&self) -> String {
        format!("http://{}/intake", self.addr)
    }

    pub fn answer(&self, f: impl Fn(&Received) -> Answer + Send + Sync + 'static) {
        *self.handler.lock().unwrap() = Arc::new(f);
    }

    /// Answers 503 with `reason` until the returned flag is set, then 200.
    pub fn down(&self, reason: &'static str) -> Arc<std::sync::atomic::AtomicBool> {
        let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&up);
        self.answer(move |_| {
            if flag.load(Ordering::Relaxed) {
                ok()
            } else {
                (503, vec![], reason.into())
            }
        });
        up
    }

    /// Holds every request until [`Held::release`], then answers 200; counts arrivals.
    pub fn hold(&self) -> Held {
        let held = Held::default();
        let (release, arrived) = (Arc::clone(&held.release), Arc::clone(&held.arrived));
        self.answer(move |_| {
            arrived.fetch_add(1, Ordering::Relaxed);
            while !release.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            ok()
        });
        held
    }

    /// Requests so far, with the status each got.
    pub fn received(&self) -> Vec<(Received, u16)> {
        self.log.lock().unwrap().clone()
    }

    /// Bodies of the requests answered 2xx.
    pub fn delivered(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|(_, s)| (200..300).contains(s))
            .map(|(r, _)| r)
            .collect()
    }

    /// Waits up to `timeout` for `done` to hold over the requests received.
    pub fn wait_for(&self, timeout: Duration, done: impl Fn(&[(Received, u16)]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if done(&self.received()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        done(&self.received())
    }
}

/// A platform that holds its answers ([`Receiver::hold`]).
#[derive(Default)]
pub struct Held {
    release: Arc<std::sync::atomic::AtomicBool>,
    arrived: Arc<std::sync::atomic::AtomicUsize>,
}

impl Held {
    /// Requests that have arrived, answered or not.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::Relaxed)
    }

    /// Lets every held request, and every later one, be answered.
    pub fn release(&self) {
        self.release.store(true, Ordering::Relaxed);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, log: &Mutex<Vec<(Received, u16)>>, handler: &Mutex<Handler>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let req = Received {
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    };
    let h = Arc::clone(&handler.lock().unwrap());
    let (status, extra, text) = h(&req);
    log.lock().unwrap().push((req, status));
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        text.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&text);
    let mut conn = conn;
    let _ = conn.write_all(out.as_bytes());
}

/// `(code, description_en)` of every GL-code record in a delivered document.
pub fn gl_records(doc: &str) -> Vec<(String, String)> {
    doc.split("<gl_code>")
        .skip(1)
        .map(|rec| {
            let field = |name: &str| {
                rec.split(&format!("<{name}>"))
                    .nth(1)
                    .and_then(|s| s.split('<').next())
                    .unwrap_or("")
                    .to_string()
            };
            (field("code"), field("description_en"))
        })
        .collect()
}
