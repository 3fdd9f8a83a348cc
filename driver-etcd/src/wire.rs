//! Conversions between etcd-client's types and the core's, shared by the unary executor and
//! the watch streams.

use tidemark_core::etcd::KeyValue;

/// etcd rejects an empty key; "from the first key" is spelled `\0`.
pub(crate) fn etcd_key(key: &[u8], range_end: &[u8]) -> Vec<u8> {
    if key.is_empty() && !range_end.is_empty() {
        vec![0]
    } else {
        key.to_vec()
    }
}

/// The core's key-value for an etcd-client one that stays borrowed (a copy).
pub fn kv_from(kv: &etcd_client::KeyValue) -> KeyValue {
    kv_into(kv.clone())
}

/// The core's key-value for an etcd-client one it owns: the key and value move instead of
/// being copied (a genesis page carries megabytes of values).
pub fn kv_into(kv: etcd_client::KeyValue) -> KeyValue {
    let (create_revision, mod_revision, version, lease) = (
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease(),
    );
    let (key, value) = kv.into_key_value();
    KeyValue {
        key,
        value,
        create_revision,
        mod_revision,
        version,
        lease,
    }
}
