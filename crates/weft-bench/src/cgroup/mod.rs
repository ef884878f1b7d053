//! The cgroups a job puts its servers in, one kind per file: [`CpuLimit`] (a fraction of a
//! core, `--server-cpu-pct`) and [`MemoryLimit`] (memory and page cache, `weft experiment
//! disk`). Each is made as a child of this process's own group and removed on drop, after
//! its members exited.

mod cpu;
mod memory;

pub use cpu::CpuLimit;
pub use memory::{MemoryLimit, Version};
