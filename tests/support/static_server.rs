//! A minimal static file server for `web/` with the viewer's SPA fallback, for browser tests that
//! need only the page (no archive store, no sessions).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

pub struct StaticServer {
    pub url: String,
}

/// Serves `root` on 127.0.0.1, a free port, from a background thread for the life of the process.
pub fn serve(root: &Path) -> std::io::Result<StaticServer> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || {
                let _ = handle(stream, &root);
            });
        }
    });
    Ok(StaticServer { url })
}

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("wasm") => "application/wasm",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

fn resolve(root: &Path, path: &str) -> Option<PathBuf> {
    let path = path.split('?').next().unwrap_or("/");
    if path.split('/').any(|seg| seg == "..") {
        return None;
    }
    if path == "/" || path.starts_with("/archives/") || path.starts_with("/sessions/") {
        return Some(root.join("index.html"));
    }
    let p = root.join(path.trim_start_matches('/'));
    p.is_file().then_some(p)
}

fn handle(stream: TcpStream, root: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h == "\r\n" {
                break;
            }
        }
        match resolve(root, &path).and_then(|p| std::fs::read(&p).ok().map(|b| (p, b))) {
            Some((p, body)) => {
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-store\r\n\r\n",
                    content_type(&p),
                    body.len()
                )?;
                stream.write_all(&body)?;
            }
            None => write!(stream, "HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found")?,
        }
    }
}
