//! The `tilelang` binary: exit 0 with one result per line on success, 2 with a one-line
//! message on bad input.

use std::process::Command;

fn tilelang(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tilelang"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn layout_commands() {
    let (rc, out, _) = tilelang(&["layout", "coalesce", "(2,(1,6)):(1,(6,2))"]);
    assert_eq!((rc, out.trim()), (0, "12:1"));
    let (rc, out, _) = tilelang(&["layout", "compose", "(12,(4,8)):(59,(13,1))", "<3:4,8:2>"]);
    assert_eq!((rc, out.trim()), (0, "(3,(2,4)):(236,(26,1))"));
    let (rc, out, _) = tilelang(&["layout", "complement", "(2,2):(1,6)", "24"]);
    assert_eq!((rc, out.trim()), (0, "(3,2):(2,12)"));
    let (rc, out, _) = tilelang(&["layout", "swizzle", "3", "4", "3", "0", "128", "1040"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(out.split_whitespace().count(), 3);
}

#[test]
fn layout_errors_exit_2_with_one_line() {
    for args in [
        vec!["layout", "bogus"],
        vec!["layout", "coalesce", "(3,"],
        vec!["layout", "complement", "(2,2):(1,1)", "8"],
        vec!["layout", "compose", "(4,3):(1,4)"],
    ] {
        let (rc, out, err) = tilelang(&args);
        assert_eq!(rc, 2, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn info_and_cache() {
    let (rc, out, _) = tilelang(&["info"]);
    assert_eq!(rc, 0);
    assert!(out.contains("best device"));
    let (rc, out, _) = tilelang(&["cache", "path"]);
    assert_eq!(rc, 0);
    assert!(!out.trim().is_empty());
}

/// Output into a pipe nobody reads (`tilelang … | head` after head exits) ends the program
/// by SIGPIPE, as for other Unix tools, not with a panic about a failed print.
#[cfg(unix)]
#[test]
fn a_closed_output_pipe_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_tilelang"))
        .args(["layout", "coalesce", "(2,(1,6)):(1,(6,2))"])
        .stdout(writer)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "killed by SIGPIPE: {:?}",
        out.status
    );
}
