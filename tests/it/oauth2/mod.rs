//! OAuth 2.0 client credentials (D47, issue 47): the service's token endpoint, bearer tokens
//! on the interfaces and receipts checked before the body is read, every way a token can be
//! wrong, scopes, and two nodes sharing a signing key; the spec's Client_Id and
//! Client_Secret on each request. `external.rs`: the customer's identity provider (a real
//! OpenID provider); `reload.rs`: SIGHUP; `library.rs`: a real OAuth 2.0 client library.

mod external;
mod library;
mod reload;

use crate::common::*;
use ap_intake::config::Config;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const GL: &str = "/general-ledger-codes/v1";
/// A client that may send GL codes only, and its secret.
const CLIENT: &str = "erp-main";
const SECRET: &str = "correct horse battery staple";
/// A client that may send everything.
const ALL_CLIENT: &str = "erp-all";

/// A signing key file in `dir`.
fn signing_key(dir: &Path, name: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, ap_intake::oauth2::keys::generate_pem().unwrap()).unwrap();
    file
}

/// The `[oauth2]` tables: `key`, and the two clients.
fn oauth2_tables(key: &Path) -> String {
    format!(
        "[oauth2]\nsigning_key_file = '{}'\n\
         [[oauth2.clients]]\nclient_id = \"{CLIENT}\"\nsecret_sha256 = \"{}\"\ninterfaces = [\"general-ledger-codes-v1\"]\n\
         [[oauth2.clients]]\nclient_id = \"{ALL_CLIENT}\"\nsecret_sha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        key.display(),
        sha(SECRET),
        sha(SECRET)
    )
}

fn start(key: &Path) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let text = config_for(&dir.path().join("data"), "", NOWHERE, &oauth2_tables(key));
    let config = Config::parse(&text, Path::new("t.toml")).unwrap();
    TestApp::start_config(dir, config)
}

/// POSTs a form to the token endpoint with `headers`.
fn token_request(app: &TestApp, form: &str, headers: &[(&str, &str)]) -> Reply {
    let mut h = vec![("Content-Type", "application/x-www-form-urlencoded")];
    h.extend_from_slice(headers);
    app.post_with("/oauth2/token", form, &h)
}

fn basic(id: &str, secret: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")))
}

/// A token for `client` with `scope` (none: all it may have), by HTTP Basic.
fn token(app: &TestApp, client: &str, scope: Option<&str>) -> String {
    let form = match scope {
        Some(s) => format!(
            "grant_type=client_credentials&scope={}",
            s.replace(' ', "+")
        ),
        None => "grant_type=client_credentials".to_string(),
    };
    let r = token_request(app, &form, &[("Authorization", &basic(client, SECRET))]);
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["access_token"].as_str().unwrap().to_string()
}

fn post_bearer(app: &TestApp, path: &str, token: &str) -> Reply {
    app.post_with(
        path,
        &envelope(&[gl("T1")]).to_string(),
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
    )
}

