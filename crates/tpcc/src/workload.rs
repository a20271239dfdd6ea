//! What a terminal sends: the transaction mix and each transaction's inputs (clauses 2.4.1 to
//! 2.8.1, 5.2.3), and the keying and think times of clause 5.2.5.
//!
//! A [`Terminal`] has a home warehouse and district, as the specification's terminals do. It
//! draws everything the specification draws at random, including the 1% of New-Orders whose
//! last item is unused (they roll back) and the remote supply warehouses and customers that make
//! a transaction multi-partition, and reads dates from the clock it is given, so an operation is
//! complete before it is ordered.

use crate::random::{last_name, NuRandConstants, TpccRng};
use crate::txn::{
    CustomerSelector, Delivery, NewOrder, NewOrderLine, OrderStatus, Payment, StockLevel, TpccOp,
    TxnKind,
};
use crate::ScaleConfig;
use std::time::Duration;

/// The mix in percent (clause 5.2.3: at least 43% Payment and 4% each of Order-Status,
/// Delivery and Stock-Level; New-Order takes the rest).
pub const MIX: [(TxnKind, i64); 5] = [
    (TxnKind::NewOrder, 45),
    (TxnKind::Payment, 43),
    (TxnKind::OrderStatus, 4),
    (TxnKind::Delivery, 4),
    (TxnKind::StockLevel, 4),
];

/// The database a terminal works against: how many warehouses and the loaded cardinalities.
#[derive(Clone, Copy, Debug)]
pub struct Population {
    pub warehouses: u32,
    pub scale: ScaleConfig,
    /// The run's NURand constants ([`NuRandConstants::for_run`] of the load's).
    pub constants: NuRandConstants,
}

/// One emulated terminal.
#[derive(Clone, Debug)]
pub struct Terminal {
    w_id: u32,
    d_id: u32,
    population: Population,
    rng: TpccRng,
}

impl Terminal {
    /// Terminal `index` of a run: terminals are spread over the warehouses first, then over
    /// the districts, and each draws from its own stream of `seed`.
    pub fn new(index: u64, population: Population, seed: u64) -> Terminal {
        let warehouses = u64::from(population.warehouses.max(1));
        let districts = population.scale.districts_per_warehouse.max(1) as u64;
        Terminal {
            w_id: (index % warehouses) as u32 + 1,
            d_id: ((index / warehouses) % districts) as u32 + 1,
            population,
            rng: TpccRng::stream(seed, index),
        }
    }

    /// The home warehouse.
    pub fn w_id(&self) -> u32 {
        self.w_id
    }

    /// The next transaction, with `now` (seconds since the Unix epoch) as its date.
    pub fn next(&mut self, now: i64) -> TpccOp {
        let mut roll = self.rng.uniform(1, 100);
        let mut kind = TxnKind::NewOrder;
        for (k, percent) in MIX {
            if roll <= percent {
                kind = k;
                break;
            }
            roll -= percent;
        }
        match kind {
            TxnKind::NewOrder => self.new_order(now),
            TxnKind::Payment => self.payment(now),
            TxnKind::OrderStatus => self.order_status(),
            TxnKind::Delivery => TpccOp::Delivery(Delivery {
                w_id: self.w_id,
                o_carrier_id: self.rng.uniform(1, 10) as u32,
                delivery_d: now,
            }),
            TxnKind::StockLevel => TpccOp::StockLevel(StockLevel {
                w_id: self.w_id,
                d_id: self.d_id,
                threshold: self.rng.uniform(10, 20) as u32,
            }),
        }
    }

    fn district(&mut self) -> u32 {
        self.rng
            .uniform(1, self.population.scale.districts_per_warehouse) as u32
    }

    fn customer_id(&mut self) -> u32 {
        let customers = self.population.scale.customers_per_district;
        self.rng
            .nurand(1023, 1, customers, self.population.constants.c_id) as u32
    }

    /// By last name 60% of the time (clauses 2.5.1.2, 2.6.1.2). The loader names the first
    /// 1,000 customers of a district after their number, so names are drawn from those.
    fn customer(&mut self) -> CustomerSelector {
        if self.rng.percent(60) {
            let names = self.population.scale.customers_per_district.min(1000) - 1;
            let n = self
                .rng
                .nurand(255, 0, names, self.population.constants.c_last);
            CustomerSelector::LastName(last_name(n))
        } else {
            CustomerSelector::Id(self.customer_id())
        }
    }

    /// Another warehouse than the home one, uniformly; the home one if there is no other.
    fn remote_warehouse(&mut self) -> u32 {
        let warehouses = self.population.warehouses;
        if warehouses < 2 {
            return self.w_id;
        }
        let other = self.rng.uniform(1, i64::from(warehouses) - 1) as u32;
        if other >= self.w_id {
            other + 1
        } else {
            other
        }
    }

