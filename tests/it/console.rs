//! D38: the console at `/docs/`: Swagger UI from files compiled into the binary, under a
//! strict Content-Security-Policy, driven in headless Chromium over WebDriver (chromedriver,
//! spoken to with ureq: no browser crate) the way a developer uses it.

use crate::common;
use crate::openapi::{get, skip_without};
use ap_intake::http::console::POLICY;
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long any one step of the browser may take.
const STEP: Duration = Duration::from_secs(30);

#[test]
fn the_console_is_served_from_the_binary_with_a_strict_policy() {
    let app = TestApp::start();
    let r = get(&app, "/docs");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/docs/"));
    for (path, media) in [
        ("/docs/", "text/html"),
        ("/docs/index.html", "text/html"),
        ("/docs/swagger-initializer.js", "text/javascript"),
        ("/docs/swagger-ui-bundle.js", "text/javascript"),
        ("/docs/swagger-ui.css", "text/css"),
        ("/docs/favicon-32x32.png", "image/png"),
    ] {
        // No key: the console is for anyone who can reach the listener.
        let r = get(&app, path);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap().starts_with(media),
            "{path}"
        );
        assert_eq!(r.header("content-security-policy"), Some(POLICY), "{path}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert!(r.header("x-request-id").is_some(), "{path}");
    }
    let page = get(&app, "/docs/").text;
    // Everything from the service itself, and no inline script.
    assert!(
        !page.contains("http:") && !page.contains("https:"),
        "{page}"
    );
    assert_eq!(page.matches("<script").count(), 2, "{page}");
    assert_eq!(page.matches("<script src=").count(), 2, "{page}");
    let init = get(&app, "/docs/swagger-initializer.js").text;
    assert!(init.contains("\"../openapi.json\""), "{init}");

    // Other paths under /docs/ are the ordinary 404; other methods are not the console's.
    let r = get(&app, "/docs/nothing-here.js");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["status"], "FAILED");
    let r = app.post("/docs/", "{}");
    assert_ne!(r.status, 200);
    let r = app.raw(b"HEAD /docs/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text, "");
}

/// A developer opens the console, authorizes with their key, tries the GL code interface
/// with its example and sees 202; the record is queued; the browser reported no
/// Content-Security-Policy violation.
#[test]
fn a_developer_sends_the_example_from_the_console() {
    let started = Instant::now();
    let Some(browser) = Browser::start() else {
        return;
    };
    let app = TestApp::start();
    let launched = started.elapsed();
    browser.watch_policy_violations();
    browser.goto(&app.url("/docs"));
    let title = browser.text_of(".swagger-ui .info .title", "ap-intake");
    assert!(title.contains("ap-intake"), "{title}");
    let rendered = started.elapsed();

    authorize(&browser, KEY);
    let op = "#operations-Intake-general-ledger-codes-v1";
    let (status, body) = try_the_example(&browser, op);
    assert_eq!(status.trim(), "202");
    assert!(body.contains("1 record(s) queued"), "{body}");
    assert!(app.item(&gl_key("4000")).is_some(), "the example is queued");
    look_around(&browser, op);
    assert_the_policy_held(&browser);
    eprintln!(
        "console test: browser up {launched:?}, console rendered {rendered:?}, total {:?}",
        started.elapsed()
    );
}

/// D47, issue 47: with `[oauth2]`, the console's Authorize dialog offers the client-credentials
/// flow; a developer enters a client's id and secret, the console fetches a token from
/// `/oauth2/token` (the document's tokenUrl) and the example goes out with
/// `Authorization: Bearer` and is queued.
#[test]
fn a_developer_fetches_a_token_in_the_console_and_sends_with_it() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let app = TestApp::with_client("erp-console", "console-secret");
    browser.watch_policy_violations();
    browser.goto(&app.url("/docs"));
    browser.text_of(".swagger-ui .info .title", "ap-intake");
    browser.click(".scheme-container button.authorize");
    browser.type_into("#client_id_clientCredentials", "erp-console");
    browser.type_into("#client_secret_clientCredentials", "console-secret");
    let oauth2 = "//div[contains(@class,'auth-container')][contains(., 'clientCredentials')]";
    browser.click(&format!("{oauth2}//button[contains(@class,'authorize')]"));
    let shown = browser.text_of(oauth2, "Logout");
    assert!(
        shown.contains("Logout"),
        "the token was not fetched: {shown}"
    );
    browser.click(".modal-ux button.btn-done");
    let op = "#operations-Intake-general-ledger-codes-v1";
    let (status, body) = try_the_example(&browser, op);
    assert_eq!(status.trim(), "202", "{body}");
    let curl = browser.text_of(&format!("{op} .curl-command"), "Bearer");
    assert!(curl.contains("Authorization: Bearer ey"), "{curl}");
    assert!(app.item(&gl_key("4000")).is_some(), "the example is queued");
    assert_the_policy_held(&browser);
}

