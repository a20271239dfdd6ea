//! The elastic scaler's decisions (pure, no I/O): how many groups keep a latency objective with
//! the fewest groups, without flapping.
//!
//! The paper sizes the cluster by "stipulating a desired maximum latency and determining the
//! number of groups that are necessary" (section V.C). The rule follows Kubernetes'
//! HorizontalPodAutoscaler, and what its users found lacking:
//!
//! - **Proportional.** The recommendation is `ceil(groups × p95 / objective)`: if the p95 is
//!   twice the objective, twice the groups. Latency is not linear in capacity (it explodes near
//!   saturation), so one step is capped ([`Policy::max_step_up`]) as HPA's `behavior` policies
//!   cap pods per period; the next observation corrects what one step did not.
//! - **A tolerance band.** Within `objective × (1 ± tolerance)` nothing changes (HPA: 10%):
//!   noise around the objective must not move groups.
//! - **Up promptly, down slowly.** A scale-up happens at the first observation that asks for it
//!   (under overload every second counts). A scale-down takes the *highest* recommendation seen
//!   during the stabilization window (HPA: 5 minutes for down, 0 for up), so one quiet moment in
//!   a busy period does not remove a group that the next burst needs; HPA users who scaled on
//!   latency saw exactly that flapping without it.
//! - **One change at a time, then a pause.** Nothing is decided while a reconfiguration runs,
//!   nor during the cooldown after it: the metrics first have to show the new shape (HPA's
//!   users found that acting on metrics of the old shape overshoots).
//! - **No traffic is no information about latency**, but it is about load: with no requests in
//!   a window the recommendation is the minimum, and the stabilization window decides when.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// What the scaler aims for and how cautiously.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The p95 latency to keep.
    pub objective: Duration,
    /// Relative band around the objective in which nothing changes (0.1: ±10%).
    pub tolerance: f64,
    pub min_groups: usize,
    pub max_groups: usize,
    /// A scale-down takes the highest recommendation of this long.
    pub scale_down_window: Duration,
    /// At most this many groups more per decision.
    pub max_step_up: usize,
    /// No decision this long after a change finished.
    pub cooldown: Duration,
}

impl Policy {
    /// A policy for an objective with the defaults used by `cloudbft autoscale`.
    pub fn new(objective: Duration, min_groups: usize, max_groups: usize) -> Policy {
        Policy {
            objective,
            tolerance: 0.1,
            min_groups: min_groups.max(1),
            max_groups: max_groups.max(min_groups.max(1)),
            scale_down_window: Duration::from_secs(60),
            max_step_up: 2,
            cooldown: Duration::from_secs(10),
        }
    }
}

/// One observation: the p95 latency and request rate over the last interval (no p95 when no
/// request completed), and the groups serving now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Time since the scaler started.
    pub at: Duration,
    pub p95: Option<Duration>,
    pub requests_per_second: f64,
    pub groups: usize,
}

/// Why the scaler decided what it did (logged and exported with the numbers behind it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A reconfiguration is running.
    InFlight,
    /// Too soon after the last change.
    Cooldown,
    /// The p95 is within the tolerance band, or the recommendation is the current count.
    WithinTolerance,
    /// The p95 is above the band.
    ScaleUp,
    /// The highest recommendation of the stabilization window is below the current count.
    ScaleDown,
    /// Below the band, but some recommendation of the window still needs the current groups.
    Stabilizing,
    /// At `min_groups` or `max_groups`.
    AtLimit,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::InFlight => "a change is in flight",
            Reason::Cooldown => "cooling down after a change",
            Reason::WithinTolerance => "p95 within the tolerance band",
            Reason::ScaleUp => "p95 above the objective",
            Reason::ScaleDown => "p95 below the objective for the whole window",
            Reason::Stabilizing => "p95 below the objective, not yet for the whole window",
            Reason::AtLimit => "at the group limit",
        })
    }
}

/// A decision: the group count to run (equal to the sample's for no change).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub groups: usize,
    /// What the sample alone asked for, before stabilization and limits.
    pub recommended: usize,
    pub reason: Reason,
}

impl Decision {
    /// Whether the decision changes the group count of `sample`.
    pub fn changes(&self, sample: &Sample) -> bool {
        self.groups != sample.groups
    }
}

/// The scaler's state between observations.
pub struct Scaler {
    policy: Policy,
    /// Recommendations of the stabilization window, oldest first.
    recent: VecDeque<(Duration, usize)>,
    in_flight: bool,
    /// When the last change finished.
    changed_at: Option<Duration>,
}

