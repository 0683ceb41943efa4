//! The node's own cgroup: where it is (`/proc/self/cgroup` matched against the cgroup mounts
//! of `/proc/self/mountinfo`) and what it allows — memory limit and usage, CPU quota, cpuset,
//! throttling, pressure — for cgroup v2 and v1 (a hybrid machine mixes them: each controller is
//! read where it is mounted). A container's or a service's limits are the node's real budget:
//! the host's figures alone let a node in a 400 MB cgroup read 20 GiB free.
//!
//! Invariant: every file is read under a root folder (`/` on a machine, a temporary folder of
//! files in tests), and a file that is missing or unreadable means "no limit known", never an
//! error; a limit is the tightest over the cgroup and its ancestors up to the mount, since a
//! parent's limit binds its children.

use std::path::{Path, PathBuf};

/// Which cgroup interface a controller is read through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// cgroup v1: one hierarchy per controller (or a few co-mounted).
    V1,
    /// cgroup v2: the unified hierarchy.
    V2,
}

impl Version {
    /// `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// A v1 limit at or above this is "no limit": the kernel writes `PAGE_COUNTER_MAX` pages in
/// bytes (9223372036854771712 on 4 KiB pages), which no machine has.
const V1_UNLIMITED: u64 = 1 << 60;

/// The node's folder in one hierarchy: the hierarchy's mount and the folder under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Which interface.
    pub version: Version,
    /// The hierarchy's mount point, under the root.
    pub mount: PathBuf,
    /// The node's folder (the mount point or below it).
    pub dir: PathBuf,
}

impl Place {
    /// The node's folder, then each parent up to the mount point, inclusive.
    fn ancestors(&self) -> impl Iterator<Item = &Path> {
        self.dir
            .ancestors()
            .take_while(move |d| d.starts_with(&self.mount))
    }

    /// The text of `file` in the node's folder.
    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(file)).ok()
    }

    /// The tightest value `parse` finds in `file` over the node's folder and its ancestors.
    fn tightest<T: PartialOrd>(&self, file: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
        self.ancestors()
            .filter_map(|d| std::fs::read_to_string(d.join(file)).ok())
            .filter_map(|text| parse(text.trim()))
            .fold(None, |best, v| match best {
                Some(b) if b <= v => Some(b),
                _ => Some(v),
            })
    }
}

/// Where the node's cgroup is, per controller. A controller without a place is not limited
/// as far as the node can see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// The memory controller's folder.
    pub memory: Option<Place>,
    /// The cpu controller's folder (quota, throttling; on v2 also usage).
    pub cpu: Option<Place>,
    /// v1's cpuacct folder (usage).
    pub cpuacct: Option<Place>,
    /// The cpuset controller's folder.
    pub cpuset: Option<Place>,
    /// The node's folder in the v2 hierarchy, for its pressure files.
    pub unified: Option<Place>,
}

/// Memory as the cgroup counts it, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// Which interface it was read through.
    pub version: Version,
    /// The tightest limit over the cgroup and its ancestors (v2: `memory.max` or
    /// `memory.high`, whichever is lower — past `high` the kernel throttles and reclaims);
    /// `None` when nothing limits it.
    pub limit: Option<u64>,
    /// Memory charged to the cgroup, page cache included.
    pub usage: u64,
    /// Inactive file pages: page cache the kernel reclaims before it fails an allocation.
    pub inactive_file: u64,
    /// How many times the OOM killer acted in it (`None` when the kernel does not say).
    pub oom_kills: Option<u64>,
}

impl Memory {
    /// Bytes the cgroup can still take: its limit less its usage, reclaimable page cache
    /// counted as free (as the kernel's `MemAvailable` counts it). `None` without a limit.
    pub fn available(&self) -> Option<u64> {
        let used = self.usage.saturating_sub(self.inactive_file);
        self.limit.map(|l| l.saturating_sub(used))
    }
}

