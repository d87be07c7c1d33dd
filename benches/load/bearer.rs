//! What a bearer token costs against an API key (D47: at most 10 % more): the same load with
//! `x-api-key` and with `Authorization: Bearer`, alternated on one service in one run. The
//! token comes from the service's own `/oauth2/token`; a verified token is remembered by its
//! hash until it expires, so each request after a client's first costs a SHA-256 and a lookup.

use crate::intake::{self, Load};
use crate::service::{self, KEY};
use std::path::Path;

const CLIENT: &str = "bench-client";
const SECRET: &str = "bench-client-secret";

/// `pairs` runs with the key and with a token, each `load`; prints each and the ratio of the
/// sums (token / key).
pub fn run(runtime: &tokio::runtime::Runtime, dir: &Path, load: &Load, pairs: usize) {
    let config = service::write_config_on(dir, &dir.join("bearer"), None, None, "bearer.toml");
    let key_file = dir.join("signing.pem");
    std::fs::write(
        &key_file,
        ap_intake::oauth2::keys::generate_pem().expect("a signing key"),
    )
    .expect("write the signing key");
    let text = std::fs::read_to_string(&config).expect("read config");
    let tables = format!(
        "[oauth2]\nsigning_key_file = '{}'\n[[oauth2.clients]]\nclient_id = \"{CLIENT}\"\n\
         secret_sha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        key_file.display(),
        ap_intake::keys::sha256_hex(SECRET)
    );
    std::fs::write(&config, text + &tables).expect("write config");
    let svc = service::Service::start(&config);
    let token = token(svc.addr);
    println!(
        "bearer: {} records/request, {} clients, {} s a run, {pairs} pairs, {}",
        load.per_request,
        load.concurrency,
        load.duration.as_secs(),
        load.iface.path
    );
    let (mut keyed, mut bearer) = (0.0, 0.0);
    // The queue grows as the runs go: each pair runs the other way round from the one before.
    for pair in 0..pairs {
        for with_token in [pair % 2 == 1, pair % 2 == 0] {
            let credential = match with_token {
                true => ("authorization", format!("Bearer {token}")),
                false => ("x-api-key", KEY.to_string()),
            };
            let mut run =
                runtime.block_on(intake::against_service_as(&[svc.addr], load, credential));
            run.print(&format!(
                "pair {pair}, {}",
                if with_token {
                    "bearer token"
                } else {
                    "API key"
                }
            ));
            assert_eq!(run.errors(), 0, "requests failed");
            match with_token {
                true => bearer += run.records_per_sec(),
                false => keyed += run.records_per_sec(),
            }
        }
    }
    println!(
        "bearer: {:.0} records/s with the key, {:.0} with a token: ratio token / key {:.3}",
        keyed / pairs as f64,
        bearer / pairs as f64,
        bearer / keyed
    );
}

/// A token of the bench client, by client_secret_post.
fn token(addr: std::net::SocketAddr) -> String {
    let mut reply = ureq::post(&format!("http://{addr}/oauth2/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .send(format!(
            "grant_type=client_credentials&client_id={CLIENT}&client_secret={SECRET}"
        ))
        .expect("the token endpoint");
    let text = reply.body_mut().read_to_string().expect("a token response");
    let body: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    body["access_token"]
        .as_str()
        .expect("access_token")
        .to_string()
}
