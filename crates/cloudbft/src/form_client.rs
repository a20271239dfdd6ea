//! Posting forms to a gateway as a browser does: HTTP/1.1 on one kept-alive connection, so that
//! a benchmark through the gateway (`cloudbft bench --via-gateway`) measures the gateway's work
//! per page rather than a TCP handshake per page.

use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One browser-like connection to a gateway, opened on first use and again after the gateway
/// closed it or it failed.
pub struct FormClient {
    gateway: SocketAddr,
    connection: Option<BufReader<TcpStream>>,
}

impl FormClient {
    pub fn new(gateway: SocketAddr) -> FormClient {
        FormClient {
            gateway,
            connection: None,
        }
    }

    /// Posts `body` (`application/x-www-form-urlencoded`) to `path`; the response's status.
    /// The page is read and dropped: the gateway sends one only when f+1 replicas agreed.
    pub async fn post(&mut self, path: &str, body: &str) -> std::io::Result<u16> {
        let connection = match &mut self.connection {
            Some(c) => c,
            None => self
                .connection
                .insert(BufReader::new(TcpStream::connect(self.gateway).await?)),
        };
        let result = exchange(connection, self.gateway, path, body).await;
        if !matches!(result, Ok((_, true))) {
            self.connection = None;
        }
        result.map(|(status, _)| status)
    }
}

/// One request and its response on `connection`: the status, and whether the connection may
/// carry another.
async fn exchange(
    connection: &mut BufReader<TcpStream>,
    host: SocketAddr,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, bool)> {
    let request = form_post(path, host, body, false);
    connection.get_mut().write_all(request.as_bytes()).await?;
    let mut line = String::new();
    connection.read_line(&mut line).await?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("not an HTTP status line: {line:?}")))?;
    let (mut length, mut keep) = (None, true);
    loop {
        line.clear();
        if connection.read_line(&mut line).await? == 0 {
            return Err(invalid(
                "the gateway closed the connection mid-response".into(),
            ));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<u64>().ok();
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            keep = false;
        }
    }
    let length = length.ok_or_else(|| invalid("a response without Content-Length".into()))?;
    let mut page = (&mut *connection).take(length);
    if tokio::io::copy(&mut page, &mut tokio::io::sink()).await? < length {
        return Err(invalid("the gateway closed the connection mid-page".into()));
    }
    Ok((status, keep))
}

/// A browser's POST of form `body` to `path` on `host`; with `close`, asking the server to
/// close the connection after its answer.
pub fn form_post(path: &str, host: SocketAddr, body: &str, close: bool) -> String {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n{connection}\r\n{body}",
        body.len()
    )
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}
