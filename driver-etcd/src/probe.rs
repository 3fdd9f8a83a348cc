//! The version probe: etcd's Maintenance Status RPC, as core's [`StatusReply`].
//!
//! Run once at connect (so an unreachable endpoint, bad TLS or a wrong password fails the
//! first command with a classified error) and again for every `Command::Status`.

use crate::error::failure_from;
use etcd_client::Client;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::StatusReply;

/// One Status RPC on the endpoint the client is connected to.
pub async fn status(client: &mut Client) -> Result<StatusReply, Failure> {
    let resp = client
        .maintenance_client()
        .status()
        .await
        .map_err(|e| failure_from(&e))?;
    let (rev, cluster_id, member_id) = resp
        .header()
        .map(|h| (h.revision(), h.cluster_id(), h.member_id()))
        .unwrap_or_default();
    Ok(StatusReply {
        version: resp.version().to_string(),
        header_revision: rev,
        cluster_id,
        member_id,
        is_learner: resp.is_learner(),
        db_size: resp.db_size(),
    })
}

/// Parses "3.5.13" (ignoring any "-suffix") into (major, minor, patch).
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let core = v.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("3.5.16"), Some((3, 5, 16)));
        assert_eq!(parse_version("v3.4.23-rc.1"), Some((3, 4, 23)));
        assert_eq!(parse_version("3.6"), Some((3, 6, 0)));
        assert_eq!(parse_version("garbage"), None);
    }
}
