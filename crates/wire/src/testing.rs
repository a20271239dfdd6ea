//! Support for the decoders' property tests in every crate (issue 17): the same mutations of a
//! valid encoding everywhere, so that each decoder is tried on near-valid input alike.

/// `bytes` with one byte changed (`how % 3 == 0`), inserted (1) or removed (2) at `at` (taken
/// modulo the length): the near-valid inputs that random bytes seldom are.
pub fn mutated(bytes: &[u8], at: usize, byte: u8, how: u8) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let at = at % (out.len() + 1);
    match how % 3 {
        0 if at < out.len() => out[at] ^= byte | 1,
        1 => out.insert(at, byte),
        _ if at < out.len() => {
            out.remove(at);
        }
        _ => out.push(byte),
    }
    out
}
