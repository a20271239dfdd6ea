//! The cluster configuration (`Cluster::parse`, which `Cluster::load` reads through, with the
//! USIG enrollment records in it): an accepted configuration written back as TOML parses to the
//! same configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::config::Cluster;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cluster) = Cluster::parse(text, "fuzz.toml") else {
        return;
    };
    let written = toml::to_string(&cluster.config).expect("an accepted configuration is TOML");
    let again = Cluster::parse(&written, "written.toml")
        .unwrap_or_else(|e| panic!("a written configuration is refused: {e}\n{written}"));
    assert_eq!(again.config, cluster.config);
});
