//! Option pricing: American puts priced on binomial trees of [`STEPS`] steps, each backward
//! induction step split recursively into sub-tasks of at most [`GRAIN`] nodes that are spawned
//! and joined (fork-join, the shape of divide-and-conquer numerical code).
//!
//! `--tasks` options are spawned at once; each option's latency is spawn → priced, and
//! throughput is options per second. `subtasks` counts the fork-join tasks spawned. Schedulers
//! differ in where a forked half runs (the forking processor, LIFO, keeps it in cache; a thief
//! takes the other half) and in how much a join that finds its half unfinished costs.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use super::latency::Latencies;
use super::{packet, Outcome, Params, Runtime, Study};

/// Tree depth per option.
pub const STEPS: usize = 512;

/// Largest node range computed without forking.
pub const GRAIN: usize = 64;

/// An American put on a recombining binomial tree (Cox–Ross–Rubinstein).
#[derive(Debug, Clone, Copy)]
pub struct Model {
    spot: f64,
    strike: f64,
    up: f64,
    down: f64,
    /// Risk-neutral probability of an up move.
    p_up: f64,
    /// One step's discount factor.
    discount: f64,
}

impl Model {
    /// Option `i` of a run: strikes spread around the spot so options differ.
    pub fn nth(i: u64) -> Model {
        let (rate, vol, years) = (0.05, 0.2, 1.0);
        let dt = years / STEPS as f64;
        let up = (vol * dt.sqrt()).exp();
        let down = 1.0 / up;
        Model {
            spot: 100.0,
            strike: 90.0 + (i % 21) as f64,
            up,
            down,
            p_up: ((rate * dt).exp() - down) / (up - down),
            discount: (-rate * dt).exp(),
        }
    }

    /// The exercise value at node `j` (up moves) of step `step`.
    fn exercise(&self, step: usize, j: usize) -> f64 {
        let price = self.spot * self.up.powi(j as i32) * self.down.powi((step - j) as i32);
        (self.strike - price).max(0.0)
    }

    /// The values at maturity.
    fn leaves(&self) -> Vec<f64> {
        (0..=STEPS).map(|j| self.exercise(STEPS, j)).collect()
    }

    /// Nodes `lo..hi` of step `step` from the values of step `step + 1`.
    fn nodes(&self, next: &[f64], step: usize, lo: usize, hi: usize) -> Vec<f64> {
        (lo..hi)
            .map(|j| {
                let hold = self.discount * (self.p_up * next[j + 1] + (1.0 - self.p_up) * next[j]);
                hold.max(self.exercise(step, j))
            })
            .collect()
    }

    /// The price, computed sequentially (the reference for the parallel versions).
    pub fn price_sequential(&self) -> f64 {
        let mut values = self.leaves();
        for step in (0..STEPS).rev() {
            values = self.nodes(&values, step, 0, step + 1);
        }
        values[0]
    }
}

/// Counts fork-join sub-tasks.
static SUBTASKS: AtomicU64 = AtomicU64::new(0);

fn induct_weft(m: Model, next: Arc<Vec<f64>>, step: usize, lo: usize, hi: usize) -> Vec<f64> {
    if hi - lo <= GRAIN {
        return m.nodes(&next, step, lo, hi);
    }
    let mid = lo + (hi - lo) / 2;
    SUBTASKS.fetch_add(1, Ordering::Relaxed);
    let left = {
        let next = next.clone();
        weft::spawn(move || induct_weft(m, next, step, lo, mid))
    };
    let right = induct_weft(m, next, step, mid, hi);
    let mut values = left.join().expect("a pricing sub-task panicked");
    values.extend(right);
    values
}

fn price_weft(m: Model) -> f64 {
    let mut values = Arc::new(m.leaves());
    for step in (0..STEPS).rev() {
        values = Arc::new(induct_weft(m, values, step, 0, step + 1));
    }
    values[0]
}

type BoxedValues = Pin<Box<dyn Future<Output = Vec<f64>> + Send>>;

