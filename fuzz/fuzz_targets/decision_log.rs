//! The decision-log reader (`group::log::read_records`, what a replica replays on start): the
//! records it returns, framed again, are exactly the bytes it kept; what it cuts is a torn
//! tail; damage it reports lies inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| match group::log::read_records(data) {
    Ok((records, kept)) => {
        let kept = usize::try_from(kept).expect("kept bytes fit in memory");
        assert!(kept <= data.len());
        let framed: Vec<u8> = records
            .iter()
            .flat_map(|r| group::log::frame_record(r))
            .collect();
        assert_eq!(
            framed,
            data[..kept],
            "the kept records are not the kept bytes"
        );
        assert!(records.iter().all(|r| !r.is_empty()));
        // Reading what was kept gives the same records, all of it kept.
        assert_eq!(
            group::log::read_records(&data[..kept]),
            Ok((records, kept as u64))
        );
    }
    Err(offset) => assert!((offset as usize) < data.len()),
});