/// CPU as the cgroup allows and counts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cpu {
    /// The tightest CFS quota over the cgroup and its ancestors, in cores (quota ÷ period);
    /// `None` without one.
    pub quota_cores: Option<f64>,
    /// How many CPUs the cpuset allows; `None` when unknown.
    pub cpuset_cores: Option<usize>,
    /// CPU time the cgroup used, µs, cumulative.
    pub usage_usec: Option<u64>,
    /// Enforcement periods elapsed, cumulative.
    pub periods: Option<u64>,
    /// Periods in which the cgroup was throttled, cumulative.
    pub throttled_periods: Option<u64>,
    /// Time throttled, µs, cumulative.
    pub throttled_usec: Option<u64>,
}

impl Cpu {
    /// The cores the cgroup may use: the smallest of `host_cores`, the quota and the cpuset,
    /// and whether the cgroup's bound is the smallest (a tie goes to the host).
    pub fn effective_cores(&self, host_cores: f64) -> (f64, bool) {
        let cgroup = [self.quota_cores, self.cpuset_cores.map(|n| n as f64)]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if cgroup < host_cores {
            (cgroup, true)
        } else {
            (host_cores, false)
        }
    }
}

/// `key value` lines (`memory.stat`, `cpu.stat`, `memory.events`): the value of `key`.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A cpuset list (`0-3,5,7-8`): how many CPUs it names; `None` when empty or malformed.
pub fn cpuset_count(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// A v2 limit file's value: bytes, or `None` for `max`.
fn v2_bytes(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// A v1 limit file's value: bytes, or `None` for the huge "unlimited" number.
fn v1_bytes(s: &str) -> Option<u64> {
    s.parse().ok().filter(|v| *v < V1_UNLIMITED)
}

/// v2 `cpu.max` (`50000 100000`, `max 100000`): cores, or `None` without a quota.
fn v2_quota(s: &str) -> Option<f64> {
    let (quota, period) = s.split_once(' ')?;
    let (quota, period): (f64, f64) = (quota.parse().ok()?, period.trim().parse().ok()?);
    (period > 0.0).then(|| quota / period)
}

/// A `mountinfo` line's mount point, root within its hierarchy, type and super options.
struct MountLine<'a> {
    root: &'a str,
    point: &'a str,
    fs_type: &'a str,
    options: &'a str,
}

fn mount_lines(mountinfo: &str) -> impl Iterator<Item = MountLine<'_>> {
    mountinfo.lines().filter_map(|line| {
        // id parent major:minor root mount-point options [optional…] - type source super
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        Some(MountLine {
            root: fields.get(3)?,
            point: fields.get(4)?,
            fs_type: fields.get(dash + 1)?,
            options: fields.get(dash + 3).copied().unwrap_or(""),
        })
    })
}

/// `path` (absolute) under `root`.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

impl Cgroup {
    /// The node's own cgroup, from this process's `/proc/self/cgroup` and mounts.
    pub fn of_self() -> Cgroup {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Cgroup::locate(
            Path::new("/"),
            &read("/proc/self/cgroup"),
            &read("/proc/self/mountinfo"),
        )
    }

