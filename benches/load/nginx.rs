//! A baseline for single-record throughput: nginx from the OS packages answering a static 202 to the same
//! requests, started by the benchmark on a free loopback port.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = "/usr/sbin/nginx";

/// A running nginx, stopped when dropped.
pub struct Nginx {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Nginx {
    /// Starts nginx in `dir` with two workers (the machine's cores) answering every request
    /// with 202 and a small JSON body; `None` when nginx is not installed.
    pub fn start(dir: &Path) -> Option<Self> {
        if !Path::new(BINARY).exists() {
            println!("nginx baseline skipped: {BINARY} not found (apt-get install nginx-light)");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.display();
        let conf = format!(
            "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             keepalive_requests 1000000;\n\
             server {{\n  listen {addr};\n  default_type application/json;\n\
             location / {{ return 202 '{{\"status\":\"SUCCESS\",\"total\":1,\"succeeded\":1,\"failed\":0,\"errors\":[],\"message\":\"1 record(s) queued\"}}'; }}\n }}\n}}\n"
        );
        let file = dir.join("nginx.conf");
        std::fs::write(&file, conf).expect("write nginx.conf");
        let child = Command::new(BINARY)
            .arg("-c")
            .arg(&file)
            .arg("-p")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self { child, addr })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: a graceful stop of the master and its workers.
        crate::service::stop(&mut self.child, "-QUIT");
    }
}
