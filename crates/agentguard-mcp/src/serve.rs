//! Serving on a byte stream pair (stdio in the CLI): the wire gate (`gate.rs`) reads every
//! line first and hands rmcp what it should read, through an in-memory pipe; the end of the
//! input stops the server like a signal does, so that every run ends with it (rmcp alone
//! would wait for in-flight calls to finish on their own).

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::gate;
use crate::server::McpServer;

/// How long in-flight calls get to send their answers after the stop, before the service is
/// closed (their runs are killed at once; this is only for the last lines).
const ANSWER_GRACE: Duration = Duration::from_secs(30);

/// Serves `server` on `reader`/`writer` until the input ends or the server's stop token is
/// cancelled; then every run is stopped (its container killed) and, once the calls have
/// answered, the service ends.
pub async fn serve<R, W>(server: McpServer, reader: R, writer: W) -> Result<(), Error>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let stop = server.stop_token();
    // rmcp reads and writes one end of a pipe; the gate and the writer hold the other.
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (from_rmcp, to_rmcp) = tokio::io::split(ours);
    let (answers, answered) = mpsc::unbounded_channel();
    let input = tokio::spawn(gate::read_input(
        server.clone(),
        reader,
        to_rmcp,
        answers,
        stop.clone(),
    ));
    let output = tokio::spawn(gate::write_output(from_rmcp, writer, answered));
    let served = serve_rmcp(server, theirs, stop).await;
    // rmcp's end of the pipe is gone: every answer, rmcp's and the gate's, is written.
    input.abort();
    let _ = output.await;
    served
}

/// rmcp on its end of the pipe, until it ends.
async fn serve_rmcp(
    server: McpServer,
    theirs: tokio::io::DuplexStream,
    stop: CancellationToken,
) -> Result<(), Error> {
    let (reader, writer) = tokio::io::split(theirs);
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
