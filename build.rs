//! Records the git revision the binary is built from, so a run directory names the code that
//! produced it even when the binary runs from another checkout (or the checkout moved on since).

use std::path::Path;
use std::process::Command;

fn main() {
    let git = Path::new(".git");
    if git.exists() {
        // A new commit moves a branch ref (loose or packed) or HEAD itself.
        for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
            if Path::new(path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    let revision = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string());
    if let Some(revision) = revision.filter(|r| !r.is_empty()) {
        println!("cargo:rustc-env=TABLESEEK_BUILD_REVISION={revision}");
    }
}
