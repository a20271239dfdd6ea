//! The page-generation stage: the paper's 200 ms of work per page on a one-core VM, modelled so
//! that it costs a replica capacity.
//!
//! A replica renders its pages deterministically in the core (microseconds); the paper's stage
//! is what a real web tier spends on top (templates, scripts, compression). Reproducing it as a
//! sleep per page in its own task would let a replica render any number of pages at once, so one
//! group would never saturate and adding groups could not help. Here a replica has
//! `workers` page workers (default 1, the paper's one core): a page waits for a free worker,
//! holds it for the stage's duration, then its REPLY goes out. Waiting pages queue in arrival
//! order (tokio's semaphore is fair).
//!
//! A page goes through the stage once. A client that waited long for its page retransmits its
//! request, and the replica's core answers with the cached REPLY again; rendering that page a
//! second time would spend the stage's capacity on work already done (and under overload, when
//! queues outgrow the client's retransmission timer, every page would be rendered two or three
//! times: the throughput of a saturated group fell to half). So the stage remembers each
//! client's latest page ([`PageStage::admit`]): a REPLY whose page is still in the stage needs
//! nothing more, one whose page went through goes out at once.
//!
//! Two ways to hold a worker for the duration:
//! - [`PageMode::Sleep`]: the worker is busy but no CPU is spent, so a 2-core machine can host
//!   many replicas each with its own "core" (the figures of docs/results/paper.md say which
//!   mode they used);
//! - [`PageMode::Burn`]: the worker spins on a blocking thread until it has used the duration in
//!   CPU time of its own thread, for runs where each replica is capped to one CPU share
//!   (cgroup quota): then the stage takes longer in wall time when the replica's share is
//!   contended, as on an overcommitted host.

use proto::ClientId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How a page worker spends the stage's duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageMode {
    /// Hold the worker for the duration in wall time, without using CPU.
    Sleep,
    /// Spin for the duration in CPU time of the worker's thread.
    Burn,
}

impl PageMode {
    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PageMode::Sleep => "sleep",
            PageMode::Burn => "burn",
        }
    }
}

impl std::str::FromStr for PageMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sleep" => Ok(PageMode::Sleep),
            "burn" => Ok(PageMode::Burn),
            other => Err(format!(
                "unknown page mode \"{other}\": use \"sleep\" (hold a worker, no CPU) or \"burn\" \
                 (spin for the duration in CPU time)"
            )),
        }
    }
}

/// A replica's page workers.
#[derive(Clone)]
pub struct PageStage {
    duration: Duration,
    mode: PageMode,
    workers: Arc<Semaphore>,
    /// Pages waiting for a worker, and pages being worked on (for the metrics).
    queued: Arc<AtomicUsize>,
    busy: Arc<AtomicUsize>,
    /// Where each page's time in the queue and at a worker is recorded, if anywhere.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Each client's latest page: its request's timestamp and whether it is through the stage
    /// (one entry per client identity of the configuration).
    latest: Arc<Mutex<HashMap<ClientId, (u64, bool)>>>,
}

/// What a REPLY needs from the page stage ([`PageStage::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// A new page: through the stage, then out.
    Render,
    /// Its page is in the stage now and goes out when done: nothing more to do.
    InStage,
    /// Its page went through the stage already (or is older than the client's latest): out
    /// at once.
    Rendered,
}

impl PageStage {
    /// A stage of `workers` workers (at least one) taking `duration` per page.
    pub fn new(duration: Duration, workers: usize, mode: PageMode) -> PageStage {
        PageStage {
            duration,
            mode,
            workers: Arc::new(Semaphore::new(workers.max(1))),
            queued: Arc::default(),
            busy: Arc::default(),
            metrics: None,
            latest: Arc::default(),
        }
    }

    /// What the REPLY for `client`'s request `timestamp` needs; a new page is noted as in the
    /// stage, and [`PageStage::rendered`] notes it through.
    pub fn admit(&self, client: ClientId, timestamp: u64) -> Admit {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        match latest.get(&client) {
            Some(&(t, through)) if t == timestamp => {
                if through {
                    Admit::Rendered
                } else {
                    Admit::InStage
                }
            }
            Some(&(t, _)) if t > timestamp => Admit::Rendered,
            _ => {
                latest.insert(client, (timestamp, false));
                Admit::Render
            }
        }
    }

