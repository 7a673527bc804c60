//! A TCP echo server: sends back every byte, and closes its side after the client closes its
//! side (so a half-close is visible end to end through a tunnel).

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The echo server. Stops when dropped.
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EchoServer {
    /// Listens on `ip` at `port` (0 for a free one); reports a port that is taken.
    pub async fn try_start(ip: IpAddr, port: u16) -> std::io::Result<EchoServer> {
        let listener = TcpListener::bind((ip, port)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(EchoServer { addr, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}
