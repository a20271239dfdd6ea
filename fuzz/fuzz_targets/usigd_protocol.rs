//! The usigd socket protocol: requests as usigd decodes them, responses as a VM's client
//! decodes them, and what a response carries (a warrant, an enrollment record in TOML). What
//! either side accepts is canonical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usig::daemon::protocol::{Request, Response};
use usig::{EnrollmentRecord, UniqueWarrant};

fuzz_target!(|data: &[u8]| {
    let _ = cloudbft_fuzz::canonical::<Request>(data);
    match cloudbft_fuzz::canonical::<Response>(data) {
        Some(Response::Warrant { warrant })
        | Some(Response::Last {
            last: Some((_, warrant)),
        }) => {
            if let Ok(w) = UniqueWarrant::from_bytes(&warrant) {
                assert_eq!(w.to_bytes(), warrant);
            }
        }
        Some(Response::Enrollment { toml }) => {
            if let Ok(record) = toml::from_str::<EnrollmentRecord>(&toml) {
                if let Ok((identity, enrollment)) = record.parse() {
                    let again = EnrollmentRecord::new(identity, &enrollment);
                    assert_eq!(
                        again.parse().expect("a written record parses"),
                        (identity, enrollment)
                    );
                }
            }
        }
        _ => {}
    }
});
