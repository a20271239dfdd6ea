//! Identifiers, each its own type so that a node id is never taken for a client id.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id!(
    /// A client of the cluster: one signing slot of a gateway or load driver.
    ClientId(u64),
    "client#"
);
id!(
    /// A node: primary candidate, group replica or database node.
    NodeId(u32),
    "node#"
);
id!(
    /// A group of 2f+1 replicas.
    GroupId(u32),
    "group#"
);
id!(
    /// The view: which primary candidate orders requests.
    View(u64),
    "view "
);
id!(
    /// The cluster configuration in force (groups, partitions, members); grows with each
    /// reconfiguration.
    ConfigEpoch(u64),
    "config "
);

/// A data partition (TPC-C: a warehouse).
pub type PartitionId = u32;
