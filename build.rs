//! Records the git revision the binary is built from, so a run directory names the code that
//! produced it even when the binary runs from another checkout (or the checkout moved on since).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|text| !text.is_empty())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Ask git where HEAD and the refs live: in a linked worktree `.git` is a file, HEAD is in
    // the worktree's own git dir and the branch refs in the common one. Watching `.git/HEAD`
    // alone recorded nothing there, and the revision went stale for every later commit.
    let dirs = [
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ];
    for dir in dirs.into_iter().flatten() {
        let dir = PathBuf::from(dir);
        for name in ["HEAD", "refs/heads", "packed-refs"] {
            let path = dir.join(name);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    if let Some(revision) = git(&["rev-parse", "HEAD"]) {
        println!("cargo:rustc-env=TABLESEEK_BUILD_REVISION={revision}");
    }
}
