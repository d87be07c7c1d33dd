//! The credentials a request's head presents, read but not judged (`auth.rs` judges them):
//! the `Authorization` header by scheme, and the spec's `Client_Id` and `Client_Secret`
//! headers (D47).

use base64::Engine;
use http::HeaderMap;

/// What an `Authorization` header carries.
pub(super) enum Authorization<'a> {
    /// `Bearer` and its token (empty when there is none).
    Bearer(&'a str),
    /// `Basic` with a client's id and secret (both empty when it does not decode to them:
    /// that names no client and is refused as a wrong pair is).
    Basic((String, String)),
    /// Another scheme, or a value that is not text.
    Other,
}

/// The `Authorization` header, by scheme (case-insensitive).
pub(super) fn authorization(headers: &HeaderMap) -> Option<Authorization<'_>> {
    let value = headers.get(http::header::AUTHORIZATION)?;
    let Ok(text) = value.to_str() else {
        return Some(Authorization::Other);
    };
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    Some(if scheme.eq_ignore_ascii_case("bearer") {
        Authorization::Bearer(rest.trim())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let pair = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .and_then(|t| {
                let (id, secret) = t.split_once(':')?;
                Some((id.to_string(), secret.to_string()))
            });
        Authorization::Basic(pair.unwrap_or_default())
    } else {
        Authorization::Other
    })
}

/// The spec's `Client_Id` and `Client_Secret` headers (D47), when both are there.
pub(super) fn client_headers(headers: &HeaderMap) -> Option<(String, String)> {
    let get = |name: &str| -> Option<String> {
        Some(headers.get(name)?.to_str().ok()?.trim().to_string())
    };
    Some((get("client_id")?, get("client_secret")?))
}
