//! OAuth 2.0 (D47): the service as the authorization server of the client-credentials grant
//! (the key it signs with, the tokens it issues) and as the resource server that checks bearer
//! tokens before a request's body is read. The HTTP side (`/oauth2/token`, the JWKS, the
//! metadata) is `http/oauth2.rs`; deciding who a request's credentials name is `http/auth.rs`.

pub mod keys;
pub mod provider;
pub mod setup;
pub mod tokens;

pub use keys::{KeyError, KeyRing, SigningKey};
pub use provider::{KeySet, ProviderKeys};
pub use tokens::{ALL_SCOPE, Grant, Issued, Issuer, Provider, TokenError, Verifier};
