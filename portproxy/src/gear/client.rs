//! The CLI's side of the operator socket: send one request line, print the output
//! lines, and turn the final `ok` / `error CODE MESSAGE` into an exit code.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Exit code when the daemon cannot be reached (sysexits' EX_UNAVAILABLE).
pub const EX_UNAVAILABLE: u8 = 69;

/// Sends `request` and returns `(output lines, exit code, error message)`.
pub async fn call(socket: &Path, request: &str) -> (Vec<String>, u8, Option<String>) {
    let unavailable = |e: std::io::Error| {
        (
            Vec::new(),
            EX_UNAVAILABLE,
            Some(format!(
                "cannot reach the portproxy daemon at {}: {e}",
                socket.display()
            )),
        )
    };
    let mut s = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) => return unavailable(e),
    };
    if let Err(e) = s.write_all(format!("{request}\n").as_bytes()).await {
        return unavailable(e);
    }
    let mut text = String::new();
    if let Err(e) = s.take(64 * 1024 * 1024).read_to_string(&mut text).await {
        return unavailable(e);
    }
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match lines.pop() {
        Some(last) if last == "ok" => (lines, 0, None),
        Some(last) if last.starts_with("error ") => {
            let rest = &last["error ".len()..];
            let (code, msg) = rest.split_once(' ').unwrap_or((rest, ""));
            (lines, code.parse().unwrap_or(1), Some(msg.to_string()))
        }
        _ => (lines, 1, Some("the daemon's answer was cut short".into())),
    }
}
