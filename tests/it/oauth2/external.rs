//! D47, issue 47: tokens of the customer's own identity provider. A real OpenID provider
//! (panva's oidc-provider, OpenID certified; tests/clients/idp.mjs, installed by .ci/run)
//! issues client-credentials tokens; the service checks them offline against the provider's
//! JWKS, follows a key rotation without a restart, keeps working while the provider is
//! down (also after its own restart, from the set kept in data_dir), and with no set at all
//! answers 503 with Retry-After and says why on /readyz.

use super::*;
use crate::common::skip::skip;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const RESOURCE: &str = "api://ap-intake";

/// tests/clients/idp.mjs, when node and oidc-provider (target/ci-node) are there.
fn script() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let installed = root.join("target/ci-node/node_modules/oidc-provider/package.json");
    let node = Command::new("node").arg("--version").output();
    (installed.exists() && node.is_ok_and(|o| o.status.success()))
        .then(|| root.join("tests/clients/idp.mjs"))
}

/// One private JWK made by the provider's own library.
fn genkey(script: &Path, alg: &str, kid: &str) -> Value {
    let out = Command::new("node")
        .arg(script)
        .args(["genkey", alg, kid])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A running provider; stopped when dropped.
struct Idp {
    child: Child,
    url: String,
}

impl Idp {
    /// Serves `keys` (the first signs) on `port` (0: any).
    fn start(script: &Path, dir: &Path, keys: &[&Value], port: u16) -> Self {
        Self::start_with(script, dir, keys, port, &[])
    }

    /// [`Idp::start`] with more of idp.mjs's options (`--roles`).
    fn start_with(script: &Path, dir: &Path, keys: &[&Value], port: u16, more: &[&str]) -> Self {
        let file = dir.join("idp-keys.json");
        std::fs::write(&file, serde_json::to_vec(keys).unwrap()).unwrap();
        let mut child = Command::new("node")
            .arg(script)
            .args(["serve", "--keys"])
            .arg(&file)
            .args(["--port", &port.to_string()])
            .args(more)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("idp.mjs said {line:?}"))
            .trim()
            .to_string();
        Self { child, url }
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// A client-credentials token for `scope`, the client authenticated by HTTP Basic.
    fn token(&self, scope: &str) -> String {
        let mut r = agent()
            .post(&format!("{}/token", self.url))
            .header("Authorization", &basic("erp-idp", "idp-secret"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(format!(
                "grant_type=client_credentials&resource={RESOURCE}&scope={}",
                scope.replace(' ', "+")
            ))
            .unwrap();
        let r = reply_of(&mut r);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["access_token"].as_str().unwrap().to_string()
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The header of a JWT.
fn jwt_header(token: &str) -> Value {
    serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap()
}

/// A service that accepts the provider at `issuer` (its JWKS at `issuer/jwks`) beside keys.
fn config(dir: &Path, issuer: &str) -> Config {
    config_claiming(dir, issuer, "scope")
}

/// [`config`] reading what a token may use from `claim`.
fn config_claiming(dir: &Path, issuer: &str, claim: &str) -> Config {
    let tables = format!(
        "[oauth2.external]\nissuer = \"{issuer}\"\naudience = \"{RESOURCE}\"\n\
         jwks_url = \"{issuer}/jwks\"\nscope_claim = \"{claim}\"\n"
    );
    let text = config_for(&dir.join("data"), "", NOWHERE, &tables);
    Config::parse(&text, Path::new("t.toml")).unwrap()
}

/// Waits until the service has the provider's key set (fetched in the background at start).
fn wait_ready(app: &TestApp) {
    eventually("the provider's key set", Duration::from_secs(20), || {
        agent()
            .get(&app.ops_url("/readyz"))
            .call()
            .is_ok_and(|r| r.status() == 200)
    });
}

#[test]
fn tokens_of_a_real_openid_provider_are_accepted_across_rotation_and_outage() {
    let Some(script) = script() else {
        return skip("node and oidc-provider (target/ci-node, .ci/run)");
    };
    let tmp = tempfile::tempdir().unwrap();
    let (k1, k2) = (
        genkey(&script, "RS256", "idp-k1"),
        genkey(&script, "ES256", "idp-k2"),
    );
    let idp = Idp::start(&script, tmp.path(), &[&k1], 0);
    let dir = tempfile::tempdir().unwrap();
    let settings = config(dir.path(), &idp.url);
    let app = TestApp::start_config(dir, settings);
    wait_ready(&app);

    let first = idp.token("general-ledger-codes-v1");
    assert_eq!(jwt_header(&first)["kid"], "idp-k1");
    let r = post_bearer(&app, GL, &first);
    assert_eq!(r.status, 202, "{}", r.text);
    // The scope names GL codes only: vendors are 403 before the body is read.
    let r = app.post_with(
        "/vendor-data/v1",
        "{",
        &[
            ("Authorization", &format!("Bearer {first}")),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.text);
    // ap-intake.write names every interface.
    let all = idp.token("ap-intake.write");
    let vendors = envelope(&[fixture("vendor-data", "minimal")]).to_string();
    let r = app.post_with(
        "/vendor-data/v1",
        &vendors,
        &[
            ("Authorization", &format!("Bearer {all}")),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 202, "{}", r.text);

    // The provider rotates: it now signs with k2 (k1 still published, as providers do).
    let port = idp.port();
    idp.stop();
    let idp = Idp::start(&script, tmp.path(), &[&k2, &k1], port);
    let rotated = idp.token("general-ledger-codes-v1");
    assert_eq!(jwt_header(&rotated)["kid"], "idp-k2");
    // The unknown kid makes the service fetch the set again at once (D47, at most once a
    // minute): no restart, no waiting for the 15-minute refresh.
    let r = post_bearer(&app, GL, &rotated);
    assert_eq!(r.status, 202, "{}", r.text);

    // The provider goes away: tokens it issued keep working, from the set in memory...
    idp.stop();
    assert_eq!(post_bearer(&app, GL, &first).status, 202);
    assert_eq!(post_bearer(&app, GL, &rotated).status, 202);
    // ...and after the service restarts, from the set it kept in data_dir.
    let cached = ap_intake::oauth2::provider::cache_file(
        &app.data_dir(),
        &format!("http://127.0.0.1:{port}/jwks"),
    );
    assert!(cached.exists(), "the last good set is kept on disk");
    let dir = app.stop();
    let settings = config(dir.path(), &format!("http://127.0.0.1:{port}"));
    let app = TestApp::start_config(dir, settings);
    let r = agent().get(&app.ops_url("/readyz")).call().unwrap();
    assert_eq!(r.status(), 200, "the kept set makes the service ready");
    assert_eq!(post_bearer(&app, GL, &rotated).status, 202);
    assert_eq!(post_bearer(&app, GL, &first).status, 202);
    // A kid neither set has is 401 (the refetch fails; the kept set stays).
    let stranger =
        Forged::valid("idp-k3").signed(&ap_intake::oauth2::keys::generate_pem().unwrap());
    let r = app.post_with(
        GL,
        &envelope(&[gl("X9")]).to_string(),
        &[
            ("Authorization", &format!("Bearer {stranger}")),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(
        app.item(&gl_key("X9")).is_none(),
        "nothing of a refused request is queued"
    );
    assert!(app.item(&gl_key("T1")).is_some());
}

#[test]
fn with_no_key_set_yet_a_bearer_request_is_503_and_readyz_says_why() {
    let Some(script) = script() else {
        return skip("node and oidc-provider (target/ci-node, .ci/run)");
    };
    let tmp = tempfile::tempdir().unwrap();
    let idp = Idp::start(&script, tmp.path(), &[&genkey(&script, "RS256", "k")], 0);
    let good = idp.token("ap-intake.write");
    // The service knows the provider by a URL where nothing answers, and has no kept set.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path(), &nowhere);
    if let Some(e) = settings.oauth2.as_mut().and_then(|o| o.external.as_mut()) {
        e.issuer = idp.url.clone();
    }
    let app = TestApp::start_config(dir, settings);
    let r = post_bearer(&app, GL, &good);
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("30"));
    assert!(r.json()["request_id"].is_string(), "{}", r.text);
    let ready = reply_of(&mut agent().get(&app.ops_url("/readyz")).call().unwrap());
    assert_eq!(ready.status, 503, "{}", ready.text);
    let why = ready.json()["tokens"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("identity provider"), "{}", ready.text);
    // API keys are not held up by the provider.
    assert_eq!(app.post_records(GL, &[gl("K1")]).status, 202);
    assert!(
        app.item(&gl_key("T1")).is_none(),
        "nothing of the 503 was queued"
    );
}

/// Entra ID's application permissions come as a `roles` array and no `scope`: with
/// `scope_claim = "roles"` they name the interfaces; read from `scope`, the same token may use
/// nothing (403).
#[test]
fn roles_name_the_interfaces_when_scope_claim_says_so() {
    let Some(script) = script() else {
        return skip("node and oidc-provider (target/ci-node, .ci/run)");
    };
    let tmp = tempfile::tempdir().unwrap();
    let key = genkey(&script, "RS256", "roles-k");
    let idp = Idp::start_with(&script, tmp.path(), &[&key], 0, &["--roles"]);
    let token = idp.token("general-ledger-codes-v1");
    let claims: Value =
        serde_json::from_slice(&B64.decode(token.split('.').nth(1).unwrap()).unwrap()).unwrap();
    assert_eq!(
        claims["roles"],
        json!(["general-ledger-codes-v1"]),
        "{claims}"
    );
    assert!(claims.get("scope").is_none(), "{claims}");
    for (claim, status) in [("roles", 202), ("scope", 403)] {
        let dir = tempfile::tempdir().unwrap();
        let settings = config_claiming(dir.path(), &idp.url, claim);
        let app = TestApp::start_config(dir, settings);
        wait_ready(&app);
        let r = post_bearer(&app, GL, &token);
        assert_eq!(r.status, status, "scope_claim = {claim}: {}", r.text);
    }
}