/// D48: a developer reads the outcome feed in the console: what the example sent became,
/// and the cursor to go on from.
#[test]
fn a_developer_reads_the_outcome_feed_in_the_console() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let platform = crate::common::receiver::Receiver::start();
    let app = TestApp::delivering_to(&platform.url(), "");
    let sent = app.post_records("/general-ledger-codes/v1", &[gl("4000")]);
    assert_eq!(sent.status, 202, "{}", sent.text);
    eventually("4000 delivered", Duration::from_secs(20), || {
        app.item(&gl_key("4000")).is_none()
    });
    browser.watch_policy_violations();
    browser.goto(&app.url("/docs"));
    browser.text_of(".swagger-ui .info .title", "ap-intake");
    authorize(&browser, KEY);
    let op = "#operations-Receipts-outcome-feed";
    let (status, body) = execute(&browser, op, "200", "next");
    assert_eq!(status.trim(), "200", "{body}");
    assert!(
        body.contains("gl-code:main/4000") && body.contains("delivered"),
        "{body}"
    );
    assert_the_policy_held(&browser);
}

/// Authorize, the key, Authorize, Close.
fn authorize(browser: &Browser, key: &str) {
    browser.click(".scheme-container button.authorize");
    browser.type_into(".modal-ux .auth-container input", key);
    browser.click(".modal-ux button.modal-btn.authorize");
    browser.click(".modal-ux button.btn-done");
}

/// Opens the operation `op`, Try it out, Execute with its example: the status and body shown.
fn try_the_example(browser: &Browser, op: &str) -> (String, String) {
    execute(browser, op, "202", "record(s) queued")
}

/// Opens `op`, Try it out, Execute as it stands; the status and body once the status shows
/// `status` and the body `text`.
fn execute(browser: &Browser, op: &str, status: &str, text: &str) -> (String, String) {
    browser.click(&format!("{op} .opblock-summary-control"));
    browser.click(&format!("{op} .try-out__btn"));
    browser.click(&format!("{op} button.execute"));
    let answer = format!("{op} .live-responses-table tr.response");
    let status = browser.text_of(&format!("{answer} .response-col_status"), status);
    let body = browser.text_of(&format!("{answer} .response-col_description"), text);
    (status, body)
}

/// The rest of what a developer looks at, rendered under the policy too: the request's
/// schema, the record's model, an operation with the accountingType choice, the receipts.
/// (Opening all 20 operations takes the browser about 15 s, expanding every model 40 s.)
fn look_around(browser: &Browser, op: &str) {
    browser.click(&format!("{op} button.tablinks[data-name=model]"));
    let schema = browser.text_of(&format!("{op} .model-box"), "GeneralLedgerCodesV1Request");
    assert!(schema.contains("GeneralLedgerCodesV1Request"), "{schema}");
    let record = "//section[contains(@class,'models')]//article[.//strong[starts-with(text(),\
                  'GeneralLedgerCodesV1Record')]]";
    browser.click(&format!(
        "{record}//button[contains(@class,'expand-deep-button')]"
    ));
    let model = browser.text_of(record, "description_en");
    assert!(model.contains("description_en"), "{model}");
    for other in [
        "#operations-Intake-accounting-objects-v1",
        "#operations-Receipts-request-receipt",
    ] {
        browser.click(&format!("{other} .opblock-summary-control"));
        let body = browser.text_of(&format!("{other} .opblock-body"), "Responses");
        assert!(body.contains("Responses"), "{other}: {body}");
    }
}

/// No violation of the Content-Security-Policy, seen by the page's listener or in the
/// browser's log; and the listener does see one (an injected inline script, refused).
fn assert_the_policy_held(browser: &Browser) {
    let violations = browser.policy_violations();
    assert!(violations.is_empty(), "CSP violations: {violations:#?}");
    let logged = |e: &&Value| e["message"].to_string().contains("Content Security Policy");
    // Each read of the log returns what came since the previous one.
    let csp: Vec<_> = browser.log().iter().filter(logged).cloned().collect();
    assert!(csp.is_empty(), "CSP violations in the log: {csp:#?}");
    browser.script(
        "const s = document.createElement('script'); s.textContent = 'window.x = 1';\
         document.body.appendChild(s);",
    );
    eventually("the injected inline script is reported", STEP, || {
        !browser.policy_violations().is_empty()
    });
    assert_eq!(browser.script("return window.x;"), Value::Null);
    eventually("the injected inline script is logged", STEP, || {
        browser.log().iter().any(|e| logged(&e))
    });
}

