//! Writes the seed corpora: `cargo run --example seeds` in fuzz/ (no instrumentation needed)
//! replaces `corpus/<target>/seed-*` with `cloudbft_fuzz::seeds::corpus()`, keeping inputs the
//! fuzzer found (regressions and campaign finds have other names).
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, inputs) in cloudbft_fuzz::seeds::corpus() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                std::fs::remove_file(path)?;
            }
        }
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), input)?;
        }
        println!("{target}: {} seeds", inputs.len());
    }
    Ok(())
}
