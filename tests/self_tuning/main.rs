//! The self-tuning policy on real nodes under real pressure, with the tests' pacing (1 s
//! samples, 1 s steps, 5 s cooldown): CPU and memory loads from stress-ng (shed and restore
//! order and timing), a disk filling on a tmpfs data folder (writers shed first, writes
//! paused, the node's own writes reduced), and a 2-minute flapping CPU load (at most 2
//! toggles per job per minute, never a job standby while a less important one runs).
//!
//! A node in a 400 MiB memory cgroup with six 90 MB jobs, and one held to half a core with
//! CPU-bound jobs (`cgroup.rs`: the budget read from the cgroup, no OOM kill, throttling seen,
//! sheds in priority order; root and a writable cgroup hierarchy, else a failure under `CI`).
//!
//! A test binary of its own, so that no other test's load runs beside it, and its tests take
//! one lock, so they run one at a time. The machine is shared: each test waits for quiet
//! samples before it applies its load, and judges timing against the samples the node itself
//! recorded. Each prints its figures and decision log (`-- --nocapture`) and keeps both under
//! `target/tmp/self_tuning/` (`<title>.figures.txt`, `<title>.txt`), which `.ci/test` prints
//! after the suite. `.ci/test` installs stress-ng; the disk test mounts a tmpfs and needs
//! root, as CI runs.

mod cgroup;
mod cpu_memory;
mod disk;
mod flapping;
mod pressure;
#[path = "../it/support.rs"]
mod support;
