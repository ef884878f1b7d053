//! Global FIFO: one locked queue shared by every processor.
//!
//! The baseline that does not scale: every push and pop takes the same lock, and nothing is
//! local. It is perfectly fair (first in, first out across the whole cluster), which makes it the
//! reference the other policies are measured against.

use crate::loom::{AtomicUsize, Ordering};
use crate::poison::Recover;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{LocalQueue, Origin, Policy, Task};

/// The shared queue.
pub struct GlobalFifo {
    queue: Mutex<VecDeque<Task>>,
    /// Mirrors `queue.len()` so `has_work` and `len` need no lock.
    len: AtomicUsize,
}

impl GlobalFifo {
    pub fn new(_processors: usize) -> GlobalFifo {
        GlobalFifo {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    fn push(&self, task: Task) {
        let mut q = self.queue.lock().recover();
        q.push_back(task);
        self.len.store(q.len(), Ordering::Release);
    }

    fn pop(&self) -> Option<Task> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.queue.lock().recover();
        let task = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        task
    }
}

impl Policy for GlobalFifo {
    fn name(&self) -> &'static str {
        "global-fifo"
    }

    fn local(self: Arc<Self>, _index: usize) -> Box<dyn LocalQueue> {
        Box::new(Local { shared: self })
    }

    fn push_remote(&self, task: Task) {
        self.push(task);
    }

    fn has_work(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }
}

struct Local {
    shared: Arc<GlobalFifo>,
}

impl LocalQueue for Local {
    fn push(&mut self, task: Task, _origin: Origin) {
        self.shared.push(task);
    }

    fn pop(&mut self, _tick: u64) -> Option<Task> {
        self.shared.pop()
    }

    fn steal(&mut self) -> Option<Task> {
        self.shared.pop()
    }

    fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }
}