fn induct_tokio(m: Model, next: Arc<Vec<f64>>, step: usize, lo: usize, hi: usize) -> BoxedValues {
    Box::pin(async move {
        if hi - lo <= GRAIN {
            return m.nodes(&next, step, lo, hi);
        }
        let mid = lo + (hi - lo) / 2;
        SUBTASKS.fetch_add(1, Ordering::Relaxed);
        let left = tokio::spawn(induct_tokio(m, next.clone(), step, lo, mid));
        let right = induct_tokio(m, next, step, mid, hi).await;
        let mut values = left.await.expect("a pricing sub-task panicked");
        values.extend(right);
        values
    })
}

async fn price_tokio(m: Model) -> f64 {
    let mut values = Arc::new(m.leaves());
    for step in (0..STEPS).rev() {
        values = Arc::new(induct_tokio(m, values, step, 0, step + 1).await);
    }
    values[0]
}

struct Shared {
    total: u64,
    done: AtomicU64,
    latencies: Latencies,
    /// Sum of prices, checked against the sequential computation.
    prices: Mutex<Vec<f64>>,
    finished: packet::Finished,
}

impl Shared {
    fn priced(&self, i: u64, price: f64, since: Instant) {
        self.latencies.record(i as usize, since);
        self.prices.lock().unwrap_or_else(|p| p.into_inner())[i as usize] = price;
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.total {
            self.finished.signal();
        }
    }
}

/// Prices `--tasks` options and checks every price against the sequential one.
pub fn run(params: &Params) -> io::Result<Outcome> {
    let total = params.tasks_for(Study::Options);
    let (tx, finished) = mpsc::channel();
    let shared = Arc::new(Shared {
        total,
        done: AtomicU64::new(0),
        latencies: Latencies::new(total as usize),
        prices: Mutex::new(vec![f64::NAN; total as usize]),
        finished: packet::Finished::new(tx),
    });
    let subtasks_before = SUBTASKS.load(Ordering::Relaxed);
    let started = Instant::now();
    match params.runtime {
        Runtime::Weft => {
            let cluster = params.cluster("study-options")?;
            for i in 0..total {
                let (shared, since) = (shared.clone(), Instant::now());
                drop(cluster.spawn(move || shared.priced(i, price_weft(Model::nth(i)), since)));
            }
            packet::wait(&finished, total)?;
            cluster.shutdown();
        }
        Runtime::Tokio => {
            let rt = params.tokio()?;
            for i in 0..total {
                let (shared, since) = (shared.clone(), Instant::now());
                drop(rt.spawn(
                    async move { shared.priced(i, price_tokio(Model::nth(i)).await, since) },
                ));
            }
            packet::wait(&finished, total)?;
            rt.shutdown_background();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let subtasks = SUBTASKS.load(Ordering::Relaxed) - subtasks_before;
    let prices = shared.prices.lock().unwrap_or_else(|p| p.into_inner());
    for (i, &got) in prices.iter().enumerate() {
        let want = Model::nth(i as u64).price_sequential();
        if (got - want).abs() > 1e-9 * want.abs().max(1.0) {
            return Err(io::Error::other(format!(
                "option {i}: priced {got}, the sequential computation says {want}"
            )));
        }
    }
    Ok(Outcome::new(
        Study::Options,
        params,
        total,
        seconds,
        shared.latencies.percentiles(),
    )
    .with("steps", STEPS as u64)
    .with("subtasks", subtasks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_at_the_money_put_has_the_textbook_price() {
        // S = K = 100, r = 5%, sigma = 20%, T = 1: about 6.09 (Hull's tables).
        let m = Model::nth(10);
        assert_eq!(m.strike, 100.0);
        let p = m.price_sequential();
        assert!((6.0..6.2).contains(&p), "{p}");
    }

    #[test]
    fn weft_and_tokio_agree_with_the_sequential_price() {
        for runtime in [Runtime::Weft, Runtime::Tokio] {
            let mut params = Params::new(runtime, 2);
            params.tasks = Some(3);
            let o = run(&params).unwrap();
            assert_eq!(o.tasks, 3);
            assert!(o.extra_f64("subtasks").unwrap() > 0.0);
        }
    }
}
