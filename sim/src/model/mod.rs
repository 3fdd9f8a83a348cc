//! Models of the outside world the mirror talks to.

pub mod etcd;
pub mod store;

pub use etcd::{EtcdCluster, WatchOut};
pub use store::{Mutation, Store};