/// A headless Chromium session over chromedriver's W3C WebDriver protocol.
struct Browser {
    driver: Child,
    base: String,
    agent: ureq::Agent,
}

impl Browser {
    /// A new session, or `None` (skipped) when chromedriver or Chromium is not installed.
    fn start() -> Option<Self> {
        if !(Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists()) {
            skip_without("chromedriver or chromium");
            return None;
        }
        let driver = Command::new(CHROMEDRIVER)
            .arg("--port=0")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        // Built first, so that chromedriver is stopped whatever fails next.
        let mut browser = Self {
            driver,
            base: String::new(),
            agent,
        };
        let port = driver_port(&mut browser.driver);
        browser.base = format!("http://127.0.0.1:{port}");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,2000"]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let session = browser.call("POST", "/session", Some(caps)).unwrap();
        let id = session["sessionId"].as_str().unwrap();
        browser.base = format!("{}/session/{id}", browser.base);
        Some(browser)
    }

    /// One WebDriver command: its `value`, or the driver's error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        }
        .map_err(|e| e.to_string())?;
        let ok = resp.status().is_success();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        if ok {
            Ok(v["value"].clone())
        } else {
            Err(v["value"].to_string())
        }
    }

    fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({"url": url})))
            .unwrap();
    }

    /// The element `css` (the first one; an XPath when it starts with `/`).
    fn find(&self, css: &str) -> Result<String, String> {
        let using = if css.starts_with('/') {
            "xpath"
        } else {
            "css selector"
        };
        let v = self.call(
            "POST",
            "/element",
            Some(json!({"using": using, "value": css})),
        )?;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| format!("no element id in {v}"))
    }

    /// Clicks `css` as soon as it is there and clickable (not under a closing dialog).
    fn click(&self, css: &str) {
        let mut last = String::new();
        let done = wait_for(STEP, || {
            match self
                .find(css)
                .and_then(|el| self.call("POST", &format!("/element/{el}/click"), None))
            {
                Ok(_) => true,
                Err(e) => {
                    last = e;
                    false
                }
            }
        });
        assert!(done, "could not click {css} within {STEP:?}: {last}");
    }

    fn type_into(&self, css: &str, text: &str) {
        let mut last = String::new();
        let done = wait_for(STEP, || {
            match self.find(css).and_then(|el| {
                self.call(
                    "POST",
                    &format!("/element/{el}/value"),
                    Some(json!({"text": text})),
                )
            }) {
                Ok(_) => true,
                Err(e) => {
                    last = e;
                    false
                }
            }
        });
        assert!(done, "could not type into {css} within {STEP:?}: {last}");
    }

    /// The text of `css` once it contains `expected` (or what it was at the deadline).
    fn text_of(&self, css: &str, expected: &str) -> String {
        let mut text = String::new();
        wait_for(STEP, || {
            if let Ok(t) = self
                .find(css)
                .and_then(|el| self.call("GET", &format!("/element/{el}/text"), None))
            {
                text = t.as_str().unwrap_or_default().to_string();
            }
            text.contains(expected)
        });
        text
    }

    /// Collects every `securitypolicyviolation` of the pages loaded from now on, from before
    /// their first script runs (Chrome DevTools protocol, through chromedriver).
    fn watch_policy_violations(&self) {
        let source = "window.__violations = [];\
            document.addEventListener('securitypolicyviolation', e => window.__violations.push(\
            e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber));";
        self.call(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Page.addScriptToEvaluateOnNewDocument",
                        "params": {"source": source}})),
        )
        .unwrap();
    }

    fn policy_violations(&self) -> Vec<Value> {
        let v = self.script("return window.__violations;");
        v.as_array().expect("the violation watcher ran").clone()
    }

    /// Runs `js` in the page; its return value.
    fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": js, "args": []})),
        )
        .unwrap()
    }

    /// The browser's console log.
    fn log(&self) -> Vec<Value> {
        let v = self
            .call("POST", "/se/log", Some(json!({"type": "browser"})))
            .unwrap();
        v.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", None);
        // Chromium runs in chromedriver's process group: whatever the session left of it goes
        // with chromedriver, even when the browser was too busy to quit.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status();
        let _ = self.driver.wait();
    }
}

/// The port chromedriver reports on stdout once it listens (`--port=0`: a free one).
fn driver_port(driver: &mut Child) -> u16 {
    let stdout = driver.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(port) = line
                .split("started successfully on port ")
                .nth(1)
                .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok())
            {
                let _ = tx.send(port);
            }
        }
    });
    rx.recv_timeout(STEP)
        .expect("chromedriver did not report its port")
}
