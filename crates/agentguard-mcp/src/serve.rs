//! Serving on a byte stream pair (stdio in the CLI): the input is watched for its end, which
//! stops the server like a signal does, so that every run ends with it (rmcp alone would wait
//! for in-flight calls to finish on their own).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::server::McpServer;

/// How long in-flight calls get to send their answers after the stop, before the service is
/// closed (their runs are killed at once; this is only for the last lines).
const ANSWER_GRACE: Duration = Duration::from_secs(30);

/// A reader that cancels `eof` when its input ends.
struct Watched<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            self.eof.cancel();
        }
        polled
    }
}

/// Serves `server` on `reader`/`writer` until the input ends or the server's stop token is
/// cancelled; then every run is stopped (its container killed) and, once the calls have
/// answered, the service ends.
pub async fn serve<R, W>(server: McpServer, reader: R, writer: W) -> Result<(), Error>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let stop = server.stop_token();
    let reader = Watched {
        inner: reader,
        eof: stop.clone(),
    };
    // The service's own token, not a child of the stop: cancelled with the stop, rmcp would
    // give the calls only its 2 s drain to answer, less than deleting a cluster run can take.
    let service = CancellationToken::new();
    let starting = server
        .clone()
        .serve_with_ct((reader, writer), service.clone());
    let started = tokio::select! {
        started = starting => started,
        // Stopped before the first exchange: a clean end.
        () = stop.cancelled() => return Ok(()),
    };
    let running = match started {
        Ok(running) => running,
        // The client went away before the first exchange: a clean end.
        Err(ServerInitializeError::ConnectionClosed(_) | ServerInitializeError::Cancelled) => {
            return Ok(());
        }
        Err(e) => return Err(Error::Serve(e.to_string())),
    };
    let closer = running.cancellation_token();
    let watcher = tokio::spawn(async move {
        stop.cancelled().await;
        // Every call concludes (its run killed, its event recorded) and hands its answer to
        // rmcp, which writes the answers it holds before it closes the transport.
        let calls = server.calls();
        calls.close();
        let _ = tokio::time::timeout(ANSWER_GRACE, calls.wait()).await;
        closer.cancel();
    });
    let quit = running.waiting().await;
    watcher.abort();
    quit.map(|_| ()).map_err(|e| Error::Serve(e.to_string()))
}
