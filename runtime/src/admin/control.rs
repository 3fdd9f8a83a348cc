//! Operator actions (`POST /v1/<name>`) delivered to the binary.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// What a control returns: `Ok(json)` becomes `200` with that body,
/// `Err(reason)` becomes `409 {"error": reason}` (the action does not apply in
/// the current state, e.g. `resume` while not paused).
pub type ControlResult = Result<Value, String>;

/// One control request, received from the channel returned by
/// [`Admin::control`](super::Admin::control).
///
/// Reply once the request is *accepted*, not when the work it starts is done
/// (a drain can take minutes); progress belongs in `/statusz`. Dropping the
/// request without replying answers `500`.
#[derive(Debug)]
pub struct ControlRequest {
    name: String,
    args: Value,
    reply: oneshot::Sender<ControlResult>,
}

impl ControlRequest {
    /// The control's name (the `<name>` in `/v1/<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The JSON request body (the server refuses requests without one).
    pub fn args(&self) -> &Value {
        &self.args
    }

    /// Sends the result back to the HTTP caller (a caller that has already
    /// gone away is not an error).
    pub fn reply(self, result: ControlResult) {
        let _ = self.reply.send(result);
    }

    /// Shorthand for `reply(Ok(body))`.
    pub fn accept(self, body: Value) {
        self.reply(Ok(body));
    }

    /// Shorthand for `reply(Err(reason))`.
    pub fn refuse(self, reason: impl Into<String>) {
        self.reply(Err(reason.into()));
    }
}

type Callback = dyn Fn(Value) -> ControlResult + Send + Sync;

/// Where a control's requests go.
#[derive(Clone)]
pub(crate) enum ControlTarget {
    /// Into the binary's event loop, which replies through the request.
    Channel(mpsc::Sender<ControlRequest>),
    /// Handled inline on the admin server (must be quick and non-blocking).
    Callback(Arc<Callback>),
}

impl fmt::Debug for ControlTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlTarget::Channel(_) => f.write_str("Channel"),
            ControlTarget::Callback(_) => f.write_str("Callback"),
        }
    }
}

/// Why a control request got no result from the binary.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DispatchError {
    /// The binary's queue is full: it is not keeping up, try again.
    Busy,
    /// The receiver was dropped: the binary no longer takes this control.
    Closed,
    /// The binary dropped the request without replying.
    NoReply,
}

impl ControlTarget {
    pub(crate) fn new_request(
        name: &str,
        args: Value,
    ) -> (ControlRequest, oneshot::Receiver<ControlResult>) {
        let (reply, rx) = oneshot::channel();
        let req = ControlRequest {
            name: name.to_owned(),
            args,
            reply,
        };
        (req, rx)
    }

    /// Delivers the request; the caller bounds the wait with its own timeout.
    pub(crate) async fn dispatch(
        &self,
        name: &str,
        args: Value,
    ) -> Result<ControlResult, DispatchError> {
        match self {
            ControlTarget::Callback(f) => Ok(f(args)),
            ControlTarget::Channel(tx) => {
                let (req, rx) = Self::new_request(name, args);
                tx.try_send(req).map_err(|e| match e {
                    mpsc::error::TrySendError::Full(_) => DispatchError::Busy,
                    mpsc::error::TrySendError::Closed(_) => DispatchError::Closed,
                })?;
                rx.await.map_err(|_| DispatchError::NoReply)
            }
        }
    }
}

/// Control names are URL path segments chosen by the binary's authors.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("drain"));
        assert!(valid_name("force-resync_2"));
        assert!(!valid_name(""));
        assert!(!valid_name("Drain"));
        assert!(!valid_name("a/b"));
    }

    #[tokio::test]
    async fn channel_dispatch_round_trip() {
        let (tx, mut rx) = mpsc::channel(1);
        let target = ControlTarget::Channel(tx);
        let binary = tokio::spawn(async move {
            let req = rx.recv().await.unwrap();
            assert_eq!(req.name(), "pause");
            let echo = req.args().clone();
            req.accept(serde_json::json!({ "paused": true, "args": echo }));
        });
        let out = target.dispatch("pause", serde_json::json!(1)).await;
        assert_eq!(
            out,
            Ok(Ok(serde_json::json!({ "paused": true, "args": 1 })))
        );
        binary.await.unwrap();
    }

    #[tokio::test]
    async fn channel_dispatch_errors() {
        let (tx, rx) = mpsc::channel::<ControlRequest>(1);
        drop(rx);
        let out = ControlTarget::Channel(tx).dispatch("x", Value::Null).await;
        assert_eq!(out, Err(DispatchError::Closed));

        let (tx, mut rx) = mpsc::channel::<ControlRequest>(1);
        let (filler, _keep) = ControlTarget::new_request("x", Value::Null);
        tx.try_send(filler).unwrap();
        let out = ControlTarget::Channel(tx.clone())
            .dispatch("x", Value::Null)
            .await;
        assert_eq!(out, Err(DispatchError::Busy));

        drop(rx.recv().await); // make room: take the filler
        let dropper = tokio::spawn(async move {
            drop(rx.recv().await); // the real one, dropped without reply
        });
        let out = ControlTarget::Channel(tx).dispatch("x", Value::Null).await;
        assert_eq!(out, Err(DispatchError::NoReply));
        dropper.await.unwrap();
    }
}
