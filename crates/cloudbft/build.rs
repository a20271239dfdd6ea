//! Records which source the binary was built from (`CLOUDBFT_BUILD`: the commit, `-dirty` when
//! tracked files differed from it), so that `cloudbft --version` and every bench report name
//! their build. Comparing two reports of one build by mistake, or of a binary left over from
//! another checkout, is otherwise invisible.

use std::path::Path;
use std::process::Command;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../..");
    let git = |args: &[&str]| {
        // `--no-optional-locks`: `git status` would otherwise refresh and rewrite the index,
        // which this script watches, and every source edit would cost a second rebuild.
        let output = Command::new("git")
            .arg("--no-optional-locks")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    // Source edits change the dirty flag, commits and checkouts the commit. A path that does
    // not exist would make cargo run this script on every build, so only existing ones.
    let mut watched = vec![
        root.join("crates"),
        root.join("placement"),
        root.join("Cargo.lock"),
    ];
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        watched.extend(["HEAD", "index", "logs/HEAD"].map(|f| git_dir.join(f)));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let build = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => {
            let changed = git(&["status", "--porcelain", "--untracked-files=no"]);
            match changed {
                Some(changed) if changed.is_empty() => commit,
                _ => format!("{commit}-dirty"),
            }
        }
        None => "unknown (not built from a git checkout)".to_owned(),
    };
    println!("cargo:rustc-env=CLOUDBFT_BUILD={build}");
}