    /// Notes that the page of `client`'s request `timestamp` went through the stage.
    pub fn rendered(&self, client: ClientId, timestamp: u64) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = latest.get_mut(&client).filter(|e| e.0 == timestamp) {
            entry.1 = true;
        }
    }

    /// Records each page's wait and work in `metrics` (stages `page_queue`, `page_work`).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> PageStage {
        self.metrics = Some(metrics);
        self
    }

    /// Whether pages go out at once (a zero duration: no stage).
    pub fn is_instant(&self) -> bool {
        self.duration.is_zero()
    }

    /// Pages waiting for a worker now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Workers busy with a page now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Waits for a free worker and holds it for the stage's duration; returns how long the page
    /// waited in the queue.
    pub async fn render(&self) -> Duration {
        let queued = Instant::now();
        self.queued.fetch_add(1, Ordering::Relaxed);
        // The semaphore lives as long as the stage and is never closed.
        let worker = self.workers.acquire().await;
        self.queued.fetch_sub(1, Ordering::Relaxed);
        let Ok(_worker) = worker else {
            return Duration::ZERO;
        };
        let waited = queued.elapsed();
        let working = Instant::now();
        self.busy.fetch_add(1, Ordering::Relaxed);
        match self.mode {
            PageMode::Sleep => tokio::time::sleep(self.duration).await,
            PageMode::Burn => {
                let duration = self.duration;
                // A panic or cancellation on the blocking thread only ends this page's work.
                let _ = tokio::task::spawn_blocking(move || burn(duration)).await;
            }
        }
        self.busy.fetch_sub(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.stage(crate::metrics::Stage::PageQueue, waited);
            m.stage(crate::metrics::Stage::PageWork, working.elapsed());
        }
        waited
    }
}

/// Spins until this thread has used `duration` of CPU time.
fn burn(duration: Duration) {
    let start = thread_cpu_time();
    let mut x = 0u64;
    while thread_cpu_time().saturating_sub(start) < duration {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// CPU time used by the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_THREAD_CPUTIME_ID exists on
    // every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAGE: Duration = Duration::from_millis(20);

    /// `pages` pages through `workers` workers: never more than `workers` in the stage at once
    /// (watched while they run), and the last page leaves no earlier than the pages ahead of it
    /// could have been worked off, `ceil(pages / workers)` stages in all (a lower bound: it
    /// cannot fail on a slow machine).
    async fn at_most(workers: usize, mode: PageMode) {
        let pages = 4 * workers + 1;
        let stage = PageStage::new(STAGE, workers, mode);
        let started = Instant::now();
        let tasks: Vec<_> = (0..pages)
            .map(|_| {
                let stage = stage.clone();
                tokio::spawn(async move { stage.render().await })
            })
            .collect();
        let watch = {
            let stage = stage.clone();
            tokio::spawn(async move {
                let mut most = 0;
                loop {
                    most = most.max(stage.busy());
                    if stage.busy() == 0 && stage.queued() == 0 {
                        return most;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        for t in tasks {
            t.await.unwrap();
        }
        let most = watch.await.unwrap();
        assert!(
            most <= workers,
            "{most} pages at once with {workers} workers"
        );
        let rounds = pages.div_ceil(workers) as u32;
        assert!(
            started.elapsed() >= STAGE * rounds,
            "{pages} pages through {workers} workers took {:?}, less than {rounds} stages",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn at_most_n_pages_at_once_sleeping() {
        at_most(1, PageMode::Sleep).await;
        at_most(3, PageMode::Sleep).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn at_most_n_pages_at_once_burning() {
        at_most(2, PageMode::Burn).await;
    }

    #[test]
    fn a_page_goes_through_the_stage_once() {
        let stage = PageStage::new(STAGE, 1, PageMode::Sleep);
        let (a, b) = (ClientId(1), ClientId(2));
        assert_eq!(stage.admit(a, 10), Admit::Render);
        // The client retransmits while its page is in the stage, then after it went out.
        assert_eq!(stage.admit(a, 10), Admit::InStage);
        assert_eq!(stage.admit(b, 10), Admit::Render);
        stage.rendered(a, 10);
        assert_eq!(stage.admit(a, 10), Admit::Rendered);
        assert_eq!(stage.admit(b, 10), Admit::InStage);
        // Its next request is a new page; the old one, if asked for again, goes out at once.
        assert_eq!(stage.admit(a, 11), Admit::Render);
        assert_eq!(stage.admit(a, 10), Admit::Rendered);
        stage.rendered(a, 10);
        assert_eq!(stage.admit(a, 11), Admit::InStage);
    }

    #[test]
    fn burning_uses_cpu_time() {
        let start = thread_cpu_time();
        burn(Duration::from_millis(30));
        assert!(thread_cpu_time() - start >= Duration::from_millis(30));
    }

    #[test]
    fn modes_parse_and_unknown_ones_say_what_to_use() {
        assert_eq!("sleep".parse(), Ok(PageMode::Sleep));
        assert_eq!("burn".parse(), Ok(PageMode::Burn));
        let e = "fast".parse::<PageMode>().unwrap_err();
        assert!(e.contains("sleep") && e.contains("burn"), "{e}");
    }
}
