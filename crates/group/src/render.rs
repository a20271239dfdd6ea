//! Page rendering: the group turns the database's result into the page the client sees.

use proto::RequestBody;

/// Renders the page for a request from its database result. Must be deterministic (same inputs,
/// same bytes on every replica), since the gateway needs f+1 byte-identical pages.
pub trait Renderer: Send + Sync {
    fn render(&self, request: &RequestBody, result: &[u8]) -> Vec<u8>;
}
