//! D47 with D34: SIGHUP applies OAuth 2.0 changes to the real binary. A new signing key signs
//! from the reload on, and tokens of the key it replaced stay accepted (and the key stays in
//! the JWKS) until they expire; a client added can get tokens, a client removed has none that
//! work; an identity provider added is accepted, and its key file damaged later leaves the
//! last good set in use.

use super::*;
use crate::common::process::Service;
use crate::reload::{hangup, wait_log};
use ap_intake::oauth2::SigningKey;

/// The config file's text: `key` signs, `clients` (all with [`SECRET`], GL codes), and an
/// identity provider whose key set is `jwks` (a file) when given.
fn text(data: &Path, key: &Path, clients: &[&str], jwks: Option<&Path>) -> String {
    let mut t = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n\
         [platform]\nurl = \"{NOWHERE}\"\n[admin]\nlisten = \"\"\n\
         [oauth2]\nsigning_key_file = '{}'\n",
        data.display(),
        key.display()
    );
    for c in clients {
        t.push_str(&format!(
            "[[oauth2.clients]]\nclient_id = \"{c}\"\nsecret_sha256 = \"{}\"\n\
             interfaces = [\"general-ledger-codes-v1\"]\n",
            sha(SECRET)
        ));
    }
    if let Some(file) = jwks {
        t.push_str(&format!(
            "[oauth2.external]\nissuer = \"corp-idp\"\naudience = \"ap-intake-prod\"\n\
             jwks_file = '{}'\n",
            file.display()
        ));
    }
    t
}

fn url(service: &Service, path: &str) -> String {
    format!("http://{}{path}", service.addr)
}

/// A token for `client` from the service's own endpoint.
fn fetch(service: &Service, client: &str) -> Reply {
    let mut r = agent()
        .post(&url(service, "/oauth2/token"))
        .header("Authorization", &basic(client, SECRET))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send("grant_type=client_credentials")
        .unwrap();
    reply_of(&mut r)
}

fn token_of(service: &Service, client: &str) -> String {
    let r = fetch(service, client);
    assert_eq!(r.status, 200, "{client}: {}", r.text);
    r.json()["access_token"].as_str().unwrap().to_string()
}

/// The status of a GL post with `token`.
fn send(service: &Service, token: &str) -> u16 {
    let mut r = agent()
        .post(&url(service, GL))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(envelope(&[gl("R1")]).to_string())
        .unwrap();
    reply_of(&mut r).status
}

fn kid(token: &str) -> String {
    let header: Value =
        serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    header["kid"].as_str().unwrap().to_string()
}

#[test]
fn sighup_applies_the_signing_key_clients_and_provider_keeping_the_old_key_until_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (k1, k2) = (
        signing_key(dir.path(), "k1.pem"),
        signing_key(dir.path(), "k2.pem"),
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, text(&data, &k1, &["erp-a", "erp-b"], None)).unwrap();
    let service = Service::start(&file, dir.path());
    let old = token_of(&service, "erp-a");
    let old_b = token_of(&service, "erp-b");
    assert_eq!(send(&service, &old), 202);
    assert_eq!(fetch(&service, "erp-c").status, 401, "not configured yet");

    // The identity provider's key and a token it signed.
    let idp_pem = ap_intake::oauth2::keys::generate_pem().unwrap();
    let idp_key = SigningKey::from_pem(idp_pem.as_bytes()).unwrap();
    let jwks = dir.path().join("idp-jwks.json");
    std::fs::write(&jwks, json!({"keys": [idp_key.jwk]}).to_string()).unwrap();
    let mut forged = Forged::valid(&idp_key.kid);
    forged.header["typ"] = json!("JWT");
    forged.claims["iss"] = json!("corp-idp");
    forged.claims["aud"] = json!("ap-intake-prod");
    forged.claims["scope"] = json!("ap-intake.write");
    let from_idp = forged.signed(&idp_pem);
    assert_eq!(send(&service, &from_idp), 401, "no provider configured yet");

    // New key, erp-b gone, erp-c added, the provider added.
    std::fs::write(&file, text(&data, &k2, &["erp-a", "erp-c"], Some(&jwks))).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 1);
    assert!(
        service.stderr().contains("oauth2 signing key"),
        "{}",
        service.stderr()
    );
    let new = token_of(&service, "erp-a");
    assert_ne!(kid(&new), kid(&old), "the new key signs");
    assert_eq!(send(&service, &new), 202);
    assert_eq!(
        send(&service, &old),
        202,
        "the old key's token is still live"
    );
    let published = reply_of(&mut agent().get(&url(&service, "/oauth2/jwks")).call().unwrap());
    let kids: Vec<&str> = published.json()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string().leak() as &str)
        .collect();
    assert!(
        kids.contains(&kid(&old).as_str()) && kids.contains(&kid(&new).as_str()),
        "{kids:?}"
    );
    assert_eq!(send(&service, &token_of(&service, "erp-c")), 202);
    assert_eq!(
        send(&service, &old_b),
        401,
        "a removed client's token is refused"
    );
    assert_eq!(fetch(&service, "erp-b").status, 401);
    assert_eq!(
        send(&service, &from_idp),
        202,
        "the provider added is accepted"
    );

    // The provider's key file damaged: the reload applies, and the last good set stays.
    std::fs::write(&jwks, "{\"keys\": [").unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 2);
    assert!(
        service.stderr().contains("the last good set stays"),
        "{}",
        service.stderr()
    );
    assert_eq!(send(&service, &from_idp), 202, "the last good set is used");

    // A key file that cannot be used is refused and the running keys stay.
    std::fs::write(dir.path().join("k3.pem"), "not a key").unwrap();
    let broken = text(&data, &dir.path().join("k3.pem"), &["erp-a"], None);
    std::fs::write(&file, broken).unwrap();
    hangup(&service);
    wait_log(&service, "reload refused", 1);
    assert_eq!(kid(&token_of(&service, "erp-a")), kid(&new));
    assert_eq!(send(&service, &from_idp), 202, "the provider stays too");
}
