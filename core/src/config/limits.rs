//! Size and count limits the spec accepts (the CRD's bounds), and fixed etcd facts.

/// Longest string the spec accepts anywhere (URLs, prefixes, file paths, names); the CRD's
/// `maxLength` on every string.
pub const MAX_STRING_LENGTH: usize = 4096;
/// Most endpoints per side; the CRD's `maxItems` of `endpointList`.
pub const MAX_ENDPOINTS: usize = 64;
/// Most `sync.excludePrefixes`; the CRD's `maxItems`.
pub const MAX_EXCLUDE_PREFIXES: usize = 1024;
/// Largest `sync.pageBytes`: a page is held in memory, and read ahead four times.
pub const MAX_PAGE_BYTES: u64 = 64 << 20;
/// Largest `sync.watchBufferBytes`: the buffer is held in memory during genesis.
pub const MAX_WATCH_BUFFER_BYTES: u64 = 1 << 30;

/// The default fence key suffix, placed after `target.prefix + destPrefix`.
pub const DEFAULT_CHECKPOINT_SUFFIX: &str = "\u{0}tidemark-checkpoint";

/// The oldest etcd `--max-request-bytes` default (1.5 MiB); a Txn budget above it would be
/// rejected by a default-configured target.
pub const ETCD_DEFAULT_MAX_REQUEST_BYTES: u64 = 1536 * 1024;