impl Scaler {
    pub fn new(policy: Policy) -> Scaler {
        Scaler {
            policy,
            recent: VecDeque::new(),
            in_flight: false,
            changed_at: None,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What the sample asks for on its own.
    fn recommend(&self, sample: &Sample) -> usize {
        let p = &self.policy;
        let current = sample.groups.max(1);
        let Some(p95) = sample.p95 else {
            return if sample.requests_per_second > 0.0 {
                current
            } else {
                p.min_groups
            };
        };
        let ratio = p95.as_secs_f64() / p.objective.as_secs_f64().max(1e-9);
        if (ratio - 1.0).abs() <= p.tolerance {
            return current;
        }
        let wanted = (current as f64 * ratio).ceil() as usize;
        wanted
            .min(current + p.max_step_up)
            .clamp(p.min_groups, p.max_groups)
    }

    /// Decides on a new observation.
    pub fn observe(&mut self, sample: Sample) -> Decision {
        let p = self.policy.clone();
        let recommended = self.recommend(&sample);
        self.recent.push_back((sample.at, recommended));
        while self
            .recent
            .front()
            .is_some_and(|&(at, _)| sample.at.saturating_sub(at) > p.scale_down_window)
        {
            self.recent.pop_front();
        }
        let hold = |reason| Decision {
            groups: sample.groups,
            recommended,
            reason,
        };
        if self.in_flight {
            return hold(Reason::InFlight);
        }
        if self
            .changed_at
            .is_some_and(|at| sample.at.saturating_sub(at) < p.cooldown)
        {
            return hold(Reason::Cooldown);
        }
        let current = sample.groups;
        if recommended > current {
            return Decision {
                groups: recommended,
                recommended,
                reason: Reason::ScaleUp,
            };
        }
        if recommended == current {
            let at_limit = current == p.min_groups || current == p.max_groups;
            let above = sample.p95.is_some_and(|l| l > p.objective);
            return hold(if at_limit && above {
                Reason::AtLimit
            } else {
                Reason::WithinTolerance
            });
        }
        // Down: only what every recommendation of a full window allows.
        let since = self.changed_at.unwrap_or_default();
        let window_full = sample.at.saturating_sub(since) >= p.scale_down_window;
        let highest = self
            .recent
            .iter()
            .filter(|&&(at, _)| at >= since)
            .map(|&(_, r)| r)
            .max()
            .unwrap_or(current);
        if !window_full || highest >= current {
            return hold(Reason::Stabilizing);
        }
        Decision {
            groups: highest,
            recommended,
            reason: Reason::ScaleDown,
        }
    }

    /// A change the scaler decided started: nothing more until it finished.
    pub fn started(&mut self) {
        self.in_flight = true;
    }

    /// The change finished (or failed) at `at`: the cooldown starts, and the window starts over
    /// (recommendations made for the old shape say nothing about the new one).
    pub fn finished(&mut self, at: Duration) {
        self.in_flight = false;
        self.changed_at = Some(at);
        self.recent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn sample(at: u64, p95_ms: Option<u64>, groups: usize) -> Sample {
        Sample {
            at: secs(at),
            p95: p95_ms.map(Duration::from_millis),
            requests_per_second: if p95_ms.is_some() { 10.0 } else { 0.0 },
            groups,
        }
    }

    fn scaler() -> Scaler {
        Scaler::new(Policy::new(Duration::from_millis(300), 1, 5))
    }

    #[test]
    fn overload_scales_up_at_once_by_at_most_the_step() {
        let mut s = scaler();
        let d = s.observe(sample(5, Some(2_000), 1));
        assert_eq!((d.groups, d.reason), (3, Reason::ScaleUp));
        assert_eq!(
            d.recommended, 3,
            "7 groups asked for, at most 2 more per step"
        );
        s.started();
        assert_eq!(
            s.observe(sample(10, Some(2_000), 1)).reason,
            Reason::InFlight
        );
        s.finished(secs(12));
        assert_eq!(s.observe(sample(15, Some(900), 3)).reason, Reason::Cooldown);
        let d = s.observe(sample(25, Some(900), 3));
        assert_eq!((d.groups, d.reason), (5, Reason::ScaleUp));
        s.started();
        s.finished(secs(26));
        let d = s.observe(sample(40, Some(900), 5));
        assert_eq!((d.groups, d.reason), (5, Reason::AtLimit));
    }

    #[test]
    fn noise_within_the_band_changes_nothing() {
        let mut s = scaler();
        for (i, ms) in [280, 320, 300, 329, 271, 310].into_iter().enumerate() {
            let d = s.observe(sample(5 * i as u64, Some(ms), 2));
            assert!(!d.changes(&sample(0, None, 2)), "{ms} ms: {d:?}");
        }
    }

    /// Quiet moments inside a busy window do not remove a group; a window that stays quiet
    /// does, to the highest count any of its observations needed.
    #[test]
    fn scale_down_waits_for_a_whole_quiet_window() {
        let mut s = scaler();
        let mut at = 0;
        let mut decide = |s: &mut Scaler, p95: Option<u64>| {
            at += 5;
            s.observe(sample(at, p95, 3))
        };
        for _ in 0..11 {
            let d = decide(&mut s, Some(100));
            assert_eq!(d.reason, Reason::Stabilizing, "{d:?}");
        }
        // A busy moment (at 60 s) inside the window keeps the groups until it leaves the
        // window, more than 60 s later.
        assert_eq!(decide(&mut s, Some(300)).reason, Reason::WithinTolerance);
        for _ in 0..12 {
            assert_eq!(decide(&mut s, Some(100)).groups, 3);
        }
        let d = decide(&mut s, Some(100));
        assert_eq!((d.groups, d.reason), (1, Reason::ScaleDown), "{d:?}");
        // With no traffic at all the minimum is recommended too.
        let mut idle = scaler();
        let mut last = None;
        for i in 1..=13 {
            last = Some(idle.observe(sample(5 * i, None, 2)));
        }
        assert_eq!(last.unwrap().groups, 1);
    }

    /// A load that oscillates around a capacity boundary moves the count at most once per
    /// window in each direction: no flapping.
    #[test]
    fn an_oscillating_load_does_not_flap() {
        let mut s = scaler();
        let mut groups = 2;
        let mut changes = 0;
        for i in 0..120u64 {
            let p95 = if i % 4 < 2 { 250 } else { 150 };
            let d = s.observe(sample(5 * i, Some(p95), groups));
            if d.changes(&sample(0, None, groups)) {
                changes += 1;
                s.started();
                groups = d.groups;
                s.finished(secs(5 * i));
            }
        }
        assert!(changes <= 1, "{changes} changes");
    }
}
