//! usigd's configuration file (`UsigdConfig::parse`, which `UsigdConfig::load` reads through):
//! an accepted configuration written back as TOML parses to the same configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use usig::daemon::UsigdConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = UsigdConfig::parse(text, Path::new("fuzz.toml")) else {
        return;
    };
    let written = toml::to_string(&config).expect("an accepted configuration is TOML");
    let again = UsigdConfig::parse(&written, Path::new("written.toml"))
        .unwrap_or_else(|e| panic!("a written configuration is refused: {e}\n{written}"));
    assert_eq!(again, config);
});
