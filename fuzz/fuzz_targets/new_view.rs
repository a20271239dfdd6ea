//! The NEW-VIEW a VIEW-CHANGE or RECOVERY-STATE carries as bytes (`NewView::decode`), decoded
//! one level at a time down to `MAX_NESTED_VIEWS` as validators do: accepted bytes are canonical
//! at every level.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cloudbft_fuzz::nested_new_view(data, 0);
});