    /// The cgroup `proc_cgroup` (the text of `/proc/<pid>/cgroup`) names, in the hierarchies
    /// `mountinfo` mounts, with every path under `root`. A folder that does not exist is left
    /// out (a hierarchy mounted elsewhere, a process that moved).
    pub fn locate(root: &Path, proc_cgroup: &str, mountinfo: &str) -> Cgroup {
        // hierarchy-id:controllers:path; v2's line has no controllers.
        let memberships: Vec<(Vec<&str>, &str)> = proc_cgroup
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ':');
                let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
                let controllers = controllers.split(',').filter(|c| !c.is_empty()).collect();
                Some((controllers, path))
            })
            .collect();
        let mut out = Cgroup::default();
        for m in mount_lines(mountinfo) {
            let (version, controllers): (Version, Vec<&str>) = match m.fs_type {
                "cgroup2" => (Version::V2, Vec::new()),
                "cgroup" => (Version::V1, m.options.split(',').collect()),
                _ => continue,
            };
            let Some((_, path)) = memberships.iter().find(|(cs, _)| match version {
                Version::V2 => cs.is_empty(),
                Version::V1 => cs.iter().any(|c| controllers.contains(c)),
            }) else {
                continue;
            };
            // A mount of a sub-folder of the hierarchy (a container's view) shows the node's
            // path relative to that folder.
            let rel = match Path::new(path).strip_prefix(m.root) {
                Ok(rel) => rel.to_path_buf(),
                Err(_) => PathBuf::from(path.trim_start_matches('/')),
            };
            let mount = under(root, m.point);
            let dir = mount.join(rel);
            if !dir.is_dir() {
                continue;
            }
            let place = Place {
                version,
                mount,
                dir,
            };
            match version {
                Version::V1 => {
                    for (c, field) in [
                        ("memory", &mut out.memory),
                        ("cpu", &mut out.cpu),
                        ("cpuacct", &mut out.cpuacct),
                        ("cpuset", &mut out.cpuset),
                    ] {
                        if controllers.contains(&c) {
                            *field = Some(place.clone());
                        }
                    }
                }
                Version::V2 => {
                    // On a hybrid machine a controller works where v1 mounted it, and the
                    // unified hierarchy does not list it.
                    let listed = std::fs::read_to_string(place.mount.join("cgroup.controllers"))
                        .unwrap_or_default();
                    for (c, field) in [
                        ("memory", &mut out.memory),
                        ("cpu", &mut out.cpu),
                        ("cpuset", &mut out.cpuset),
                    ] {
                        let free = field.as_ref().is_none_or(|p| p.version == Version::V2);
                        if free && listed.split_whitespace().any(|x| x == c) {
                            *field = Some(place.clone());
                        }
                    }
                }
            }
            if version == Version::V2 {
                out.unified = Some(place);
            }
        }
        out
    }

    /// The memory controller's reading, `None` when the node has none.
    pub fn memory(&self) -> Option<Memory> {
        let p = self.memory.as_ref()?;
        let stat = p.read("memory.stat").unwrap_or_default();
        Some(match p.version {
            Version::V2 => Memory {
                version: Version::V2,
                limit: [
                    p.tightest("memory.max", v2_bytes),
                    p.tightest("memory.high", v2_bytes),
                ]
                .into_iter()
                .flatten()
                .min(),
                usage: p.read("memory.current")?.trim().parse().ok()?,
                inactive_file: keyed(&stat, "inactive_file").unwrap_or(0),
                oom_kills: p.read("memory.events").and_then(|t| keyed(&t, "oom_kill")),
            },
            Version::V1 => Memory {
                version: Version::V1,
                limit: [
                    p.tightest("memory.limit_in_bytes", v1_bytes),
                    keyed(&stat, "hierarchical_memory_limit").filter(|v| *v < V1_UNLIMITED),
                ]
                .into_iter()
                .flatten()
                .min(),
                usage: p.read("memory.usage_in_bytes")?.trim().parse().ok()?,
                inactive_file: keyed(&stat, "total_inactive_file")
                    .or_else(|| keyed(&stat, "inactive_file"))
                    .unwrap_or(0),
                oom_kills: p
                    .read("memory.oom_control")
                    .and_then(|t| keyed(&t, "oom_kill")),
            },
        })
    }

    /// The cpu, cpuacct and cpuset controllers' readings (each part `None` where unknown).
    pub fn cpu(&self) -> Cpu {
        let mut out = Cpu::default();
        if let Some(p) = &self.cpu {
            let stat = p.read("cpu.stat").unwrap_or_default();
            out.periods = keyed(&stat, "nr_periods");
            out.throttled_periods = keyed(&stat, "nr_throttled");
            match p.version {
                Version::V2 => {
                    out.quota_cores = p.tightest("cpu.max", v2_quota);
                    out.usage_usec = keyed(&stat, "usage_usec");
                    out.throttled_usec = keyed(&stat, "throttled_usec");
                }
                Version::V1 => {
                    out.quota_cores = p
                        .ancestors()
                        .filter_map(|d| {
                            let num = |f: &str| -> Option<f64> {
                                std::fs::read_to_string(d.join(f)).ok()?.trim().parse().ok()
                            };
                            let (quota, period) =
                                (num("cpu.cfs_quota_us")?, num("cpu.cfs_period_us")?);
                            (quota > 0.0 && period > 0.0).then(|| quota / period)
                        })
                        .fold(None, |best: Option<f64>, v| {
                            Some(best.map_or(v, |b| b.min(v)))
                        });
                    out.throttled_usec = keyed(&stat, "throttled_time").map(|ns| ns / 1_000);
                }
            }
        }
        // The root cgroup's usage is the whole machine's: a node whose cpuacct folder is the
        // hierarchy's root (cpu and cpuacct mounted apart, the node moved into cpu only) has no
        // usage counter of its own, and is measured against the host.
        if let Some(p) = &self.cpuacct
            && p.version == Version::V1
            && p.dir != p.mount
        {
            out.usage_usec = p
                .read("cpuacct.usage")
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map(|ns| ns / 1_000);
        }
        if let Some(p) = &self.cpuset {
            let files: &[&str] = match p.version {
                Version::V2 => &["cpuset.cpus.effective"],
                Version::V1 => &["cpuset.effective_cpus", "cpuset.cpus"],
            };
            out.cpuset_cores = files
                .iter()
                .find_map(|f| p.read(f).and_then(|t| cpuset_count(&t)));
        }
        out
    }

    /// The cgroup's pressure file for `resource` (`cpu`, `memory`, `io`), when it has one.
    pub fn pressure_file(&self, resource: &str) -> Option<PathBuf> {
        let p = self.unified.as_ref()?;
        let file = p.dir.join(format!("{resource}.pressure"));
        file.is_file().then_some(file)
    }

    /// The cgroup in words, for the log: "memory v1 /sys/fs/cgroup/memory/a/b, cpu v2 …".
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("memory", &self.memory),
            ("cpu", &self.cpu),
            ("cpuset", &self.cpuset),
        ]
        .into_iter()
        .filter_map(|(name, p)| {
            p.as_ref()
                .map(|p| format!("{name} {} {}", p.version.as_str(), p.dir.display()))
        })
        .collect();
        if parts.is_empty() {
            "none found".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake machine: files under a temporary root.
    struct Tree(tempfile::TempDir);

    impl Tree {
        fn new() -> Tree {
            Tree(tempfile::tempdir().unwrap())
        }
        fn root(&self) -> &Path {
            self.0.path()
        }
        fn put(&self, path: &str, text: &str) -> &Tree {
            let p = under(self.root(), path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn dir(&self, path: &str) -> &Tree {
            std::fs::create_dir_all(under(self.root(), path)).unwrap();
            self
        }
        fn locate(&self, proc_cgroup: &str, mountinfo: &str) -> Cgroup {
            Cgroup::locate(self.root(), proc_cgroup, mountinfo)
        }
    }

    const V2_MOUNTS: &str = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

    const V1_MOUNTS: &str = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 22 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const V1_SELF: &str = "\
9:name=systemd:/
4:memory:/svc/node
3:cpuset:/
2:cpu,cpuacct:/svc/node
0::/
";

    const MIB: u64 = 1 << 20;

    #[test]
    fn v2_memory_is_its_limit_less_what_it_cannot_reclaim() {
        let t = Tree::new();
        t.put(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        )
        .put("/sys/fs/cgroup/svc/node/memory.max", "419430400\n")
        .put("/sys/fs/cgroup/svc/node/memory.high", "max\n")
        .put(
            "/sys/fs/cgroup/svc/node/memory.current",
            &format!("{}\n", 380 * MIB),
        )
        .put(
            "/sys/fs/cgroup/svc/node/memory.stat",
            &format!(
                "anon {}\nfile {}\ninactive_file {}\nactive_file 0\n",
                320 * MIB,
                60 * MIB,
                18 * MIB
            ),
        )
        .put(
            "/sys/fs/cgroup/svc/node/memory.events",
            "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n",
        );
        let cg = t.locate("0::/svc/node\n", V2_MOUNTS);
        let m = cg.memory().unwrap();
        assert_eq!(m.version, Version::V2);
        assert_eq!(m.limit, Some(400 * MIB));
        assert_eq!(m.oom_kills, Some(2));
        // 400 − (380 − 18) = 38 MiB.
        assert_eq!(m.available(), Some(38 * MIB));
    }

    #[test]
    fn v2_max_is_no_limit_and_high_is_a_tighter_one() {
        let t = Tree::new();
        t.put("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
            .put("/sys/fs/cgroup/a/memory.max", "max\n")
            .put("/sys/fs/cgroup/a/memory.current", "1000\n");
        let cg = t.locate("0::/a\n", V2_MOUNTS);
        let m = cg.memory().unwrap();
        assert_eq!((m.limit, m.available()), (None, None));
        t.put("/sys/fs/cgroup/a/memory.high", &format!("{}\n", 300 * MIB));
        assert_eq!(cg.memory().unwrap().limit, Some(300 * MIB));
    }

    #[test]
    fn a_parents_limit_binds_its_children() {
        let t = Tree::new();
        t.put("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
            .put("/sys/fs/cgroup/kube/memory.max", &format!("{}\n", 256 * MIB))
            .put("/sys/fs/cgroup/kube/pod/memory.max", "max\n")
            .put("/sys/fs/cgroup/kube/pod/c1/memory.max", &format!("{}\n", 512 * MIB))
            .put("/sys/fs/cgroup/kube/pod/c1/memory.current", &format!("{}\n", 100 * MIB))
            .put("/sys/fs/cgroup/kube/cpu.max", "50000 100000\n")
            .put("/sys/fs/cgroup/kube/pod/c1/cpu.max", "max 100000\n")
            .put(
                "/sys/fs/cgroup/kube/pod/c1/cpu.stat",
                "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 10\nthrottled_usec 900\n",
            );
        let cg = t.locate("0::/kube/pod/c1\n", V2_MOUNTS);
        let m = cg.memory().unwrap();
        assert_eq!(m.limit, Some(256 * MIB));
        assert_eq!(m.available(), Some(156 * MIB));
        let cpu = cg.cpu();
        assert_eq!(cpu.quota_cores, Some(0.5));
        assert_eq!(
            (
                cpu.usage_usec,
                cpu.periods,
                cpu.throttled_periods,
                cpu.throttled_usec
            ),
            (Some(5000), Some(40), Some(10), Some(900))
        );
        assert_eq!(cpu.effective_cores(8.0), (0.5, true));
    }

    #[test]
    fn v2_cpu_without_a_quota_is_bound_by_the_cpuset_or_the_host() {
        let t = Tree::new();
        t.put("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n")
            .put("/sys/fs/cgroup/n/cpu.max", "max 100000\n")
            .put("/sys/fs/cgroup/n/cpuset.cpus.effective", "0-1,4\n");
        let cg = t.locate("0::/n\n", V2_MOUNTS);
        let cpu = cg.cpu();
        assert_eq!((cpu.quota_cores, cpu.cpuset_cores), (None, Some(3)));
        assert_eq!(cpu.effective_cores(8.0), (3.0, true));
        assert_eq!(cpu.effective_cores(2.0), (2.0, false));
    }

    #[test]
    fn v1_reads_each_controller_where_it_is_mounted() {
        let t = Tree::new();
        t.put(
            "/sys/fs/cgroup/memory/svc/node/memory.limit_in_bytes",
            &format!("{}\n", 400 * MIB),
        )
        .put(
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        )
        .put(
            "/sys/fs/cgroup/memory/svc/node/memory.usage_in_bytes",
            &format!("{}\n", 390 * MIB),
        )
        .put(
            "/sys/fs/cgroup/memory/svc/node/memory.stat",
            &format!(
                "cache 1\ninactive_file 5\nhierarchical_memory_limit {}\ntotal_inactive_file {}\n",
                400 * MIB,
                28 * MIB
            ),
        )
        .put(
            "/sys/fs/cgroup/memory/svc/node/memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 339\n",
        )
        .put(
            "/sys/fs/cgroup/cpu,cpuacct/svc/node/cpu.cfs_quota_us",
            "50000\n",
        )
        .put(
            "/sys/fs/cgroup/cpu,cpuacct/svc/node/cpu.cfs_period_us",
            "100000\n",
        )
        .put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
        .put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
        .put(
            "/sys/fs/cgroup/cpu,cpuacct/svc/node/cpu.stat",
            "nr_periods 100\nnr_throttled 60\nthrottled_time 3000000000\n",
        )
        .put(
            "/sys/fs/cgroup/cpu,cpuacct/svc/node/cpuacct.usage",
            "7000000\n",
        )
        .put("/sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-3\n")
        .dir("/sys/fs/cgroup/unified");
        let cg = t.locate(V1_SELF, V1_MOUNTS);
        let m = cg.memory().unwrap();
        assert_eq!(m.version, Version::V1);
        assert_eq!(m.limit, Some(400 * MIB));
        assert_eq!(m.oom_kills, Some(339));
        assert_eq!(m.available(), Some(38 * MIB));
        let cpu = cg.cpu();
        assert_eq!(cpu.quota_cores, Some(0.5));
        assert_eq!(cpu.cpuset_cores, Some(4));
        assert_eq!(cpu.usage_usec, Some(7_000));
        assert_eq!(
            (cpu.periods, cpu.throttled_periods, cpu.throttled_usec),
            (Some(100), Some(60), Some(3_000_000))
        );
        assert_eq!(cpu.effective_cores(2.0), (0.5, true));
        // The unified hierarchy of a hybrid machine has no memory controller of its own here.
        assert_eq!(cg.memory.as_ref().unwrap().version, Version::V1);
        assert!(cg.describe().contains("memory v1"), "{}", cg.describe());
    }

    #[test]
    fn v1_unlimited_is_the_kernels_huge_number() {
        let t = Tree::new();
        t.put(
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        )
        .put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "123\n")
        .put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
        .put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
        t.put("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "123000\n");
        let cg = t.locate("4:memory:/\n2:cpu,cpuacct:/\n", V1_MOUNTS);
        let m = cg.memory().unwrap();
        assert_eq!((m.limit, m.available(), m.oom_kills), (None, None, None));
        // The root's usage is the machine's, not the node's.
        assert_eq!(cg.cpu().usage_usec, None);
        assert_eq!(cg.cpu().quota_cores, None);
        assert_eq!(cg.cpu().effective_cores(4.0), (4.0, false));
    }

    #[test]
    fn a_containers_mount_of_its_own_folder_is_its_cgroup() {
        // Docker without a cgroup namespace: the mount's root is the container's folder and
        // /proc/self/cgroup names the full path.
        let t = Tree::new();
        t.put(
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            &format!("{}\n", 64 * MIB),
        )
        .put(
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
            &format!("{}\n", 60 * MIB),
        );
        let mounts = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let cg = t.locate("4:memory:/docker/abc\n", mounts);
        assert_eq!(cg.memory().unwrap().available(), Some(4 * MIB));
    }

    #[test]
    fn missing_files_and_folders_mean_no_limit_known() {
        let t = Tree::new();
        // Nothing mounted: no cgroup.
        assert_eq!(
            t.locate(V1_SELF, "22 1 253:0 / / rw - ext4 /dev/vda rw\n"),
            Cgroup::default()
        );
        // Mounted, but the node's folder is not there.
        let cg = t.locate(V1_SELF, V1_MOUNTS);
        assert!(cg.memory.is_none() && cg.cpu.is_none(), "{cg:?}");
        // A folder without its files.
        t.dir("/sys/fs/cgroup/memory/svc/node")
            .dir("/sys/fs/cgroup/cpu,cpuacct/svc/node");
        let cg = t.locate(V1_SELF, V1_MOUNTS);
        assert!(cg.memory.is_some());
        assert_eq!(cg.memory(), None);
        assert_eq!(cg.cpu(), Cpu::default());
        assert_eq!(cg.pressure_file("cpu"), None);
    }

    #[test]
    fn pressure_comes_from_the_v2_folder_when_it_has_the_file() {
        let t = Tree::new();
        t.put("/sys/fs/cgroup/cgroup.controllers", "cpu memory io\n")
            .put(
                "/sys/fs/cgroup/n/cpu.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
            );
        let cg = t.locate("0::/n\n", V2_MOUNTS);
        assert_eq!(
            cg.pressure_file("cpu"),
            Some(under(t.root(), "/sys/fs/cgroup/n/cpu.pressure"))
        );
        assert_eq!(cg.pressure_file("io"), None);
    }

    #[test]
    fn cpuset_lists_are_counted() {
        assert_eq!(cpuset_count("0-3\n"), Some(4));
        assert_eq!(cpuset_count("0,2,4-5"), Some(4));
        assert_eq!(cpuset_count("7"), Some(1));
        assert_eq!(cpuset_count(""), None);
        assert_eq!(cpuset_count("3-1"), None);
        assert_eq!(cpuset_count("x"), None);
    }
}
