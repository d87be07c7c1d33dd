//! The document's security schemes (D20, D47): the credentials `[auth] accept` lets a
//! request carry, each a scheme, any one of them enough. The token endpoint's scheme is
//! the client-credentials flow, so a generated client or the console can fetch a token.

use serde_json::{Map, Value, json};

/// What authenticates a request to this service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Security {
    /// No credential is needed (D21).
    pub sandbox: bool,
    /// `x-api-key`.
    pub api_key: bool,
    /// `Authorization: Bearer`...
    pub bearer: bool,
    /// ...with tokens this service issues at `/oauth2/token`.
    pub token_endpoint: bool,
    /// The spec's `Client_Id` and `Client_Secret` headers on each request.
    pub client_secret: bool,
}

/// `components.securitySchemes` and the document's `security`.
pub fn schemes(s: Security) -> (Value, Value) {
    if s.sandbox {
        // The empty requirement: no credentials needed (OpenAPI 3.1, section 4.8.30).
        return (json!({}), json!([{}]));
    }
    let mut schemes = Map::new();
    let mut any_of = Vec::new();
    if s.api_key {
        schemes.insert(
            "ApiKey".into(),
            json!({
                "type": "apiKey", "in": "header", "name": "x-api-key",
                "description": "An API key of [[api_keys]] that may use the interface (D20)."
            }),
        );
        any_of.push(json!({"ApiKey": []}));
    }
    if s.bearer && s.token_endpoint {
        let mut scopes = Map::new();
        for i in &crate::interfaces::INTERFACES {
            scopes.insert(i.id.into(), json!(format!("POST {}", i.path)));
        }
        scopes.insert(
            crate::oauth2::ALL_SCOPE.into(),
            json!("Every interface the client may use"),
        );
        schemes.insert(
            "OAuth2".into(),
            json!({
                "type": "oauth2",
                "description": "A token of this service's token endpoint, the client-credentials \
                    grant (D47); `scope` names interfaces, or ap-intake.write for all the client \
                    may use.",
                // From the root: Swagger UI resolves a relative tokenUrl against its page (/docs/).
                "flows": {"clientCredentials": {"tokenUrl": "/oauth2/token", "scopes": scopes}}
            }),
        );
        any_of.push(json!({"OAuth2": []}));
    }
    if s.bearer {
        schemes.insert(
            "Bearer".into(),
            json!({
                "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token of this service or of the identity provider \
                    named in [oauth2.external] (D47)."
            }),
        );
        any_of.push(json!({"Bearer": []}));
    }
    if s.client_secret {
        for (name, header) in [("ClientId", "Client_Id"), ("ClientSecret", "Client_Secret")] {
            schemes.insert(
                name.into(),
                json!({
                    "type": "apiKey", "in": "header", "name": header,
                    "description": "The spec's client headers, accepted as credentials by \
                        [auth] accept = [\"client_secret\"] (D47)."
                }),
            );
        }
        any_of.push(json!({"ClientId": [], "ClientSecret": []}));
    }
    (Value::Object(schemes), Value::Array(any_of))
}
