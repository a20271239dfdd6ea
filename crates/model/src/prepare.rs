//! PREPARE: the old primary's counters, their content, and the order derivation every replica
//! runs over a sequence of PREPAREs.

/// A client request, abstracted to a small integer (equal integers are the same request, so a
/// repeated one is a duplicate the order book skips).
pub type Request = u8;
/// A global order id, as in COMMIT-DB.
pub type Order = u8;
/// A counter of the old primary's USIG (1-based).
pub type Counter = u8;
/// A group (0-based).
pub type Group = u8;

/// One PREPARE: one request routed to one group. The old primary's USIG gives exactly one
/// PREPARE per counter, so the model fixes the content of every counter in the initial state;
/// the Byzantine old primary's freedom is *whom* it delivers each counter to (possibly nobody:
/// a skipped counter), not what it says.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Prepare {
    pub request: Request,
    pub group: Group,
}

/// A set of counters `1..=8` (bit `c - 1`).
#[derive(Clone, Copy, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Counters(pub u8);

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Counters {
    /// `1..=last`.
    pub fn up_to(last: Counter) -> Self {
        Counters(((1u16 << last) - 1) as u8)
    }
    pub fn contains(self, c: Counter) -> bool {
        self.0 & (1 << (c - 1)) != 0
    }
    pub fn insert(&mut self, c: Counter) {
        self.0 |= 1 << (c - 1);
    }
    pub fn union(self, other: Counters) -> Self {
        Counters(self.0 | other.0)
    }
    /// The highest counter in the set (0 if empty).
    pub fn max(self) -> Counter {
        (8 - self.0.leading_zeros()) as Counter
    }
    pub fn iter(self) -> impl Iterator<Item = Counter> {
        (1..=8).filter(move |&c| self.contains(c))
    }
}

/// The deterministic derivation of order ids that every replica runs over the sequence of
/// PREPAREs it processes: in view 0 the old primary's PREPAREs in counter order; after the view
/// change the sequence `S` of the NEW-VIEW followed by the new primary's PREPAREs. Entries get
/// consecutive order ids from 1 in sequence order; a null entry (`None`) and a duplicate (a
/// request that already got an order) get none. This is the protocol's order book without
/// partitions and client timestamps.
pub fn derive_orders(entries: impl IntoIterator<Item = Option<Request>>) -> Vec<Option<Order>> {
    let mut next: Order = 1;
    let mut ordered = 0u32;
    entries
        .into_iter()
        .map(|entry| {
            let request = entry?;
            if ordered & (1 << request) != 0 {
                return None;
            }
            ordered |= 1 << request;
            next += 1;
            Some(next - 1)
        })
        .collect()
}

/// Every content the old primary can give its counters `1..=n`, up to renaming requests and
/// groups: requests are numbered by first appearance (a counter repeats an earlier request or
/// brings the next new one) and counter 1 goes to group 0.
pub fn old_primary_prepares(groups: usize, n: usize) -> Vec<Vec<Prepare>> {
    let mut out = vec![Vec::new()];
    for c in 0..n {
        let mut next = Vec::new();
        for prefix in &out {
            let fresh = prefix
                .iter()
                .map(|p: &Prepare| p.request)
                .max()
                .unwrap_or(0)
                + 1;
            let groups = if c == 0 { 1 } else { groups };
            for request in 1..=fresh {
                for group in 0..groups {
                    let mut seq = prefix.clone();
                    seq.push(Prepare {
                        request,
                        group: group as Group,
                    });
                    next.push(seq);
                }
            }
        }
        out = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_skip_nulls_and_duplicates() {
        let got = derive_orders([Some(1), None, Some(2), Some(1), Some(3)]);
        assert_eq!(got, vec![Some(1), None, Some(2), None, Some(3)]);
    }

    #[test]
    fn old_primary_contents_are_enumerated_up_to_renaming() {
        // Request patterns for 3 counters: 111 112 121 122 123 (Bell number 5).
        assert_eq!(old_primary_prepares(1, 3).len(), 5);
        assert_eq!(old_primary_prepares(2, 2).len(), 4);
    }

    #[test]
    fn counter_sets() {
        let s = Counters::up_to(3);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(s.max(), 3);
        assert_eq!(Counters::default().max(), 0);
    }
}
