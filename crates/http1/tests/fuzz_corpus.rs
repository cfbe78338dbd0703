//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the fuzz targets'
//! invariants on stable Rust, so CI checks every input the fuzzers ever kept.

#[path = "../fuzz/src/checks.rs"]
mod checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(
            r.is_ok(),
            "{target}: {} breaks the invariant",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "no corpus for {target}");
}

#[test]
fn request_head_corpus() {
    replay("request_head", checks::request_head);
}

#[test]
fn response_head_corpus() {
    replay("response_head", checks::response_head);
}

#[test]
fn body_corpus() {
    replay("body", checks::body);
}

#[test]
fn request_stream_corpus() {
    replay("request_stream", checks::request_stream);
}
