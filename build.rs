//! Embeds the web console and the developer portal's pages: every file under `console/`
//! and `portal/` becomes one entry of `$OUT_DIR/console_assets.rs` (its path from the
//! crate's root and `include_bytes!`), so that an asset is added by adding the file, never
//! by keeping a list by hand.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["console", "portal"] {
        // Cargo scans a directory named here for any change below it.
        println!("cargo:rerun-if-changed={dir}");
        collect(&manifest.join(dir), &mut files);
    }
    files.sort();
    let mut out = String::from("&[\n");
    for file in files {
        let rel = file
            .strip_prefix(&manifest)
            .expect("a file of the crate")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        // Relative to the crate being compiled, not this checkout: a build directory
        // shared by several clones may reuse this file after the clone that made it is gone.
        out.push_str(&format!(
            "    ({rel:?}, include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {:?})) as &[u8]),\n",
            format!("/{rel}")
        ));
    }
    out.push_str("]\n");
    let dest = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("console_assets.rs");
    fs::write(dest, out).expect("write console_assets.rs");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        // Editor swap files and the like are not assets.
        if name.is_some_and(|n| n.starts_with('.')) {
            continue;
        }
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