    /// Clause 2.4.1: 5 to 15 lines, items by NURand, 1% of supply warehouses remote, and in 1%
    /// of orders an unused last item.
    fn new_order(&mut self, now: i64) -> TpccOp {
        let d_id = self.district();
        let c_id = self.customer_id();
        let count = self.rng.uniform(5, 15);
        let rollback = self.rng.percent(1);
        let items = self.population.scale.items;
        let lines = (1..=count)
            .map(|n| {
                let i_id = if rollback && n == count {
                    items + 1
                } else {
                    self.rng
                        .nurand(8191, 1, items, self.population.constants.ol_i_id)
                };
                let supply_w_id = if self.rng.percent(1) {
                    self.remote_warehouse()
                } else {
                    self.w_id
                };
                NewOrderLine {
                    i_id: i_id as u32,
                    supply_w_id,
                    quantity: self.rng.uniform(1, 10) as u32,
                }
            })
            .collect();
        TpccOp::NewOrder(NewOrder {
            w_id: self.w_id,
            d_id,
            c_id,
            entry_d: now,
            lines,
        })
    }

    /// Clause 2.5.1: 85% of customers pay at their home district, 15% at a remote warehouse.
    fn payment(&mut self, now: i64) -> TpccOp {
        let d_id = self.district();
        let (c_w_id, c_d_id) = if self.rng.percent(85) {
            (self.w_id, d_id)
        } else {
            (self.remote_warehouse(), self.district())
        };
        TpccOp::Payment(Payment {
            w_id: self.w_id,
            d_id,
            c_w_id,
            c_d_id,
            customer: self.customer(),
            h_amount: self.rng.uniform(100, 500_000),
            h_date: now,
        })
    }

    fn order_status(&mut self) -> TpccOp {
        TpccOp::OrderStatus(OrderStatus {
            w_id: self.w_id,
            d_id: self.district(),
            customer: self.customer(),
        })
    }

    /// The keying time before a transaction and a think time after it (clause 5.2.5.7): fixed
    /// keying times, think times drawn from a negative exponential distribution with the
    /// specification's mean, truncated at ten times the mean.
    pub fn keying_and_think(&mut self, kind: TxnKind) -> (Duration, Duration) {
        let (keying_s, think_mean_s) = match kind {
            TxnKind::NewOrder => (18, 12),
            TxnKind::Payment => (3, 12),
            TxnKind::OrderStatus => (2, 10),
            TxnKind::Delivery => (2, 5),
            TxnKind::StockLevel => (2, 5),
        };
        // u in (0, 1], from 53 random bits.
        let u = ((self.rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let think = (-u.ln() * think_mean_s as f64).min(10.0 * think_mean_s as f64);
        (
            Duration::from_secs(keying_s),
            Duration::from_secs_f64(think),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn population(warehouses: u32) -> Population {
        Population {
            warehouses,
            scale: ScaleConfig {
                items: 1_000,
                districts_per_warehouse: 10,
                customers_per_district: 300,
                orders_per_district: 300,
            },
            constants: NuRandConstants::for_load(1).for_run(2),
        }
    }

    #[test]
    fn the_mix_and_the_multi_partition_share_follow_the_specification() {
        let mut counts = std::collections::HashMap::new();
        let (mut remote, mut rollbacks, mut new_orders) = (0, 0, 0);
        let n = 20_000;
        for t in 0..20 {
            let mut terminal = Terminal::new(t, population(4), 7);
            for _ in 0..n / 20 {
                let op = terminal.next(1_800_000_000);
                assert!(op.validate(4).is_ok(), "{op:?}");
                assert!(op.warehouses().contains(&terminal.w_id()));
                *counts.entry(op.kind()).or_insert(0) += 1;
                remote += usize::from(op.warehouses().len() > 1);
                if let TpccOp::NewOrder(o) = &op {
                    new_orders += 1;
                    rollbacks += usize::from(o.lines.iter().any(|l| l.i_id > 1_000));
                }
            }
        }
        let share = |k| counts[&k] as f64 / n as f64;
        assert!((share(TxnKind::NewOrder) - 0.45).abs() < 0.02);
        assert!((share(TxnKind::Payment) - 0.43).abs() < 0.02);
        for k in [TxnKind::OrderStatus, TxnKind::Delivery, TxnKind::StockLevel] {
            assert!((share(k) - 0.04).abs() < 0.01, "{k:?}");
        }
        // 15% of Payments and ~10% of New-Orders (1% of ~10 lines) are remote: ~11% overall.
        let remote = remote as f64 / n as f64;
        assert!((0.08..0.14).contains(&remote), "{remote}");
        let rollbacks = rollbacks as f64 / new_orders as f64;
        assert!((0.003..0.02).contains(&rollbacks), "{rollbacks}");
    }

    #[test]
    fn one_warehouse_never_goes_remote_and_a_seed_replays() {
        let mut a = Terminal::new(3, population(1), 9);
        let mut b = Terminal::new(3, population(1), 9);
        for _ in 0..2_000 {
            let op = a.next(5);
            assert_eq!(op.warehouses(), vec![1]);
            assert_eq!(op, b.next(5));
        }
    }

    #[test]
    fn think_times_are_truncated_exponentials() {
        let mut t = Terminal::new(0, population(1), 1);
        let mut total = 0.0;
        for _ in 0..10_000 {
            let (keying, think) = t.keying_and_think(TxnKind::Payment);
            assert_eq!(keying, Duration::from_secs(3));
            assert!(think <= Duration::from_secs(120));
            total += think.as_secs_f64();
        }
        let mean = total / 10_000.0;
        assert!((11.0..13.0).contains(&mean), "{mean}");
    }
}