#[test]
fn a_client_gets_a_token_and_sends_with_it() {
    let keys = tempfile::tempdir().unwrap();
    let app = start(&signing_key(keys.path(), "k.pem"));
    let r = token_request(
        &app,
        "grant_type=client_credentials",
        &[("Authorization", &basic(CLIENT, SECRET))],
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let body = r.json();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert_eq!(body["scope"], "general-ledger-codes-v1");
    let issued = body["access_token"].as_str().unwrap();
    let header: Value =
        serde_json::from_slice(&B64.decode(issued.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "EdDSA");

    let sent = post_bearer(&app, GL, issued);
    assert_eq!(sent.status, 202, "{}", sent.text);
    // Its receipt is the client's: readable with a token of the same client, not with a key.
    let id = sent.json()["request_id"].as_str().unwrap().to_string();
    let get = |h: (&str, String)| {
        reply_of(
            &mut agent()
                .get(&app.url(&format!("/requests/{id}")))
                .header(h.0, &h.1)
                .call()
                .unwrap(),
        )
    };
    let other = token(&app, CLIENT, None);
    assert_eq!(
        get(("Authorization", format!("Bearer {other}"))).status,
        200
    );
    assert_eq!(get(("x-api-key", KEY.to_string())).status, 404);

    // client_secret_post works as well.
    let form = format!(
        "grant_type=client_credentials&client_id={CLIENT}&client_secret={}",
        SECRET.replace(' ', "+")
    );
    let r = token_request(&app, &form, &[]);
    assert_eq!(r.status, 200, "{}", r.text);

    // The public keys and the metadata need no credentials.
    let jwks = reply_of(&mut agent().get(&app.url("/oauth2/jwks")).call().unwrap()).json();
    assert_eq!(jwks["keys"][0]["kid"], header["kid"]);
    assert!(jwks["keys"][0].get("d").is_none());
    let meta = reply_of(
        &mut agent()
            .get(&app.url("/.well-known/oauth-authorization-server"))
            .call()
            .unwrap(),
    )
    .json();
    assert_eq!(meta["issuer"], "ap-intake");
    assert!(
        meta["token_endpoint"]
            .as_str()
            .unwrap()
            .ends_with("/oauth2/token")
    );
    assert_eq!(meta["grant_types_supported"], json!(["client_credentials"]));
}

#[test]
fn the_token_endpoint_answers_as_rfc_6749_says() {
    let keys = tempfile::tempdir().unwrap();
    let app = start(&signing_key(keys.path(), "k.pem"));
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, u16, &'a str);
    let cases: [Case; 6] = [
        (
            "grant_type=client_credentials",
            vec![("Authorization", basic(CLIENT, "wrong"))],
            401,
            "invalid_client",
        ),
        (
            "grant_type=client_credentials",
            vec![],
            401,
            "invalid_client",
        ),
        (
            "grant_type=password",
            vec![("Authorization", basic(CLIENT, SECRET))],
            400,
            "unsupported_grant_type",
        ),
        (
            "grant_type=client_credentials&scope=vendor-data-v1",
            vec![("Authorization", basic(CLIENT, SECRET))],
            400,
            "invalid_scope",
        ),
        (
            "grant_type=client_credentials&client_secret=x&client_id=erp-main",
            vec![("Authorization", basic(CLIENT, SECRET))],
            400,
            "invalid_request",
        ),
        (
            "grant_type=client_credentials&grant_type=client_credentials",
            vec![("Authorization", basic(CLIENT, SECRET))],
            400,
            "invalid_request",
        ),
    ];
    for (form, headers, status, error) in cases {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = token_request(&app, form, &h);
        assert_eq!(
            (r.status, r.json()["error"].as_str()),
            (status, Some(error)),
            "{form}: {}",
            r.text
        );
        if status == 401 {
            assert!(r.header("www-authenticate").is_some(), "{form}");
        }
    }
}

/// Claims and header of a token made here, signed with `pem`'s key unless said otherwise.
struct Forged {
    header: Value,
    claims: Value,
}

impl Forged {
    fn valid(kid: &str) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Self {
            header: json!({"alg": "EdDSA", "typ": "at+jwt", "kid": kid}),
            claims: json!({"iss": "ap-intake", "aud": "ap-intake", "sub": CLIENT,
                "client_id": CLIENT, "scope": "general-ledger-codes-v1",
                "iat": now, "exp": now + 600}),
        }
    }

    fn signed(&self, pem: &str) -> String {
        let key = jsonwebtoken::EncodingKey::from_ed_pem(pem.as_bytes()).unwrap();
        let header: jsonwebtoken::Header = serde_json::from_value(self.header.clone()).unwrap();
        jsonwebtoken::encode(&header, &self.claims, &key).unwrap()
    }
}

/// Every way a token can be wrong gets 401 with `invalid_token` before the body is read, and
/// nothing is queued; a valid key beside a failing token is still 401 (D47).
#[test]
fn every_wrong_token_is_refused_before_the_body() {
    let keys = tempfile::tempdir().unwrap();
    let file = signing_key(keys.path(), "k.pem");
    let pem = std::fs::read_to_string(&file).unwrap();
    let other_pem = std::fs::read_to_string(signing_key(keys.path(), "other.pem")).unwrap();
    let app = start(&file);
    let kid = ap_intake::oauth2::SigningKey::from_pem(pem.as_bytes())
        .unwrap()
        .kid;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let with = |f: &dyn Fn(&mut Forged)| {
        let mut t = Forged::valid(&kid);
        f(&mut t);
        t.signed(&pem)
    };
    let good = with(&|_| {});
    assert_eq!(
        post_bearer(&app, GL, &good).status,
        202,
        "the forged-valid token is valid"
    );
    let encode = |v: &Value| B64.encode(v.to_string());
    let changed = {
        let parts: Vec<&str> = good.split('.').collect();
        let mut claims = Forged::valid(&kid).claims;
        claims["scope"] = json!("ap-intake.write");
        format!("{}.{}.{}", parts[0], encode(&claims), parts[2])
    };
    let none = format!(
        "{}.{}.",
        encode(&json!({"alg": "none", "typ": "at+jwt", "kid": kid})),
        encode(&Forged::valid(&kid).claims)
    );
    let hs256 = {
        let public = B64
            .decode(
                ap_intake::oauth2::SigningKey::from_pem(pem.as_bytes())
                    .unwrap()
                    .jwk["x"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.typ = Some("at+jwt".into());
        header.kid = Some(kid.clone());
        jsonwebtoken::encode(
            &header,
            &Forged::valid(&kid).claims,
            &jsonwebtoken::EncodingKey::from_secret(&public),
        )
        .unwrap()
    };
    let unknown_kid = {
        let other = ap_intake::oauth2::SigningKey::from_pem(other_pem.as_bytes()).unwrap();
        let mut t = Forged::valid(&other.kid);
        t.claims["sub"] = json!(CLIENT);
        t.signed(&other_pem)
    };
    let cases: Vec<(&str, String)> = vec![
        ("expired", with(&|t| t.claims["exp"] = json!(now - 120))),
        (
            "not yet valid",
            with(&|t| t.claims["nbf"] = json!(now + 600)),
        ),
        (
            "wrong issuer",
            with(&|t| t.claims["iss"] = json!("someone-else")),
        ),
        (
            "wrong audience",
            with(&|t| t.claims["aud"] = json!("another-api")),
        ),
        ("not at+jwt", with(&|t| t.header["typ"] = json!("JWT"))),
        (
            "unknown client",
            with(&|t| {
                t.claims["client_id"] = json!("nobody");
                t.claims["sub"] = json!("nobody");
            }),
        ),
        ("a changed claim", changed),
        ("alg none", none),
        ("HS256 with the public key as the secret", hs256),
        ("an unknown kid", unknown_kid),
        ("not a JWT", "abc.def".to_string()),
    ];
    let head = |auth: &str| {
        format!(
            "POST {GL} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
    };
    for (what, token) in &cases {
        // Headers only: the declared body never comes. 401 (not 408) shows the token was
        // judged before the body was waited for.
        let r = app.raw(head(&format!("Authorization: Bearer {token}\r\n")).as_bytes());
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Bearer realm="ap-intake", error="invalid_token""#),
            "{what}"
        );
        assert_eq!(
            r.json(),
            json!({"status": "FAILED", "message": "access token invalid or expired"}),
            "{what}"
        );
    }
    // A valid key beside a failing token: the failing credential refuses the request.
    let r = app.raw(
        head(&format!(
            "x-api-key: {KEY}\r\nAuthorization: Bearer {}\r\n",
            cases[0].1
        ))
        .as_bytes(),
    );
    assert_eq!(r.status, 401, "{}", r.text);
    // A token where an API key belongs is no key.
    let r = app.raw(head(&format!("x-api-key: {good}\r\n")).as_bytes());
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (401, Some("API key invalid"))
    );
    assert_eq!(
        app.store().items().unwrap().len(),
        1,
        "only the valid token's record was queued"
    );
}

/// A token whose scope does not name the interface gets 403 `insufficient_scope` before the
/// body is read.
#[test]
fn a_scope_that_does_not_name_the_interface_is_403_before_the_body() {
    let keys = tempfile::tempdir().unwrap();
    let app = start(&signing_key(keys.path(), "k.pem"));
    let narrow = token(&app, ALL_CLIENT, Some("general-ledger-codes-v1"));
    let r = app.raw(
        format!(
            "POST /vendor-data/v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {narrow}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="ap-intake", error="insufficient_scope", scope="vendor-data-v1""#)
    );
    let wide = token(&app, ALL_CLIENT, None);
    assert_eq!(post_bearer(&app, GL, &wide).status, 202);
}

/// Two nodes given the same key file accept each other's tokens; a node with another key
/// does not (D47: iss and aud never come from a request's Host).
#[test]
fn nodes_with_one_signing_key_accept_each_others_tokens() {
    let keys = tempfile::tempdir().unwrap();
    let shared = signing_key(keys.path(), "shared.pem");
    let (a, b) = (start(&shared), start(&shared));
    let c = start(&signing_key(keys.path(), "own.pem"));
    let from_a = token(&a, CLIENT, None);
    assert_eq!(post_bearer(&b, GL, &from_a).status, 202);
    assert_eq!(post_bearer(&c, GL, &from_a).status, 401);
}

/// D47: with `[auth] accept` naming `client_secret`, the spec's Client_Id and Client_Secret
/// headers on a request authenticate it, and so does HTTP Basic with the two; a wrong secret
/// is 401 even beside a good key; without `client_secret` in the list the headers are the
/// spec's informational ones and authenticate nothing (http_edge keeps them harmless).
#[test]
fn the_specs_client_id_and_secret_authenticate_when_accepted() {
    let keys = tempfile::tempdir().unwrap();
    let key = signing_key(keys.path(), "k.pem");
    let dir = tempfile::tempdir().unwrap();
    let tables = format!(
        "{}[auth]\naccept = [\"api_key\", \"client_secret\"]\n",
        oauth2_tables(&key)
    );
    let text = config_for(&dir.path().join("data"), "", NOWHERE, &tables);
    let app = TestApp::start_config(dir, Config::parse(&text, Path::new("t.toml")).unwrap());
    let body = envelope(&[gl("CS1")]).to_string();
    let json = ("Content-Type", "application/json");
    let send = |h: &[(&str, &str)]| {
        let mut all = vec![json];
        all.extend_from_slice(h);
        app.post_with(GL, &body, &all)
    };
    let r = send(&[("Client_Id", CLIENT), ("Client_Secret", SECRET)]);
    assert_eq!(r.status, 202, "{}", r.text);
    let r = send(&[("Authorization", &basic(CLIENT, SECRET))]);
    assert_eq!(r.status, 202, "{}", r.text);
    // The client's interfaces bound it: GL only.
    let vendors = app.post_with(
        "/vendor-data/v1",
        &envelope(&[fixture("vendor-data", "minimal")]).to_string(),
        &[json, ("Client_Id", CLIENT), ("Client_Secret", SECRET)],
    );
    assert_eq!(vendors.status, 403, "{}", vendors.text);
    for wrong in [
        vec![("Client_Id", CLIENT), ("Client_Secret", "wrong")],
        vec![("Authorization", basic(CLIENT, "wrong").leak() as &str)],
        vec![("Client_Id", "nobody"), ("Client_Secret", SECRET)],
        vec![
            ("x-api-key", KEY),
            ("Client_Id", CLIENT),
            ("Client_Secret", "wrong"),
        ],
    ] {
        let r = send(&wrong);
        assert_eq!(r.status, 401, "{wrong:?}: {}", r.text);
    }
    // Bearer tokens are not in this list: a good token is refused.
    let issued = token(&app, CLIENT, None);
    assert_eq!(post_bearer(&app, GL, &issued).status, 401);
    assert_eq!(app.item(&gl_key("CS1")).map(|i| i.version), Some(2));
}

/// A config where nobody could send is refused, naming `[auth]`: `[oauth2]` with neither
/// keys, clients nor a provider, or `accept` leaving out the only kind configured. OAuth 2.0
/// alone, with no API key at all, is a working config (issue 47: sites that forbid static keys).
#[test]
fn a_config_where_no_accepted_credential_exists_is_refused() {
    let keys = tempfile::tempdir().unwrap();
    let key = signing_key(keys.path(), "k.pem");
    let base = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n\
         [platform]\nurl = \"{NOWHERE}\"\n[oauth2]\nsigning_key_file = '{}'\n",
        keys.path().join("data").display(),
        key.display()
    );
    let client = format!(
        "[[oauth2.clients]]\nclient_id = \"{CLIENT}\"\nsecret_sha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        sha(SECRET)
    );
    let api_key = format!(
        "[[api_keys]]\nname = \"k\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        sha(KEY)
    );
    let parse = |text: &str| Config::parse(text, Path::new("t.toml")).map(|_| ());
    let refused = parse(&base).unwrap_err().to_string();
    assert!(
        refused.contains("auth") && refused.contains("--client"),
        "{refused}"
    );
    let only_keys = format!("[auth]\naccept = [\"bearer\"]\n{base}{api_key}");
    let refused = parse(&only_keys).unwrap_err().to_string();
    assert!(refused.contains("[auth] accept"), "{refused}");
    assert!(parse(&format!("{base}{client}")).is_ok(), "tokens alone");
}

/// D47: a credential that fails is never ignored because another passes. A credential
/// header given twice, an `Authorization` of a scheme not accepted (or an empty bearer), and
/// with `client_secret` accepted, wrong client headers beside a good token: each is 401 even
/// with a good API key or token beside it, and nothing is queued.
#[test]
fn a_doubled_or_failing_credential_beside_a_good_one_is_401() {
    let keys = tempfile::tempdir().unwrap();
    let key = signing_key(keys.path(), "k.pem");
    let dir = tempfile::tempdir().unwrap();
    let tables = format!(
        "{}[auth]\naccept = [\"api_key\", \"bearer\", \"client_secret\"]\n",
        oauth2_tables(&key)
    );
    let text = config_for(&dir.path().join("data"), "", NOWHERE, &tables);
    let app = TestApp::start_config(dir, Config::parse(&text, Path::new("t.toml")).unwrap());
    let good = token(&app, CLIENT, None);
    let body = envelope(&[gl("DBL")]).to_string();
    let send = |headers: &[String]| {
        let mut raw = format!(
            "POST {GL} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for h in headers {
            raw.push_str(h);
            raw.push_str("\r\n");
        }
        raw.push_str("\r\n");
        raw.push_str(&body);
        app.raw(raw.as_bytes())
    };
    let bearer = format!("Authorization: Bearer {good}");
    let api_key = format!("x-api-key: {KEY}");
    assert_eq!(
        send(std::slice::from_ref(&bearer)).status,
        202,
        "the good token alone"
    );
    let cases: [Vec<String>; 7] = [
        vec![api_key.clone(), "x-api-key: wrong".into()],
        vec![bearer.clone(), "Authorization: Bearer forged".into()],
        vec![api_key.clone(), "Authorization: Bearer ".into()],
        vec![api_key.clone(), "Authorization: Negotiate YII=".into()],
        vec![
            api_key.clone(),
            format!("Authorization: {}", basic(CLIENT, "wrong")),
        ],
        vec![
            bearer.clone(),
            format!("Client_Id: {CLIENT}"),
            "Client_Secret: wrong".into(),
        ],
        vec![
            api_key.clone(),
            format!("Client_Id: {CLIENT}"),
            format!("Client_Secret: {SECRET}"),
            "Client_Secret: wrong".into(),
        ],
    ];
    for headers in cases {
        let r = send(&headers);
        assert_eq!(r.status, 401, "{headers:?}: {}", r.text);
    }
    assert_eq!(
        app.item(&gl_key("DBL")).map(|i| i.version),
        Some(1),
        "only the good request queued"
    );
    // Without client_secret in [auth] accept, HTTP Basic is a kind not accepted: 401 too.
    let plain = start(&key);
    let r = plain.post_with(
        GL,
        &body,
        &[
            ("x-api-key", KEY),
            ("Authorization", &basic(CLIENT, SECRET)),
            ("Content-Type", "application/json"),
        ],
    );
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(
        r.text.contains("HTTP Basic credentials are not accepted"),
        "{}",
        r.text
    );
}

/// D47: a provider's keys fetched over plain HTTP could be changed in transit: `jwks_url` is
/// https, or http to this machine only.
#[test]
fn a_jwks_url_over_plain_http_to_another_host_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = |url: &str| {
        let tables = format!(
            "[oauth2.external]\nissuer = \"corp\"\naudience = \"ap-intake\"\njwks_url = \"{url}\"\n"
        );
        Config::parse(
            &config_for(&dir.path().join("data"), "", NOWHERE, &tables),
            Path::new("t.toml"),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    for bad in [
        "http://idp.example.com/jwks",
        "http://127.0.0.1.example.com/jwks",
        "http://127.0.0.1@idp.example.com/jwks",
        "ftp://idp.example.com/jwks",
    ] {
        let e = config(bad).unwrap_err();
        assert!(e.contains("external.jwks_url"), "{bad}: {e}");
    }
    for good in [
        "https://idp.example.com/jwks",
        "http://127.0.0.1:8080/jwks",
        "http://[::1]:8080/jwks",
        "http://localhost/jwks",
    ] {
        assert!(config(good).is_ok(), "{good}: {:?}", config(good));
    }
}
