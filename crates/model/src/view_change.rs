//! VIEW-CHANGE: what a replica's log must contain, given what it warranted.

use crate::prepare::{Counter, Counters};

/// What a warranted COMMIT vouches for, and so what a VIEW-CHANGE log must show for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitRule {
    /// docs/protocol.md as written: a COMMIT carries its PREPARE; a VIEW-CHANGE must list every
    /// message its sender warranted (consecutive USIG counters), so every COMMIT with its PREPARE
    /// is forced into the log. The PREPAREs the sender merely *accepted* (those of other groups,
    /// those of its group it did not COMMIT) are listed on its word: a Byzantine sender may leave
    /// them out.
    AsDesigned,
    /// The fix: a COMMIT for counter c also vouches for every PREPARE `1..c` the sender processed
    /// before it (its warranted messages acknowledge the old primary's counters consecutively,
    /// e.g. each COMMIT names the counters processed since the sender's previous warranted
    /// message with their digests, and a peer counts a COMMIT only after the sender's earlier
    /// ones). A VIEW-CHANGE must then contain the PREPAREs `1..=c` for its highest COMMIT c.
    Chained,
}

impl CommitRule {
    /// The part of a VIEW-CHANGE log forced by the sender's warranted COMMITs.
    pub fn forced_log(self, commits: Counters) -> Counters {
        match self {
            CommitRule::AsDesigned => commits,
            CommitRule::Chained => Counters::up_to(commits.max()),
        }
    }
}

/// A correct replica's log: every PREPARE it processed (a prefix of the counters).
pub fn correct_log(processed: Counter) -> Counters {
    Counters::up_to(processed)
}
